package builder

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// Executor runs a plan's build nodes in dependency order.
type Executor struct {
	Store *store.Store
	// ProjectDir anchors built-in recipes' local sources and patches.
	ProjectDir string
	Settings   recipe.Settings
	// Config is build.yaml: a failed fetch names its profiles among the
	// alternatives. Nil names none.
	Config *recipe.Config
	// Jobs overrides the planned parallelism when > 0 (--jobs).
	Jobs int
	// Until stops a node's build after this step ("fetch", "configure",
	// "build") without committing it; for debugging big builds.
	Until string
	// Targets builds only these build-system targets, without install or
	// commit (--target).
	Targets []string
	// KeepWork keeps the build dir after a successful build.
	KeepWork bool
	// Fetch configures downloads (progress, retries, mirrors come from
	// Settings.Mirrors).
	FetchOptions fetch.Options
	// Out receives status lines for a person.
	Out io.Writer
	// Progress receives the progress of long steps (see StepUpdate); nil
	// reports none.
	Progress chan<- StepUpdate
	// Launcher is the memory broker's launcher chain (NewLauncher); nil
	// runs commands directly with the planned -j, as tests and verify's
	// rebuild do. Project.Build always sets it.
	Launcher LauncherFactory
	// Cache is the binary cache: Run pulls StatusRemote nodes from it and
	// pushes committed trees to it (unless Settings.Cache.NoPush). Nil
	// builds everything here.
	Cache TreeCache

	// stats counts what the last Run did.
	stats runStats
}

// runStats counts the trees a run built, pulled and pushed.
type runStats struct{ built, pulled, pushed int }

// StepUpdate reports the progress of a build step from its output
// (Ninja's [N/M], make's [ NN%]), in the manner of go-containerregistry's
// v1.Update: Complete of Total for the step Label ("llvm build"). A step
// starts with Total -1 (not known yet) and its last update has Done set.
// Sends block: the reader keeps reading until the executor returns.
type StepUpdate struct {
	Label           string
	Complete, Total int
	// Lines counts the output lines of a step that prints no counts
	// (make, scripts), so that it can be shown to run.
	Lines int
	Done  bool
}

// LauncherFactory prepares the memory-aware launcher for one node's build.
type LauncherFactory interface {
	Prepare(ctx context.Context, n *Node, jobs JobPlan, stats, workDir string) (Launch, error)
}

// Launch is the environment and CMake arguments that route a node's
// compile and link commands through a launcher, and the decision what to do
// after a failed step.
type Launch interface {
	Env() []string
	CMakeArgs() []string
	// Wrap returns the compiler commands make/script builds should use.
	Wrap(cc, cxx string) (string, string)
	// Retry inspects a failed step; when the failure was an OOM kill it
	// returns the lower job counts to resume with and a message.
	Retry(err error, attempt int, jobs JobPlan) (JobPlan, string, bool)
	Close() error
}

// StepError is a failed build step with what a person needs to act.
type StepError struct {
	Node    string
	Step    string
	Command string
	Log     string
	Tail    []string
	Err     error
}

func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: step %s failed: %v\ncommand: %s\n", e.Node, e.Step, e.Err, e.Command)
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "last %d lines of the log:\n", len(e.Tail))
		for _, l := range e.Tail {
			b.WriteString("  " + l + "\n")
		}
	}
	fmt.Fprintf(&b, "full log: %s", e.Log)
	return b.String()
}

func (e *StepError) Unwrap() error { return e.Err }

func asStepError(err error, target **StepError) bool { return errors.As(err, target) }

// ErrStopped is returned (wrapped) when --until or --target ended a build
// early on purpose.
var ErrStopped = errors.New("stopped early as asked")

// Run builds every node with status build, in plan order. A StatusRemote
// node is pulled from the Cache instead, under the same lock a build takes,
// and built when the cache's copy is refused. With a Cache every tree the
// store holds (built now or before) is pushed to it unless
// Settings.Cache.NoPush or the build stops early (Until, Targets): a tree
// built now under the lock its build holds, one built before under the
// node's shared lock.
//
// Until and Targets stop every node built here at that point, without a
// commit (StatusStopped), and nothing that depends on a stopped node is
// built (StatusSkipped, its Reason naming the dependency), as make and
// Spack leave a package's dependents alone when it did not install; nodes
// that do not depend on one are still built, and stopped in turn. Run then
// returns an error wrapping ErrStopped that lists them. A node whose build
// kind cannot stop where asked (a step it does not have, build-system
// targets of a go or script build) is refused before anything runs.
func (e *Executor) Run(ctx context.Context, plan *Plan, nodes []*Node) error {
	e.stats = runStats{}
	var errs []error
	for _, n := range nodes {
		if n.Status == StatusBuild {
			errs = append(errs, e.checkStop(n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// unbuilt are the nodes this run stopped or skipped: their trees are
	// not in the store, so nothing may be built against them.
	unbuilt := map[*Node]bool{}
	var notes []string
	for _, n := range nodes {
		if d := unbuiltDep(n, unbuilt); d != nil {
			what := "was skipped"
			if d.Status == StatusStopped {
				what = "was stopped " + e.stopPoint()
			}
			n.Status, n.Reason = StatusSkipped, fmt.Sprintf("skipped: it depends on %s %s, which %s", d.Name, d.Version, what)
			unbuilt[n] = true
			notes = append(notes, n.Name+" "+n.Version+": "+n.Reason)
			e.printf("==> %s %s: %s\n", n.Name, n.Version, n.Reason)
			continue
		}
		switch n.Status {
		case StatusBuild, StatusRemote:
			err := e.buildNode(ctx, plan, n)
			if errors.Is(err, ErrStopped) {
				n.Status, n.Reason = StatusStopped, "stopped "+e.stopPoint()
				unbuilt[n] = true
				notes = append(notes, n.Name+" "+n.Version+": "+n.Reason)
				continue
			}
			if err != nil {
				return err
			}
			if n.Status != StatusCached {
				n.Status, n.Reason = StatusCached, "built"
			}
		case StatusCached:
			if e.pushing() {
				if _, err := e.lockedPush(ctx, n); err != nil {
					return err
				}
			}
		}
	}
	if len(notes) > 0 {
		return fmt.Errorf("%w: %s", ErrStopped, strings.Join(notes, "; "))
	}
	return nil
}

// unbuiltDep returns a dependency of n among unbuilt, or nil.
func unbuiltDep(n *Node, unbuilt map[*Node]bool) *Node {
	for _, d := range n.Deps {
		if unbuilt[d] {
			return d
		}
	}
	return nil
}

// partial reports whether builds stop before committing (--until,
// --target).
func (e *Executor) partial() bool { return e.Until != "" || len(e.Targets) > 0 }

// stopPoint says where Until and Targets end a build, for messages.
func (e *Executor) stopPoint() string {
	targets := strings.Join(e.Targets, ", ")
	switch {
	case len(e.Targets) == 0 || e.Until == "fetch" || e.Until == "configure":
		return "after " + e.Until + " (--until " + e.Until + ")"
	case e.Until == "":
		return "after building only " + targets + ", without install (--target)"
	}
	return "after building only " + targets + " (--until " + e.Until + ", --target)"
}

// checkStop refuses Until and Targets where n's build kind cannot honour
// them: a step its build does not have (a typo included), or build-system
// targets, which go and script builds do not have. Otherwise the build
// would run past the point asked for, to no commit. A stop at fetch comes
// before any build kind's steps.
func (e *Executor) checkStop(n *Node) error {
	if !e.partial() {
		return nil
	}
	bs := n.Recipe.Build
	kind := bs.System()
	steps, targets := []string{"fetch", "configure", "build"}, true
	switch {
	case bs.Go != nil:
		steps, targets = []string{"fetch", "build"}, false
	case bs.Script != nil:
		steps, targets = []string{"fetch"}, false
		for _, st := range bs.Script.Steps {
			steps = append(steps, st.Name)
		}
	}
	var errs []error
	if e.Until != "" && !slices.Contains(steps, e.Until) {
		errs = append(errs, fmt.Errorf("--until %s: %s %s is a %s build, whose steps are %s", e.Until, n.Name, n.Version, kind, strings.Join(steps, ", ")))
	}
	if len(e.Targets) > 0 && !targets {
		errs = append(errs, fmt.Errorf("--target %s: %s %s is a %s build, which has no build-system targets (--until stops it after one of its steps: %s)", strings.Join(e.Targets, " --target "), n.Name, n.Version, kind, strings.Join(steps, ", ")))
	}
	return errors.Join(errs...)
}

// pushing reports whether committed trees go to the cache.
func (e *Executor) pushing() bool {
	return e.Cache != nil && !e.Settings.Cache.NoPush && !e.partial()
}

func (e *Executor) printf(format string, args ...any) {
	if e.Out != nil {
		fmt.Fprintf(e.Out, format, args...)
	}
}

// nodeBuild is the state of one node's build.
type nodeBuild struct {
	e       *Executor
	n       *Node
	work    string
	src     string
	build   string
	staging string
	destdir string
	prefix  string
	logs    string
	vars    map[string]string
	env     []string
	jobs    JobPlan
	launch  Launch
	cc, cxx string
	logged  map[string]bool
}

func (e *Executor) buildNode(ctx context.Context, plan *Plan, n *Node) (err error) {
	unlock, err := e.Store.LockNotify(ctx, n.Key(), func() {
		e.printf("==> %s %s: waiting for another tritonbuild process, which holds its store lock (%s)\n", n.Name, n.Version, filepath.Join(e.Store.Root, "locks"))
	})
	if err != nil {
		return err
	}
	defer unlock()
	// No attempt leaves its staging dir behind: a commit renames it away,
	// and a failed attempt or one that stops early on purpose (--until,
	// --target) removes it, DESTDIR and all. The dir is the lock holder's
	// alone, so this removes nothing anyone else made. The work dir stays,
	// so that the next attempt resumes (`tritonbuild gc` removes those).
	staging := e.Store.StagingDir(n.Key())
	defer func() {
		if rerr := store.RemoveTree(staging); rerr != nil && err == nil {
			err = fmt.Errorf("%s: removing the staging dir: %w", n.Name, rerr)
		}
	}()
	partial := e.partial()
	// A pull needs no build step, so a partial build takes it too.
	if e.Store.Has(n.Key()) && !n.Forced && (!partial || n.Status == StatusRemote) {
		e.printf("==> %s %s: built meanwhile by another process\n", n.Name, n.Version)
		return nil
	}
	if n.Status == StatusRemote && e.Cache == nil {
		n.Status, n.Reason = StatusBuild, "no binary cache to pull from"
	}
	if n.Status == StatusRemote {
		err := e.pull(ctx, n)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// A tree the cache holds is an optimisation: when it is refused
		// (unreachable, tampered, corrupted) the node is built here.
		e.printf("==> %s %s: %v; building it instead\n", n.Name, n.Version, err)
		n.Status, n.Reason = StatusBuild, "binary cache copy refused"
	}
	// Run checked the nodes it knew it would build; a pull that turned
	// into a build is checked here, before it starts.
	if err := e.checkStop(n); err != nil {
		return err
	}
	start := time.Now()
	e.printf("==> building %s %s (%s)\n", n.Name, n.Version, n.ShortHash())
	b := &nodeBuild{
		e: e, n: n,
		work:    e.Store.WorkDir(n.Key()),
		staging: staging,
		logs:    e.Store.LogDir(n.Key()),
		prefix:  e.Store.TreeDir(n.Key()),
	}
	b.src = filepath.Join(b.work, "src")
	b.build = filepath.Join(b.work, "build")
	b.destdir = filepath.Join(b.staging, "destdir")
	// A leftover staging dir belongs to a killed attempt: we hold the lock.
	if err := store.RemoveTree(b.staging); err != nil {
		return fmt.Errorf("%s: clearing staging: %w", n.Name, err)
	}
	// A forced rebuild starts from fresh sources and an empty build dir:
	// a work dir kept from a successful build (--keep-work) would otherwise
	// make it an incremental build of what is already built.
	if n.Forced {
		if err := store.RemoveTree(b.work); err != nil {
			return fmt.Errorf("%s: clearing the work dir for a forced rebuild: %w", n.Name, err)
		}
	}
	// Logs of steps this attempt skips (a resumed build's configure) stay;
	// each step's log restarts when the step runs again.
	b.logged = map[string]bool{}
	for _, d := range []string{b.work, b.logs, b.destdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	b.jobs = e.jobPlan(n)
	if err := b.prepareSource(ctx); err != nil {
		return err
	}
	stopped := fmt.Errorf("%s %s: %w %s", n.Name, n.Version, ErrStopped, e.stopPoint())
	if e.Until == "fetch" {
		e.printf("    sources ready in %s (stopped after fetch)\n", b.src)
		return stopped
	}
	if e.Launcher != nil {
		if b.launch, err = e.Launcher.Prepare(ctx, n, b.jobs, e.Store.StatsFile(n.Key()), b.work); err != nil {
			return fmt.Errorf("%s: preparing launcher: %w", n.Name, err)
		}
		defer b.launch.Close()
	}
	b.setupEnv(plan)
	if err := b.runBuildSystem(ctx); err != nil {
		return err
	}
	if partial {
		// checkStop let through only stops the build kind honours, so
		// the build system stopped where asked.
		return stopped
	}
	// The tree was installed under DESTDIR at its final path; move it to
	// staging/tree so that the commit is one rename.
	inst := filepath.Join(b.destdir, b.prefix)
	if _, err := os.Stat(inst); err != nil {
		if err := os.MkdirAll(inst, 0o755); err != nil {
			return err
		}
	}
	if err := os.Rename(inst, filepath.Join(b.staging, "tree")); err != nil {
		return fmt.Errorf("%s: staging install tree: %w", n.Name, err)
	}
	if err := store.RemoveTree(b.destdir); err != nil {
		return fmt.Errorf("%s: removing DESTDIR after staging the install tree: %w", n.Name, err)
	}
	var deps []string
	for _, d := range closureOf(n) {
		if d.Status != StatusExternal {
			deps = append(deps, d.Prefix(e.Store))
		}
	}
	rel, err := relocateTree(ctx, filepath.Join(b.staging, "tree"), b.prefix, e.Store.Root, deps)
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	b.reportRelocation(rel)
	m, err := store.BuildManifestFor(filepath.Join(b.staging, "tree"), e.Store.Root)
	if err != nil {
		return err
	}
	m.NodeMeta = nodeMeta(n)
	if err := e.Store.Commit(n.Key(), b.staging, m); err != nil {
		return err
	}
	e.stats.built++
	if !e.KeepWork {
		// The tree is committed: a work dir that stays costs only disk,
		// and gc takes it later.
		if err := store.RemoveTree(b.work); err != nil {
			e.printf("    warning: %s: removing the work dir: %v (tritonbuild gc --delete removes it)\n", n.Name, err)
		}
	}
	e.printf("    %s %s installed: %d files, %s, in %s\n", n.Name, n.Version, m.FileCount(), m.Digest[:19], time.Since(start).Round(time.Millisecond))
	if e.pushing() {
		if _, err := e.push(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// reportRelocation says what relocateTree changed and what stays tied to
// the store path.
func (b *nodeBuild) reportRelocation(r *Relocation) {
	if len(r.Runpaths) > 0 {
		b.e.printf("    %d ELF file(s) given $ORIGIN-relative runpaths\n", len(r.Runpaths))
	}
	if len(r.Text) > 0 {
		b.e.printf("    %d text file(s) name the store path; install and pulls rewrite them\n", len(r.Text))
	}
	if len(r.Binaries) > 0 {
		list := r.Binaries
		if len(list) > 5 {
			list = append(list[:5:5], fmt.Sprintf("and %d more", len(r.Binaries)-5))
		}
		b.e.printf("    warning: %d binary file(s) embed the store path and are not relocatable: %s\n", len(r.Binaries), strings.Join(list, ", "))
	}
}

// jobPlan picks the node's starting parallelism: --jobs, then build.yaml's
// max, then the planned figure, then the CPU count.
func (e *Executor) jobPlan(n *Node) JobPlan {
	if e.Jobs > 0 {
		return JobPlan{Compile: e.Jobs, Link: e.Jobs, Why: "--jobs " + strconv.Itoa(e.Jobs)}
	}
	if n.Jobs != nil {
		return *n.Jobs
	}
	c := runtime.NumCPU()
	if e.Settings.Jobs.Max > 0 {
		c = e.Settings.Jobs.Max
	}
	return JobPlan{Compile: c, Link: c, Why: strconv.Itoa(c) + " CPUs"}
}

// prepareSource fills work/src once per hash: fetch, extract, patch. A
// marker records completion so a resumed build keeps its sources and its
// build dir.
func (b *nodeBuild) prepareSource(ctx context.Context) error {
	marker := filepath.Join(b.work, ".source-ready")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	n, e := b.n, b.e
	tmp := b.src + ".tmp"
	// An attempt that stopped before the marker left these half-made.
	for _, d := range []string{b.src, b.build, tmp} {
		if err := store.RemoveTree(d); err != nil {
			return fmt.Errorf("%s: clearing %s for fresh sources: %w", n.Name, d, err)
		}
	}
	s := n.Ver.Source
	srcArchive, err := e.fetchSource(ctx, n)
	if err != nil {
		return err
	}
	if s.Kind() == recipe.SourceLocal {
		dir := n.Recipe.ResolvePath(s.Local, e.ProjectDir)
		if err := copyTree(dir, tmp, localExcluded(&s)); err != nil {
			return fmt.Errorf("%s %s: copying local source %s: %w", n.Name, n.Version, dir, err)
		}
	}
	if srcArchive != "" {
		e.printf("    extracting %s\n", filepath.Base(srcArchive))
		// Source tarballs are often .tar.xz: the builder links the
		// parallel xz decoder, which the archive package leaves out.
		xz := archive.Decoders{archive.FormatTarXz: xzpar.Decompressor(xzpar.Options{})}
		if err := archive.Extract(ctx, srcArchive, tmp, archive.Options{StripComponents: s.Strip, Decoders: xz}); err != nil {
			return fmt.Errorf("%s %s: extracting source: %w", n.Name, n.Version, err)
		}
	}
	patches := append(append([]recipe.Patch{}, n.Recipe.Patches...), n.Ver.Patches...)
	for i, p := range patches {
		strip := 1
		if p.Strip != nil {
			strip = *p.Strip
		}
		file := n.Recipe.ResolvePath(p.File, e.ProjectDir)
		step := fmt.Sprintf("patch-%d", i+1)
		if err := b.run(ctx, step, tmp, nil, "patch", "-p"+strconv.Itoa(strip), "--forward", "--batch", "-i", file); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, b.src); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return atomicfile.WriteFile(marker, nil, 0o644)
}

// Fetch fills the source cache for nodes (externals skipped) so that a
// later build needs no network.
func (e *Executor) Fetch(ctx context.Context, nodes []*Node) error {
	// Every node is tried: one unreachable source (llvm's, say) must not
	// hide whether the others can be fetched.
	var errs []error
	for _, n := range nodes {
		if n.Status == StatusExternal {
			continue
		}
		path, err := e.fetchSource(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, err)
			continue
		}
		if path != "" {
			e.printf("    %s %s: %s\n", n.Name, n.Version, path)
		}
	}
	return errors.Join(errs...)
}

// setupEnv builds a clean environment (nothing of the caller's shell but
// the basics, so conda or LD_LIBRARY_PATH settings cannot leak into a
// build) and the ${...} variables.
func (b *nodeBuild) setupEnv(plan *Plan) {
	n, e := b.n, b.e
	vars := map[string]string{
		"prefix": b.prefix, "src": b.src, "build": b.build, "name": n.Name, "version": n.Version,
		"jobs": strconv.Itoa(b.jobs.Compile), "link_jobs": strconv.Itoa(b.jobs.Link),
		"project": e.ProjectDir, "recipe_dir": n.Recipe.BaseDir(),
	}
	for k, v := range n.Options {
		vars["options."+k] = renderOption(v, false)
	}
	var paths, prefixes []string
	for _, d := range closureOf(n) {
		p := d.Prefix(e.Store)
		vars["deps."+d.Name+".prefix"] = p
		vars["deps."+d.Name+".version"] = d.Version
		prefixes = append(prefixes, p)
		if st, err := os.Stat(filepath.Join(p, "bin")); err == nil && st.IsDir() {
			paths = append(paths, filepath.Join(p, "bin"))
		}
	}
	b.cc, b.cxx = "cc", "c++"
	if tc := n.Toolchain; tc != nil {
		tp := tc.Prefix(e.Store)
		b.cc, b.cxx = filepath.Join(tp, "bin", "clang"), filepath.Join(tp, "bin", "clang++")
		vars["toolchain.cc"], vars["toolchain.cxx"], vars["toolchain.prefix"] = b.cc, b.cxx, tp
	}
	b.vars = vars
	keep := passThroughEnv
	var env []string
	for _, k := range keep {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	sysPath := os.Getenv("PATH")
	if sysPath == "" {
		sysPath = "/usr/local/bin:/usr/bin:/bin"
	}
	// The go command lives wherever the caller's PATH found it.
	if gobin, err := exec.LookPath("go"); err == nil {
		paths = append(paths, filepath.Dir(gobin))
	}
	env = append(env,
		"PATH="+strings.Join(append(paths, sysPath), ":"),
		"LANG=C", "LC_ALL=C",
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(max(n.Ver.Epoch, 1), 10),
		"CMAKE_PREFIX_PATH="+strings.Join(prefixes, ":"),
		"DESTDIR="+b.destdir,
	)
	if pc := b.pkgConfigPath(); pc != "" {
		env = append(env, "PKG_CONFIG_PATH="+pc)
	}
	cc, cxx := b.cc, b.cxx
	if b.launch != nil {
		env = append(env, b.launch.Env()...)
	}
	env = append(env, "CC="+cc, "CXX="+cxx)
	env = append(env, b.compileFlags()...)
	if n.Toolchain != nil {
		tp := n.Toolchain.Prefix(e.Store)
		env = append(env, "LLVM_DIR="+filepath.Join(tp, "lib", "cmake", "llvm"), "LLVM_PATH="+tp)
	}
	// What dependencies export (their ABI settings, say) comes before the
	// recipe's own env, which may override it.
	for _, d := range closureOf(n) {
		for _, k := range slices.Sorted(maps.Keys(d.Recipe.Exports)) {
			env = append(env, k+"="+expandNode(d, d.Prefix(e.Store), d.Recipe.Exports[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(n.Recipe.Env)) {
		if flagVars[k] {
			continue // merged into the flags above
		}
		env = append(env, k+"="+b.expand(n.Recipe.Env[k], false))
	}
	b.env = env
}

// passThroughEnv are the caller's variables a build step sees (besides
// PATH, which is extended); docs/recipes.md lists them, and a test holds
// the two together.
var passThroughEnv = []string{"HOME", "USER", "LOGNAME", "TMPDIR", "TERM", "GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GONOSUMDB", "GOFLAGS", "GOTOOLCHAIN", "GONOSUMCHECK", "GOPRIVATE", "GOSUMDB", "http_proxy", "https_proxy", "no_proxy"}

// flagVars are the compiler flag variables whose recipe values are merged
// with the toolchain's defaults instead of replacing them.
var flagVars = map[string]bool{"CFLAGS": true, "CXXFLAGS": true, "LDFLAGS": true}

// compileFlags returns CFLAGS, CXXFLAGS and LDFLAGS: the recipe's env
// values (which may use option references) or, for build systems without
// their own optimization setting (make, autotools, script, meson), a
// distribution's default of -O2 -g; then, always appended, the flags that
// make trees reproducible: no build or store paths in objects and debug
// info, build ids derived from content. CMake's build type and Go's own
// defaults choose their optimization, so those builds get no default.
func (b *nodeBuild) compileFlags() []string {
	n := b.n
	prefixMap := "-ffile-prefix-map=" + b.work + "=/tritonbuild/" + n.Name + " -fdebug-prefix-map=" + b.work + "=/tritonbuild/" + n.Name
	opt := "-O2 -g"
	if bs := n.Recipe.Build; bs.CMake != nil || bs.Go != nil {
		opt = ""
	} else {
		// Dependencies' headers live in the store: keep its root out of
		// debug info so that trees do not depend on where the store is.
		prefixMap += " -ffile-prefix-map=" + filepath.Join(b.e.Store.Root, "nodes") + "=/tritonbuild/store"
	}
	join := func(parts ...string) string {
		var out []string
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return strings.Join(out, " ")
	}
	own := func(k, def string) string {
		if v, ok := n.Recipe.Env[k]; ok {
			return b.expand(v, false)
		}
		return def
	}
	return []string{
		"CFLAGS=" + join(own("CFLAGS", opt), prefixMap),
		"CXXFLAGS=" + join(own("CXXFLAGS", opt), prefixMap),
		"LDFLAGS=" + join(own("LDFLAGS", ""), "-Wl,--build-id=sha1"),
	}
}

// closureOf lists every node n depends on, transitively, deduplicated.
func closureOf(n *Node) []*Node {
	seen := map[string]bool{}
	var out []*Node
	var walk func(x *Node)
	walk = func(x *Node) {
		for _, d := range x.Deps {
			if !seen[d.Name] {
				seen[d.Name] = true
				walk(d)
				out = append(out, d)
			}
		}
	}
	walk(n)
	return out
}

// expandArgs expands an argv list: an element that is exactly one list
// option reference becomes one argument per item (none for an empty list);
// any other element is one argument.
func (b *nodeBuild) expandArgs(list []string, style optionStyle) []string {
	var out []string
	for _, a := range list {
		if ref, ok := recipe.SoleRef(a); ok && strings.HasPrefix(ref, "options.") {
			if items, ok := b.n.Options[strings.TrimPrefix(ref, "options.")].([]string); ok {
				out = append(out, items...)
				continue
			}
		}
		out = append(out, b.expandStyle(a, style))
	}
	return out
}

// optionStyle is how an option value is written in one build system's
// syntax.
type optionStyle int

const (
	styleShell optionStyle = iota // true/false, space-joined lists
	styleCMake                    // ON/OFF, ;-joined lists
	styleMeson                    // true/false, comma-joined arrays
)

func renderOption(v any, cmake bool) string {
	if cmake {
		return renderOptionStyle(v, styleCMake)
	}
	return renderOptionStyle(v, styleShell)
}

func renderOptionStyle(v any, style optionStyle) string {
	cmake := style == styleCMake
	switch x := v.(type) {
	case bool:
		if cmake {
			if x {
				return "ON"
			}
			return "OFF"
		}
		return strconv.FormatBool(x)
	case []string:
		switch style {
		case styleCMake:
			return strings.Join(x, ";")
		case styleMeson:
			return strings.Join(x, ",")
		}
		return strings.Join(x, " ")
	}
	return fmt.Sprint(v)
}

// expandNode substitutes another node's own references (options,
// prefix, version) in its exports.
func expandNode(n *Node, prefix, s string) string {
	return recipe.Expand(s, func(key string) (string, bool) {
		switch {
		case strings.HasPrefix(key, "options."):
			if v, ok := n.Options[strings.TrimPrefix(key, "options.")]; ok {
				return renderOption(v, false), true
			}
		case key == "prefix":
			return prefix, true
		case key == "version":
			return n.Version, true
		case key == "name":
			return n.Name, true
		}
		return "", false
	})
}

// expand substitutes ${...} references; unknown ones stay for the shell.
func (b *nodeBuild) expand(s string, cmake bool) string {
	if cmake {
		return b.expandStyle(s, styleCMake)
	}
	return b.expandStyle(s, styleShell)
}

func (b *nodeBuild) expandStyle(s string, style optionStyle) string {
	return recipe.Expand(s, func(key string) (string, bool) {
		if strings.HasPrefix(key, "options.") {
			if v, ok := b.n.Options[strings.TrimPrefix(key, "options.")]; ok {
				return renderOptionStyle(v, style), true
			}
		}
		v, ok := b.vars[key]
		return v, ok
	})
}

func (b *nodeBuild) runBuildSystem(ctx context.Context) error {
	bs := b.n.Recipe.Build
	switch {
	case bs.CMake != nil:
		return b.cmake(ctx, bs.CMake)
	case bs.Make != nil:
		return b.makeBuild(ctx, bs.Make)
	case bs.Go != nil:
		return b.goBuild(ctx, bs.Go)
	case bs.Script != nil:
		return b.script(ctx, bs.Script)
	case bs.Meson != nil:
		return b.meson(ctx, bs.Meson)
	}
	return fmt.Errorf("%s: no build system", b.n.Name)
}

func (b *nodeBuild) cmake(ctx context.Context, c *recipe.CMakeBuild) error {
	gen := string(c.Generator)
	if gen == "" {
		gen = "Ninja"
	}
	bt := c.BuildType
	if bt == "" {
		bt = "Release"
	}
	if err := os.MkdirAll(b.build, 0o755); err != nil {
		return err
	}
	configured := filepath.Join(b.build, ".configured")
	if _, err := os.Stat(configured); err != nil {
		args := []string{"-S", filepath.Join(b.src, c.SourceDir), "-B", b.build, "-G", gen,
			"-DCMAKE_BUILD_TYPE=" + bt, "-DCMAKE_INSTALL_PREFIX=" + b.prefix,
			"-DCMAKE_C_COMPILER=" + b.cc, "-DCMAKE_CXX_COMPILER=" + b.cxx,
			"-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON"}
		if b.n.Toolchain != nil {
			args = append(args, "-DLLVM_DIR="+filepath.Join(b.n.Toolchain.Prefix(b.e.Store), "lib", "cmake", "llvm"))
		}
		if c.CompileJobsVar != "" {
			args = append(args, "-D"+c.CompileJobsVar+"="+strconv.Itoa(b.jobs.Compile))
		}
		if c.LinkJobsVar != "" {
			args = append(args, "-D"+c.LinkJobsVar+"="+strconv.Itoa(b.jobs.Link))
		}
		if b.launch != nil {
			args = append(args, b.launch.CMakeArgs()...)
		}
		for _, k := range slices.Sorted(maps.Keys(c.Defines)) {
			args = append(args, "-D"+k+"="+b.expand(c.Defines[k], true))
		}
		if err := b.run(ctx, "configure", b.build, nil, "cmake", args...); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(configured, nil, 0o644); err != nil {
			return err
		}
	}
	if b.stopAfterConfigure() {
		return nil
	}
	targets := c.Targets
	if len(b.e.Targets) > 0 {
		targets = b.e.Targets
	}
	buildArgs := []string{"--build", b.build}
	for _, t := range b.expandArgs(targets, styleCMake) {
		buildArgs = append(buildArgs, "--target", t)
	}
	if err := b.runWithRetry(ctx, "build", func(jobs JobPlan) error {
		return b.run(ctx, "build", b.build, nil, "cmake", append(buildArgs, "-j", strconv.Itoa(jobs.Compile))...)
	}); err != nil {
		return err
	}
	if b.e.Until == "build" || len(b.e.Targets) > 0 {
		b.e.printf("    built in %s (stopped before install)\n", b.build)
		return nil
	}
	if len(c.InstallComponents) == 0 {
		return b.run(ctx, "install", b.build, nil, "cmake", "--install", b.build)
	}
	for _, comp := range c.InstallComponents {
		if err := b.run(ctx, "install", b.build, nil, "cmake", "--install", b.build, "--component", comp); err != nil {
			return err
		}
	}
	return nil
}

func (b *nodeBuild) makeBuild(ctx context.Context, m *recipe.MakeBuild) error {
	if args := b.expandArgs(m.Configure, styleShell); len(args) > 0 {
		if err := b.run(ctx, "configure", b.src, nil, args[0], args[1:]...); err != nil {
			return err
		}
	}
	// Without a configure command there is nothing to run: the sources
	// are as configured as they get.
	if b.stopAfterConfigure() {
		return nil
	}
	cc, cxx := b.cc, b.cxx
	if b.launch != nil {
		cc, cxx = b.launch.Wrap(cc, cxx)
	}
	extra := b.expandArgs(m.Args, styleShell)
	extra = append(extra, "CC="+cc, "CXX="+cxx, "PREFIX="+b.prefix, "prefix="+b.prefix)
	targets := b.expandArgs(m.Targets, styleShell)
	if len(b.e.Targets) > 0 {
		targets = b.e.Targets
	}
	if err := b.runWithRetry(ctx, "build", func(jobs JobPlan) error {
		args := append([]string{"-j" + strconv.Itoa(jobs.Compile)}, targets...)
		return b.run(ctx, "build", b.src, nil, "make", append(args, extra...)...)
	}); err != nil {
		return err
	}
	if b.e.Until == "build" || len(b.e.Targets) > 0 {
		b.e.printf("    built in %s (stopped before install)\n", b.src)
		return nil
	}
	install := m.Install
	if len(install) == 0 {
		install = []string{"install"}
	}
	return b.run(ctx, "install", b.src, nil, "make", append(append(install, extra...), "DESTDIR="+b.destdir)...)
}

// meson configures a build dir outside the sources with `meson setup`,
// then compiles and installs it into DESTDIR. The default build type
// "plain" adds no optimization flags of meson's own: CFLAGS carries the
// toolchain's defaults like every other build kind.
func (b *nodeBuild) meson(ctx context.Context, m *recipe.MesonBuild) error {
	bt := m.BuildType
	if bt == "" {
		bt = "plain"
	}
	cc, cxx := b.cc, b.cxx
	if b.launch != nil {
		cc, cxx = b.launch.Wrap(cc, cxx)
	}
	compilers := []string{"CC=" + cc, "CXX=" + cxx}
	configured := filepath.Join(b.build, ".configured")
	if _, err := os.Stat(configured); err != nil {
		// A half-configured dir from a failed attempt would make meson refuse.
		if err := store.RemoveTree(b.build); err != nil {
			return fmt.Errorf("%s: clearing a half-configured build dir: %w", b.n.Name, err)
		}
		args := []string{"setup", "--prefix=" + b.prefix, "--libdir=lib", "--buildtype=" + bt,
			"--wrap-mode=nodownload", "--pkg-config-path=" + b.pkgConfigPath()}
		for _, k := range slices.Sorted(maps.Keys(m.Options)) {
			args = append(args, "-D"+k+"="+b.expandStyle(m.Options[k], styleMeson))
		}
		args = append(args, b.expandArgs(m.Args, styleMeson)...)
		args = append(args, b.build, filepath.Join(b.src, m.SourceDir))
		if err := b.run(ctx, "configure", b.src, compilers, "meson", args...); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(configured, nil, 0o644); err != nil {
			return err
		}
	}
	if b.stopAfterConfigure() {
		return nil
	}
	targets := b.expandArgs(m.Targets, styleMeson)
	if len(b.e.Targets) > 0 {
		targets = b.e.Targets
	}
	if err := b.runWithRetry(ctx, "build", func(jobs JobPlan) error {
		args := append([]string{"compile", "-C", b.build, "-j", strconv.Itoa(jobs.Compile)}, targets...)
		return b.run(ctx, "build", b.build, compilers, "meson", args...)
	}); err != nil {
		return err
	}
	if b.e.Until == "build" || len(b.e.Targets) > 0 {
		b.e.printf("    built in %s (stopped before install)\n", b.build)
		return nil
	}
	return b.run(ctx, "install", b.build, compilers, "meson", "install", "-C", b.build, "--no-rebuild", "--destdir", b.destdir)
}

// stopAfterConfigure reports (and says) that --until configure ends the
// build here.
func (b *nodeBuild) stopAfterConfigure() bool {
	if b.e.Until != "configure" {
		return false
	}
	b.e.printf("    configured in %s (stopped after configure)\n", b.build)
	return true
}

// pkgConfigPath lists the dependencies' pkg-config directories.
func (b *nodeBuild) pkgConfigPath() string {
	var dirs []string
	for _, d := range closureOf(b.n) {
		p := d.Prefix(b.e.Store)
		for _, sub := range []string{"lib/pkgconfig", "share/pkgconfig"} {
			if st, err := os.Stat(filepath.Join(p, sub)); err == nil && st.IsDir() {
				dirs = append(dirs, filepath.Join(p, sub))
			}
		}
	}
	return strings.Join(dirs, ":")
}

func (b *nodeBuild) goBuild(ctx context.Context, g *recipe.GoBuild) error {
	out := filepath.Join(b.destdir, b.prefix, "bin")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-o", out + "/"}
	if len(g.Tags) > 0 {
		args = append(args, "-tags", strings.Join(g.Tags, ","))
	}
	// An empty build id keeps the binary identical across work dirs.
	ldflags := strings.TrimSpace("-buildid= " + b.expand(g.LDFlags, false))
	args = append(args, "-ldflags", ldflags)
	args = append(args, g.Packages...)
	cgo := "0"
	if g.CGO {
		cgo = "1"
	}
	return b.run(ctx, "build", b.src, []string{"CGO_ENABLED=" + cgo}, "go", args...)
}

func (b *nodeBuild) script(ctx context.Context, s *recipe.ScriptBuild) error {
	cc, cxx := b.cc, b.cxx
	if b.launch != nil {
		cc, cxx = b.launch.Wrap(cc, cxx)
	}
	if err := os.MkdirAll(b.build, 0o755); err != nil {
		return err
	}
	for _, st := range s.Steps {
		script := b.expand(st.Run, false)
		if err := b.runWithRetry(ctx, st.Name, func(jobs JobPlan) error {
			return b.run(ctx, st.Name, b.src, []string{"CC=" + cc, "CXX=" + cxx, "JOBS=" + strconv.Itoa(jobs.Compile), "PREFIX=" + b.prefix}, "bash", "-euo", "pipefail", "-c", script)
		}); err != nil {
			return err
		}
		if b.e.Until == st.Name {
			b.e.printf("    stopped after step %s\n", st.Name)
			return nil
		}
	}
	return nil
}

// runWithRetry runs a parallel step and, when the launcher says a failure
// was an OOM kill, resumes the same build dir with fewer jobs.
func (b *nodeBuild) runWithRetry(ctx context.Context, step string, f func(JobPlan) error) error {
	jobs := b.jobs
	for attempt := 1; ; attempt++ {
		err := f(jobs)
		if err == nil || b.launch == nil || ctx.Err() != nil {
			return err
		}
		next, msg, ok := b.launch.Retry(err, attempt, jobs)
		if !ok {
			if msg != "" {
				return fmt.Errorf("%w\n%s", err, msg)
			}
			return err
		}
		b.e.printf("    %s: %s\n", b.n.Name, msg)
		jobs = next
	}
}

var progressRE = regexp.MustCompile(`^\[\s*(\d+)/(\d+)\]|^\[\s*(\d+)%\]`)

// run executes one command with the node's env, appending its output to
// logs/<step>.log; on failure the error carries the log's tail.
func (b *nodeBuild) run(ctx context.Context, step, dir string, extraEnv []string, name string, args ...string) error {
	logPath := filepath.Join(b.logs, step+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if !b.logged[step] {
		flags |= os.O_TRUNC
		b.logged[step] = true
	}
	logf, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return fmt.Errorf("%s: opening log: %w", b.n.Name, err)
	}
	defer logf.Close()
	cmdline := name + " " + shellJoin(args)
	fmt.Fprintf(logf, "$ %s\n", cmdline)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, b.env...), extraEnv...)
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	tail := newTail(40)
	var wg sync.WaitGroup
	wg.Add(1)
	prog := b.e.Progress
	label := b.n.Name + " " + step
	if prog != nil {
		prog <- StepUpdate{Label: label, Total: -1}
	}
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		lines, counted := 0, false
		var lastTick time.Time
		for sc.Scan() {
			line := sc.Text()
			_, _ = logf.WriteString(line + "\n") // a full disk shows in the step's own failure; the tail below still has the line
			tail.add(line)
			lines++
			if prog != nil {
				m := progressRE.FindStringSubmatch(line)
				// Steps without counts report their output now and then:
				// often enough to show they run, rarely enough to cost
				// nothing.
				if m == nil && !counted && (lines == 1 || time.Since(lastTick) >= time.Second) {
					lastTick = time.Now()
					prog <- StepUpdate{Label: label, Total: -1, Lines: lines}
				}
				if m != nil {
					counted = true
					if m[1] != "" {
						d, _ := strconv.Atoi(m[1])
						t, _ := strconv.Atoi(m[2])
						prog <- StepUpdate{Label: label, Complete: d, Total: t}
					} else {
						p, _ := strconv.Atoi(m[3])
						prog <- StepUpdate{Label: label, Complete: p, Total: 100}
					}
				}
			}
		}
		_, _ = io.Copy(logf, pr) // drain an over-long line (the pipe must be read to the end either way)
	}()
	err = cmd.Run()
	pw.Close()
	wg.Wait()
	if prog != nil {
		prog <- StepUpdate{Label: label, Done: true}
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: step %s interrupted: %w", b.n.Name, step, ctx.Err())
		}
		return &StepError{Node: b.n.Name, Step: step, Command: cmdline, Log: logPath, Tail: tail.lines(), Err: err}
	}
	return nil
}

type tailBuf struct {
	max int
	buf []string
}

func newTail(n int) *tailBuf { return &tailBuf{max: n} }

func (t *tailBuf) add(l string) {
	t.buf = append(t.buf, l)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
}

func (t *tailBuf) lines() []string { return t.buf }

func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$;&|<>()*?[]#~") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

// copyTree copies a local source directory (files, dirs, symlinks) into
// dest, skipping what ignore matches and the VCS metadata.
func copyTree(src, dest string, ignore func(rel string) bool) error {
	return filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if rel != "." && (ignore(rel) || filepath.Base(p) == ".git") {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dest, rel)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case info.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode().IsRegular():
			return atomicfile.CopyFile(p, target, info.Mode().Perm())
		}
		return nil
	})
}
