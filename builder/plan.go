package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
)

// Status says what executing the plan will do with a node.
type Status string

// Node statuses.
const (
	StatusCached   Status = "cached"
	StatusExternal Status = "external"
	StatusBuild    Status = "build"
	// StatusRemote marks a node that is not in the local store but whose
	// install tree the binary cache (TreeCache) holds under the node's
	// hash: Plan.AskCache sets it, and the executor pulls the tree instead
	// of building it.
	StatusRemote Status = "cached (remote)"
	// StatusStopped and StatusSkipped are set by Executor.Run when a
	// build stops early on purpose (--until, --target): the stopped node
	// committed nothing, and a skipped node was not built because a node
	// it depends on was stopped or skipped. Neither is in the store.
	StatusStopped Status = "stopped"
	StatusSkipped Status = "skipped"
)

// Node is one recipe at one version with resolved options.
type Node struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hash    string `json:"hash"`
	Status  Status `json:"status"`
	// Reason says why the status (e.g. "not in store", "forced"), for
	// people: code looks at Status and Forced.
	Reason  string   `json:"reason,omitempty"`
	Depends []string `json:"depends"`
	// External is the installed prefix standing in for this node.
	External string `json:"external,omitempty"`
	// Jobs is the parallelism the build would start with, and why.
	Jobs *JobPlan `json:"jobs,omitempty"`
	// Warnings are what an external's warn checks found: it is used, but
	// something about it will cost the user (see recipe.ProbeCheck.Warn).
	Warnings []string `json:"warnings,omitempty"`

	Recipe       *recipe.Recipe  `json:"-"`
	Ver          *recipe.Version `json:"-"`
	Options      map[string]any  `json:"-"`
	Deps         []*Node         `json:"-"`
	Toolchain    *Node           `json:"-"`
	SourceDigest string          `json:"-"`
	// Forced is set when the plan rebuilds the node although it may be
	// cached (--force).
	Forced bool `json:"-"`
	// Identity is what dependents hash for an external: its detected
	// version and path.
	Identity string `json:"-"`
}

// ShortHash is the first 16 hex digits, used in directory names.
func (n *Node) ShortHash() string { return n.Hash[:16] }

// Key names the node in the store.
func (n *Node) Key() store.Key { return store.Key{Name: n.Name, Version: n.Version, Hash: n.Hash} }

// Prefix is where the node's install tree is: its tree in s, or the
// installed prefix of an external.
func (n *Node) Prefix(s *store.Store) string {
	if n.Status == StatusExternal {
		return n.External
	}
	return s.TreeDir(n.Key())
}

// JobPlan is the planned parallelism for a node.
type JobPlan struct {
	Compile int    `json:"compile"`
	Link    int    `json:"link"`
	Why     string `json:"why"`
	// budget is the memory the broker may grant at once.
	budget int64
}

// Plan is the resolved graph in dependency order.
type Plan struct {
	Nodes []*Node `json:"nodes"`
	// Epoch is the default SOURCE_DATE_EPOCH: the newest pinned source date.
	Epoch int64 `json:"-"`
}

// Node returns the named node or nil.
func (p *Plan) Node(name string) *Node {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Closure returns the named nodes and everything they depend on, in
// dependency order.
func (p *Plan) Closure(names ...string) []*Node {
	want := map[string]bool{}
	var mark func(n *Node)
	mark = func(n *Node) {
		if want[n.Name] {
			return
		}
		want[n.Name] = true
		for _, d := range n.Deps {
			mark(d)
		}
	}
	for _, name := range names {
		if n := p.Node(name); n != nil {
			mark(n)
		}
	}
	var out []*Node
	for _, n := range p.Nodes {
		if want[n.Name] {
			out = append(out, n)
		}
	}
	return out
}

// PlanOptions are the inputs of planning besides the recipes.
type PlanOptions struct {
	Settings recipe.Settings
	// Targets to plan; empty means Settings.Targets.
	Targets []string
	// Store answers "is this hash built?"; nil plans everything as build.
	Store *store.Store
	// Force rebuilds these nodes even when cached.
	Force []string
	// ProjectDir anchors built-in recipes' local sources.
	ProjectDir string
	// Platform identifies the target (default GOOS/GOARCH).
	Platform string
	// HostCompiler identifies the system compiler for nodes without a
	// toolchain (default: first line of `cc --version`).
	HostCompiler string
}

// MakePlan resolves targets into nodes with content hashes. It never
// touches the network; it reads local sources to hash them, runs the probes
// of externals, and asks the store which hashes exist.
func MakePlan(ctx context.Context, set *recipe.Set, opts PlanOptions) (*Plan, error) {
	targets := opts.Targets
	if len(targets) == 0 {
		targets = opts.Settings.Targets
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("nothing to plan: no targets given and build.yaml lists none")
	}
	if opts.Platform == "" {
		opts.Platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	pl := &planner{set: set, opts: opts, nodes: map[string]*Node{}}
	for name := range opts.Settings.Options {
		if set.Get(name) == nil {
			return nil, fmt.Errorf("build config sets options for %q, which is not a known recipe", name)
		}
	}
	for name := range opts.Settings.Externals {
		if set.Get(name) == nil {
			return nil, fmt.Errorf("build config names external %q, which is not a known recipe", name)
		}
	}
	for _, t := range targets {
		if _, err := pl.resolve(ctx, t, "", nil); err != nil {
			return nil, err
		}
	}
	for _, f := range opts.Force {
		if pl.nodes[f] == nil {
			return nil, fmt.Errorf("--force %s: not in the plan (targets: %s)", f, strings.Join(targets, ", "))
		}
	}
	plan := &Plan{Nodes: pl.order}
	for _, n := range plan.Nodes {
		if n.Ver.Epoch > plan.Epoch {
			plan.Epoch = n.Ver.Epoch
		}
	}
	return plan, nil
}

type planner struct {
	set   *recipe.Set
	opts  PlanOptions
	nodes map[string]*Node
	order []*Node
	cc    string
}

func (pl *planner) resolve(ctx context.Context, name string, constraint recipe.Constraint, path []string) (*Node, error) {
	if n := pl.nodes[name]; n != nil {
		if !constraint.Match(n.Version) {
			return nil, fmt.Errorf("%s needs %s %s, but %s %s is selected", strings.Join(path, " -> "), name, constraint, name, n.Version)
		}
		return n, nil
	}
	r := pl.set.Get(name)
	if r == nil {
		if err := pl.set.Broken(name); err != nil {
			return nil, fmt.Errorf("recipe %s cannot be used: %w", name, err)
		}
		return nil, fmt.Errorf("unknown recipe %q (known: %s)", name, strings.Join(pl.set.Names(), ", "))
	}
	ver, err := pl.pickVersion(r, constraint)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, Version: ver.Version, Recipe: r, Ver: ver, Depends: []string{}}
	if n.Options, err = r.ResolveOptions(pl.opts.Settings.Options[name]); err != nil {
		return nil, err
	}
	for _, dep := range r.Depends {
		d, err := pl.resolve(ctx, dep.Name, dep.Version, append(path, name))
		if err != nil {
			return nil, err
		}
		n.Deps = append(n.Deps, d)
		n.Depends = append(n.Depends, d.Name)
	}
	if r.Toolchain != "" {
		tc, err := pl.resolve(ctx, r.Toolchain, "", append(path, name))
		if err != nil {
			return nil, err
		}
		n.Toolchain = tc
		if !slices.Contains(n.Depends, tc.Name) {
			n.Deps = append(n.Deps, tc)
			n.Depends = append(n.Depends, tc.Name)
		}
	}
	if err := pl.finish(ctx, n); err != nil {
		return nil, err
	}
	pl.nodes[name] = n
	pl.order = append(pl.order, n)
	return n, nil
}

func (pl *planner) pickVersion(r *recipe.Recipe, c recipe.Constraint) (*recipe.Version, error) {
	if want, ok := pl.opts.Settings.Versions[r.Name]; ok {
		v := r.FindVersion(want)
		if v == nil {
			var have []string
			for _, v := range r.Versions {
				have = append(have, v.Version)
			}
			return nil, fmt.Errorf("build config pins %s to %q, but the recipe (%s) has only %s", r.Name, want, r.File(), strings.Join(have, ", "))
		}
		if !c.Match(v.Version) {
			return nil, fmt.Errorf("build config pins %s to %s, which does not satisfy %q", r.Name, want, c)
		}
		return v, nil
	}
	if def := r.DefaultVersion(); c.Match(def.Version) {
		return def, nil
	}
	if m := r.VersionsMatching(c); len(m) > 0 {
		return m[0], nil
	}
	return nil, fmt.Errorf("no version of %s satisfies %q", r.Name, c)
}

// finish computes the node's source digest, identity, hash and status.
func (pl *planner) finish(ctx context.Context, n *Node) error {
	if ext, ok := pl.opts.Settings.Externals[n.Name]; ok {
		version, warnings, err := probeExternal(ctx, n.Recipe, ext)
		if err != nil {
			return err
		}
		n.External, n.Warnings = ext, warnings
		// Show what is installed, not what the recipe would build.
		if version != "unknown" && version != "" {
			n.Version = version
		}
		n.Status = StatusExternal
		n.Reason = "external " + ext + " (" + version + ")"
		n.Identity = version + "@" + ext
		// What an external exports to dependents (ABI settings) is part
		// of its identity, like its version and path.
		n.Hash = hashJSON(map[string]any{"external": n.Name, "version": version, "path": ext, "platform": pl.opts.Platform,
			"exports": n.Recipe.Exports, "options": n.Options})
		return nil
	}
	digest, err := pl.sourceDigest(n)
	if err != nil {
		return err
	}
	n.SourceDigest = digest
	deps := map[string]string{}
	for _, d := range n.Deps {
		deps[d.Name] = d.Hash
	}
	compiler := ""
	if n.Toolchain == nil {
		compiler = pl.hostCompiler(ctx)
	}
	canon, err := n.Recipe.Canonical(n.Ver)
	if err != nil {
		return err
	}
	n.Hash = hashJSON(map[string]any{
		"recipe":   canon,
		"source":   digest,
		"options":  n.Options,
		"deps":     deps,
		"compiler": compiler,
		"platform": pl.opts.Platform,
	})
	switch {
	case slices.Contains(pl.opts.Force, n.Name):
		n.Status, n.Reason, n.Forced = StatusBuild, "forced", true
	case pl.opts.Store != nil && pl.opts.Store.Has(n.Key()):
		n.Status, n.Reason = StatusCached, "in store"
	default:
		n.Status, n.Reason = StatusBuild, "not in store"
		for _, d := range n.Deps {
			if d.Status == StatusBuild {
				n.Reason = "not in store; dependency " + d.Name + " is built first"
				break
			}
		}
	}
	return nil
}

func (pl *planner) hostCompiler(ctx context.Context) string {
	if pl.opts.HostCompiler != "" {
		return pl.opts.HostCompiler
	}
	if pl.cc == "" {
		pl.cc = "none"
		if out, err := exec.CommandContext(ctx, "cc", "--version").Output(); err == nil {
			pl.cc = strings.SplitN(string(out), "\n", 2)[0]
		}
	}
	return pl.cc
}

func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hashJSON: %v", err)) // only maps of plain values reach here
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ExternalError says which probe check rejected an external and what to do.
type ExternalError struct {
	Name, Path, Check, Detail, Help string
}

func (e *ExternalError) Error() string { return e.text(" rejected") }

// warning is the same failure of a warn check, which keeps the external.
func (e *ExternalError) warning() string { return e.text("") }

func (e *ExternalError) text(verdict string) string {
	msg := fmt.Sprintf("external %s at %s%s: check %q failed: %s", e.Name, e.Path, verdict, e.Check, e.Detail)
	if e.Help != "" {
		msg += "; " + e.Help
	}
	return msg
}

// probeExternal runs the recipe's probe against prefix and returns the
// detected version and what its warn checks found. Every other check must
// pass.
func probeExternal(ctx context.Context, r *recipe.Recipe, prefix string) (string, []string, error) {
	if r.Probe == nil {
		return "", nil, fmt.Errorf("external %s at %s: recipe %s has no probe, so an installed copy cannot be checked", r.Name, prefix, r.File())
	}
	if st, err := os.Stat(prefix); err != nil || !st.IsDir() {
		return "", nil, &ExternalError{Name: r.Name, Path: prefix, Check: "prefix exists", Detail: "no such directory", Help: firstHelp(r.Probe)}
	}
	run := func(script string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = append(os.Environ(), "PREFIX="+prefix)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// failed says why c does not hold ("" when it does).
	failed := func(c recipe.ProbeCheck) string {
		if c.File != "" {
			if _, err := os.Stat(filepath.Join(prefix, c.File)); err != nil {
				return filepath.Join(prefix, c.File) + " is missing"
			}
			return ""
		}
		out, err := run(c.Run)
		if err != nil {
			return fmt.Sprintf("%s failed: %v: %s", shownCommand(c.Run), err, lastLine(out))
		}
		if c.Expect != "" && !regexp.MustCompile(c.Expect).MatchString(out) {
			return fmt.Sprintf("%s printed %q, want a match of %q", shownCommand(c.Run), lastLine(out), c.Expect)
		}
		return ""
	}
	var warnings []string
	for _, c := range r.Probe.Checks {
		detail := failed(c)
		if detail == "" {
			continue
		}
		e := &ExternalError{Name: r.Name, Path: prefix, Check: c.Name, Detail: detail, Help: c.Help}
		if !c.Warn {
			return "", nil, e
		}
		warnings = append(warnings, e.warning())
	}
	version := "unknown"
	if v := r.Probe.Version; v != nil {
		out, err := run(v.Run)
		if err != nil {
			return "", nil, &ExternalError{Name: r.Name, Path: prefix, Check: "version", Detail: fmt.Sprintf("`%s` failed: %v", v.Run, err), Help: firstHelp(r.Probe)}
		}
		version = strings.SplitN(out, "\n", 2)[0]
		if v.Regex != "" {
			m := regexp.MustCompile(v.Regex).FindStringSubmatch(out)
			if m == nil {
				return "", nil, &ExternalError{Name: r.Name, Path: prefix, Check: "version", Detail: fmt.Sprintf("no match of %q in %q", v.Regex, lastLine(out))}
			}
			version = m[len(m)-1]
		}
	}
	return version, warnings, nil
}

// shownCommand quotes a one-line command in a message; a script is named
// by the check it belongs to instead, which the message already gives.
func shownCommand(run string) string {
	run = strings.TrimSpace(run)
	if len(run) > 80 || strings.Contains(run, "\n") {
		return "its command"
	}
	return "`" + run + "`"
}

func firstHelp(p *recipe.Probe) string {
	for _, c := range p.Checks {
		if c.Help != "" {
			return c.Help
		}
	}
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// SortedNames returns node names in plan order (dependencies first).
func (p *Plan) SortedNames() []string {
	out := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = n.Name
	}
	return out
}
