package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// BuildOptions are one build of a project's targets: what to build, on
// which machine, with which cache, and how the executor runs.
type BuildOptions struct {
	// Targets are the recipes to build with their closures; empty means
	// build.yaml's targets. Force rebuilds these even when cached.
	Targets, Force []string
	// Host is the probed machine: each node's compile and link jobs are
	// planned from its memory. Nil leaves the jobs unplanned (PlanBuild
	// only; Build needs it).
	Host *toolchain.Host
	// Cache is the binary cache; nil builds everything here and asks no
	// server anything.
	Cache TreeCache
	// Exe is the executable that compile and link commands call back into
	// (`EXE launch -- ...`) to ask the memory broker for memory: normally
	// the running tritonbuild. Build refuses to run without it.
	Exe string
	// Jobs overrides the planned parallelism when > 0 (--jobs).
	Jobs int
	// Until, BuildTargets and KeepWork are the executor's (--until,
	// --target, --keep-work).
	Until        string
	BuildTargets []string
	KeepWork     bool
	// Out receives status lines for a person; nil is silent.
	Out io.Writer
	// MissingPackages says which distribution packages of a list are not
	// installed; nil asks dpkg (toolchain.MissingPackages) and skips the
	// check where there is none.
	MissingPackages func(ctx context.Context, pkgs []string) ([]string, error)
	// Progress receives the progress of long steps, and Fetch tunes
	// downloads (their progress goes to Fetch.Progress).
	Progress chan<- StepUpdate
	Fetch    fetch.Options
}

// BuildResult says what a build did.
type BuildResult struct {
	Plan *Plan
	// Built, Pulled and Pushed count trees built here, pulled from the
	// cache and uploaded to it.
	Built, Pulled, Pushed int
}

// PlanBuild plans opts.Targets against the store (MakePlan, which is pure),
// assigns each node its jobs from the host's memory and the distcc hosts'
// slots, and, when opts.Cache is set, asks the cache which nodes it holds
// (Plan.AskCache), saying so on opts.Out. Without a cache it makes no
// network request.
func (p *Project) PlanBuild(ctx context.Context, opts BuildOptions) (*Plan, error) {
	plan, err := p.Plan(ctx, opts.Targets, opts.Force)
	if err != nil {
		return nil, err
	}
	if opts.Out != nil {
		for _, n := range plan.Nodes {
			for _, w := range n.Warnings {
				fmt.Fprintln(opts.Out, "warning: "+w)
			}
		}
	}
	dc, err := p.Settings.Distribute.Config()
	if err != nil {
		return nil, err
	}
	if opts.Host != nil {
		jobs := opts.Jobs
		if jobs == 0 {
			jobs = p.Settings.Jobs.Max
		}
		assignJobs(plan, p.Store, opts.Host, jobs, p.Settings.Jobs.Reserve)
		if jobs == 0 {
			addRemoteSlots(plan, dc)
		}
	}
	if opts.Cache != nil {
		if _, err := plan.AskCache(ctx, opts.Cache, p.Store.Root, opts.Out); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// Build is `tritonbuild build`: PlanBuild, then the executor pulls what the
// cache holds, builds the rest through the memory broker (and ccache and
// distcc when configured) and pushes the trees to the cache. When the build
// stops early on purpose (opts.Until, opts.BuildTargets) the error wraps
// ErrStopped and the result is still returned.
func (p *Project) Build(ctx context.Context, opts BuildOptions) (*BuildResult, error) {
	if opts.Host == nil {
		return nil, errors.New("build: no host probe to plan jobs from")
	}
	launcher, err := NewLauncher(opts.Exe, opts.Host, p.Settings, p.Dir)
	if err != nil {
		return nil, err
	}
	plan, err := p.PlanBuild(ctx, opts)
	if err != nil {
		return nil, err
	}
	res := &BuildResult{Plan: plan}
	todo := 0
	for _, n := range plan.Nodes {
		if n.Status == StatusBuild || n.Status == StatusRemote {
			todo++
		}
	}
	if todo == 0 {
		if opts.Out != nil {
			fmt.Fprintf(opts.Out, "nothing to build: %d nodes cached or external\n", len(plan.Nodes))
		}
		return res, nil
	}
	if err := checkHostPackages(ctx, plan, opts.MissingPackages); err != nil {
		return nil, err
	}
	ex := &Executor{
		Store:        p.Store,
		ProjectDir:   p.SourceDir,
		Settings:     p.Settings,
		Config:       p.Config,
		Jobs:         opts.Jobs,
		Until:        opts.Until,
		Targets:      opts.BuildTargets,
		KeepWork:     opts.KeepWork,
		FetchOptions: opts.Fetch,
		Out:          opts.Out,
		Progress:     opts.Progress,
		Launcher:     launcher,
		Cache:        opts.Cache,
	}
	err = ex.Run(ctx, plan, plan.Nodes)
	res.Built, res.Pulled, res.Pushed = ex.stats.built, ex.stats.pulled, ex.stats.pushed
	if err != nil {
		if errors.Is(err, ErrStopped) {
			return res, err
		}
		return nil, err
	}
	if res.Built == 0 && opts.Out != nil {
		fmt.Fprintf(opts.Out, "nothing to build: %d nodes cached or external\n", len(plan.Nodes))
	}
	return res, nil
}

// NewLauncher returns the launcher chain every compile and link of a build
// runs through: the memory broker behind `exe launch`, then ccache and
// distcc when the settings configure them (relative ccache dirs resolve
// against projectDir). A build never runs without the broker, so a
// missing exe is an error.
func NewLauncher(exe string, host *toolchain.Host, s recipe.Settings, projectDir string) (LauncherFactory, error) {
	if exe == "" {
		return nil, errors.New("no launcher executable: compile and link commands must call back into tritonbuild for the memory broker")
	}
	st, err := os.Stat(exe)
	if err != nil {
		return nil, fmt.Errorf("launcher executable for the memory broker: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("launcher executable %s for the memory broker is not an executable file", exe)
	}
	dc, err := s.Distribute.Config()
	if err != nil {
		return nil, err
	}
	base := &memoryLauncher{Exe: exe, Host: host}
	cc := s.Cache.Ccache.Config(projectDir)
	if cc == nil && dc == nil {
		return base, nil
	}
	return &chainLauncher{Base: base, Ccache: cc, Distcc: dc}, nil
}

// checkHostPackages stops a build before anything runs when a node that
// would be built here lacks a distribution package it declares: otherwise
// the build would fail in that node's configure step, possibly hours in.
func checkHostPackages(ctx context.Context, plan *Plan, missing func(context.Context, []string) ([]string, error)) error {
	if missing == nil {
		missing = func(ctx context.Context, pkgs []string) ([]string, error) {
			m, _, err := toolchain.MissingPackages(ctx, pkgs)
			return m, err
		}
	}
	var lines, all []string
	for _, n := range plan.Nodes {
		if n.Status != StatusBuild {
			continue
		}
		pkgs := n.Recipe.HostPackagesOf(n.Ver)
		if len(pkgs) == 0 {
			continue
		}
		m, err := missing(ctx, pkgs)
		if err != nil {
			return fmt.Errorf("checking the host packages of %s %s: %w", n.Name, n.Version, err)
		}
		if len(m) > 0 {
			lines = append(lines, fmt.Sprintf("%s %s needs distribution packages that are not installed: %s", n.Name, n.Version, strings.Join(m, " ")))
			for _, p := range m {
				if !slices.Contains(all, p) {
					all = append(all, p)
				}
			}
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("%s\ninstall them first (as root): apt-get install -y %s\n(`tritonbuild doctor` checks the rest of the machine)", strings.Join(lines, "\n"), strings.Join(all, " "))
}
