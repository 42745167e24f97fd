package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	tritonbuild "github.com/tritonbuild/tritonbuild"
	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/recipes"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// globals are the flags every command shares.
type globals struct {
	config  string
	profile string
	recipes []string
	store   string
	sets    []string
	// probed is the host probe, taken once per command: planning and the
	// launcher both need it.
	probed *toolchain.Host
	// drawing draws the engine's progress for the running command.
	drawing *progress
	// stderr receives warnings (skipped recipes); set when a command runs.
	stderr io.Writer
}

func (g *globals) host(cmd *cobra.Command) (*toolchain.Host, error) {
	if g.probed == nil {
		h, err := toolchain.Probe(ctxOf(cmd), toolchain.ProbeOptions{Tools: []string{}})
		if err != nil {
			return nil, err
		}
		g.probed = h
	}
	return g.probed, nil
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "tritonbuild",
		Short: "Build, package and serve a CPU-only Triton-style inference stack from source",
		Long: `tritonbuild turns declarative recipes (recipes/*.yaml, overlaid by --recipes)
and a project config (build.yaml) into a content-hashed plan, then fetches,
builds and installs each node into a store of immutable install trees, and
assembles OCI images from them.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			g.stderr = cmd.ErrOrStderr()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.config, "config", "c", "", "project config (default: the nearest build.yaml)")
	pf.StringVarP(&g.profile, "profile", "p", "", "named profile of build.yaml to apply")
	pf.StringArrayVar(&g.recipes, "recipes", nil, "directory of user recipes overriding built-ins by name (repeatable)")
	pf.StringArrayVar(&g.sets, "set", nil, "override a setting of build.yaml and the profile: "+recipe.SetSyntax+" (repeatable)")
	pf.StringVar(&g.store, "store", "", "store directory (default: build.yaml's store, $TRITONBUILD_STORE, or the user cache dir)")
	root.AddCommand(
		newPlanCmd(g), newFetchCmd(g), newBuildCmd(g), newAllCmd(g), newInstallCmd(g),
		newLogsCmd(g), newSchemaCmd(), newSourceCmd(g), newGCCmd(g),
		newNewCmd(), newPyenvCmd(),
	)
	addToolchainCommands(root, g)
	addCacheCommands(root, g)
	addImageCommands(root, g)
	stopProgressAfterRun(root, g)
	return root
}

// stopProgressAfterRun makes every command wait, before it returns, until
// the progress it reported is drawn (a bar's last state, a transfer's
// final line).
func stopProgressAfterRun(c *cobra.Command, g *globals) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			defer func() {
				if g.drawing != nil {
					g.drawing.stop()
				}
			}()
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		stopProgressAfterRun(sub, g)
	}
}

func (g *globals) open() (*builder.Project, error) {
	cfg, explicit := g.config, g.config != ""
	if cfg == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		cfg = recipe.FindConfig(wd)
	}
	p, err := builder.OpenProject(builder.ProjectOptions{
		ConfigFile:     cfg,
		ConfigExplicit: explicit,
		Profile:        g.profile,
		RecipeDirs:     g.recipes,
		StoreDir:       g.store,
		Sets:           g.sets,
		Builtin:        recipes.FS(),
		BuiltinLabel:   "recipes",
		ProjectDirHint: tritonbuild.Checkout(),
		BuiltinSources: tritonbuild.Embedded(),
		BuiltinConfig:  tritonbuild.BuildConfig(),
	})
	if err != nil {
		return nil, err
	}
	// A broken user recipe stops only the commands that need it.
	if g.stderr != nil {
		for _, name := range p.Recipes.BrokenNames() {
			fmt.Fprintf(g.stderr, "warning: skipping recipe %s: %v\n", name, p.Recipes.Broken(name))
		}
	}
	return p, nil
}

// openPlan opens the project and plans targets (default: build.yaml's),
// the first two steps of most commands.
func (g *globals) openPlan(cmd *cobra.Command, targets []string) (*builder.Project, *builder.Plan, error) {
	p, err := g.open()
	if err != nil {
		return nil, nil, err
	}
	plan, err := p.Plan(ctxOf(cmd), targets, nil)
	if err != nil {
		return nil, nil, err
	}
	return p, plan, nil
}

// executor wires the library's executor to the terminal: status lines
// and progress go to stderr.
func (g *globals) executor(p *builder.Project, cmd *cobra.Command) *builder.Executor {
	return &builder.Executor{
		Store:        p.Store,
		ProjectDir:   p.SourceDir,
		Settings:     p.Settings,
		Config:       p.Config,
		Out:          cmd.ErrOrStderr(),
		Progress:     g.progress(cmd).steps,
		FetchOptions: g.fetchOptions(cmd),
	}
}

// progress is the command's progress drawing on stderr, started once.
func (g *globals) progress(cmd *cobra.Command) *progress {
	if g.drawing == nil {
		g.drawing = startProgress(cmd.ErrOrStderr())
	}
	return g.drawing
}

// fetchOptions send download progress to the drawing and notes to stderr.
func (g *globals) fetchOptions(cmd *cobra.Command) fetch.Options {
	return fetch.Options{Progress: g.progress(cmd).fetch, Log: cmd.ErrOrStderr()}
}

func ctxOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
