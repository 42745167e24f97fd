package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/remote"
)

func newPlanCmd(g *globals) *cobra.Command {
	var asJSON bool
	var force []string
	cmd := &cobra.Command{
		Use:   "plan [NAME...]",
		Short: "Show the build order, hashes and what would be built and why (no network unless build.yaml names a binary cache)",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			opts, err := g.buildOptions(cmd, p, args, force)
			if err != nil {
				return err
			}
			plan, err := p.PlanBuild(ctxOf(cmd), opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(plan)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tHASH\tSTATUS\tJOBS\tWHY")
			for _, n := range plan.Nodes {
				jobs := "-"
				if n.Jobs != nil && n.Status == builder.StatusBuild {
					jobs = fmt.Sprintf("%d/%d (%s)", n.Jobs.Compile, n.Jobs.Link, n.Jobs.Why)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Version, n.ShortHash(), n.Status, jobs, n.Reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"nodes":[{"name","version","hash","status","depends"}]}`)
	cmd.Flags().StringArrayVar(&force, "force", nil, "plan NAME as rebuilt even if cached (repeatable)")
	return cmd
}

func newFetchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "fetch [NAME...]",
		Short: "Download the sources of NAMEs (default: the targets' closure) into the source cache",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args)
			if err != nil {
				return err
			}
			return g.executor(p, cmd).Fetch(ctxOf(cmd), plan.Nodes)
		},
	}
}

type buildFlags struct {
	force    []string
	jobs     int
	until    string
	targets  []string
	keepWork bool
}

func (f *buildFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.force, "force", nil, "rebuild NAME from fresh sources and an empty build dir even if cached (repeatable)")
	cmd.Flags().IntVarP(&f.jobs, "jobs", "j", 0, "override the planned parallelism")
	cmd.Flags().BoolVar(&f.keepWork, "keep-work", false, "keep build directories after success")
}

// buildOptions are what plan and build share: the targets, the host
// probe the jobs are planned from, the binary cache when build.yaml names
// one, and the terminal.
func (g *globals) buildOptions(cmd *cobra.Command, p *builder.Project, targets, force []string) (builder.BuildOptions, error) {
	host, err := g.host(cmd)
	if err != nil {
		return builder.BuildOptions{}, err
	}
	opts := builder.BuildOptions{Targets: targets, Force: force, Host: host, Out: cmd.ErrOrStderr(),
		Progress: g.progress(cmd).steps, Fetch: g.fetchOptions(cmd)}
	if c := p.Settings.Cache; c.Registry != "" {
		opts.Cache = &remote.Cache{Ref: c.Registry, Options: remote.Options{Insecure: c.Insecure}}
	}
	return opts, nil
}

// runBuild is build and the first half of all: one library call.
func runBuild(cmd *cobra.Command, g *globals, f *buildFlags, targets []string) (*builder.Project, *builder.Plan, error) {
	p, err := g.open()
	if err != nil {
		return nil, nil, err
	}
	opts, err := g.buildOptions(cmd, p, targets, f.force)
	if err != nil {
		return nil, nil, err
	}
	opts.Jobs, opts.Until, opts.BuildTargets, opts.KeepWork = f.jobs, f.until, f.targets, f.keepWork
	// Every compile and link calls back into this binary for memory.
	if opts.Exe, err = os.Executable(); err != nil {
		return nil, nil, fmt.Errorf("finding the tritonbuild executable for the memory broker: %w", err)
	}
	res, err := p.Build(ctxOf(cmd), opts)
	if errors.Is(err, builder.ErrStopped) {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return p, res.Plan, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return p, res.Plan, nil
}

func newBuildCmd(g *globals) *cobra.Command {
	f := &buildFlags{}
	cmd := &cobra.Command{
		Use:   "build NAME...",
		Short: "Build NAMEs and their dependencies into the store",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, _, err := runBuild(cmd, g, f, args)
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.until, "until", "", "stop each node after this step (fetch; configure, build for cmake, meson and make; build for go; a step name for script builds) without committing, and skip its dependents")
	cmd.Flags().StringArrayVar(&f.targets, "target", nil, "build only this build-system target, without install (repeatable)")
	return cmd
}

func newInstallCmd(g *globals) *cobra.Command {
	var prefix string
	var force bool
	cmd := &cobra.Command{
		Use:   "install [NAME...]",
		Short: "Lay the closure of NAMEs (default: the targets) into one prefix",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args)
			if err != nil {
				return err
			}
			var missing []string
			for _, n := range plan.Nodes {
				if n.Status == builder.StatusBuild {
					missing = append(missing, n.Name)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("not built yet: %s (run tritonbuild build %s)", strings.Join(missing, ", "), strings.Join(missing, " "))
			}
			if prefix == "" {
				prefix = p.Config.Abs(p.Settings.Prefix)
			}
			if prefix == "" {
				return fmt.Errorf("no --prefix given and build.yaml sets no prefix")
			}
			res, err := builder.Install(ctxOf(cmd), p.Store, plan.Nodes, prefix, builder.InstallOptions{Force: force})
			if err != nil {
				return err
			}
			w := cmd.ErrOrStderr()
			for _, f := range res.Replaced {
				fmt.Fprintf(w, "replaced %s (it was not ours; --force)\n", f)
			}
			for _, f := range res.Kept {
				fmt.Fprintf(w, "kept %s: a previous install put it there but it was changed since\n", f)
			}
			fmt.Fprintf(w, "installed %d trees (%d files) into %s", res.Trees, res.Files, prefix)
			if res.Removed > 0 {
				fmt.Fprintf(w, ", removed %d stale file(s) of the previous install", res.Removed)
			}
			fmt.Fprintln(w)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "install prefix (default: build.yaml's prefix)")
	cmd.Flags().BoolVar(&force, "force", false, "install into a non-empty directory that no tritonbuild install made, replacing the files a tree ships (others are kept)")
	return cmd
}

func newLogsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the step logs of NAME's latest build attempt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args)
			if err != nil {
				return err
			}
			n := plan.Node(args[0])
			logs, other, err := p.Logs(n)
			if err != nil {
				return err
			}
			if other != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s (%s) of this plan has no logs; showing the latest attempt, %s\n", n.Name, n.Version, n.ShortHash(), other)
			}
			for _, l := range logs {
				data, err := os.ReadFile(l)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "==> %s <==\n%s\n", l, data)
			}
			return nil
		},
	}
}

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of recipe files, generated from the Go types",
		RunE: func(cmd *cobra.Command, args []string) error {
			s := recipe.Schema()
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		},
	}
}
