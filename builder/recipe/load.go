package recipe

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Dir is a directory of recipe files: the embedded built-ins or a
// user's --recipes directory.
type Dir struct {
	FS fs.FS
	// Label prefixes file names in errors ("recipes/llvm.yaml").
	Label string
	// BaseDir resolves relative local sources and patches. For built-ins it
	// is the project root; for user directories, the directory itself.
	BaseDir string
	Builtin bool
}

// OSDir returns a Dir for a directory on disk.
func OSDir(dir string) Dir {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return Dir{FS: os.DirFS(abs), Label: dir, BaseDir: abs}
}

// Set is a validated, closed set of recipes keyed by name.
type Set struct {
	byName map[string]*Recipe
	// broken holds the user recipes that failed to load (keyed by file
	// name stem) and those depending on them: one broken file in a
	// --recipes directory must not stop commands that do not need it.
	broken map[string]error
}

// Get returns the named recipe or nil.
func (s *Set) Get(name string) *Recipe { return s.byName[name] }

// Broken returns why the named recipe could not be loaded, or nil.
func (s *Set) Broken(name string) error { return s.broken[name] }

// BrokenNames lists the recipes that could not be loaded, sorted.
func (s *Set) BrokenNames() []string {
	names := make([]string, 0, len(s.broken))
	for n := range s.broken {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Names lists the recipe names, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load reads every *.yaml file of the dirs in order; a later dir
// overrides an earlier one's recipe of the same name (user recipes overlay
// the built-ins). The whole set is validated before it is returned: all
// problems are reported together, each with file:line:column.
func Load(dirs ...Dir) (*Set, error) {
	set := &Set{byName: map[string]*Recipe{}, broken: map[string]error{}}
	var errs ErrorList
	for _, d := range dirs {
		entries, err := fs.ReadDir(d.FS, ".")
		if err != nil {
			return nil, fmt.Errorf("reading recipes in %s: %w", d.Label, err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".yml") {
				continue
			}
			data, err := fs.ReadFile(d.FS, e.Name())
			if err != nil {
				return nil, fmt.Errorf("reading recipe %s: %w", path.Join(d.Label, e.Name()), err)
			}
			r, err := Parse(path.Join(d.Label, e.Name()), data)
			if err != nil {
				if d.Builtin {
					errs = append(errs, err)
					continue
				}
				// A user recipe: set aside, and it hides a built-in of
				// the same name rather than letting the built-in stand in.
				stem := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".yaml"), ".yml")
				set.broken[stem] = err
				delete(set.byName, stem)
				continue
			}
			delete(set.broken, r.Name)
			r.baseDir = d.BaseDir
			r.builtin = d.Builtin
			set.byName[r.Name] = r
		}
	}
	set.dropDependentsOfBroken()
	errs = append(errs, set.validate()...)
	if len(errs) > 0 {
		return nil, errs
	}
	return set, nil
}

// dropDependentsOfBroken sets aside, transitively, the recipes that depend
// on (or compile with) a broken one.
func (s *Set) dropDependentsOfBroken() {
	for changed := true; changed; {
		changed = false
		for _, name := range s.Names() {
			for _, dep := range s.byName[name].edges() {
				if err := s.broken[dep]; err != nil {
					s.broken[name] = fmt.Errorf("%s: needs recipe %s, which is broken: %w", s.byName[name].file, dep, err)
					delete(s.byName, name)
					changed = true
					break
				}
			}
		}
	}
}

// Parse decodes one recipe strictly (unknown keys and wrong types are
// errors) and checks everything that does not need the other recipes.
func Parse(file string, data []byte) (*Recipe, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, decodeError(file, nil, err)
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &PosError{File: file, Line: 1, Column: 1, Msg: "a recipe file holds exactly one YAML document"}
	}
	var r Recipe
	if err := yaml.NodeToValue(f.Docs[0].Body, &r, yaml.Strict()); err != nil {
		return nil, decodeError(file, f, err)
	}
	r.file, r.src, r.ast = file, data, f
	d := &doc{file: file, ast: f}
	errs := r.check(d)
	errs = append(errs, unquotedVersions(d, f)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return &r, nil
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
	refRE    = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_.-]*)\}`)
)

// unquotedVersions refuses versions written as YAML numbers: `1.10`
// would silently become "1.1".
func unquotedVersions(d *doc, f *ast.File) ErrorList {
	var errs ErrorList
	check := func(n ast.Node, field string) {
		switch n.(type) {
		case *ast.FloatNode, *ast.IntegerNode:
			tok := n.GetToken()
			errs = append(errs, &PosError{File: d.file, Line: tok.Position.Line, Column: tok.Position.Column, Field: field,
				Msg: fmt.Sprintf("version %s is a number to YAML; quote it (%q) so that it stays as written", tok.Value, tok.Value)})
		}
	}
	for _, mv := range mappingValues(f.Docs[0].Body) {
		key := mv.Key.GetToken().Value
		seq, ok := mv.Value.(*ast.SequenceNode)
		if !ok || (key != "versions" && key != "depends") {
			continue
		}
		for i, e := range seq.Values {
			for _, kv := range mappingValues(e) {
				if kv.Key.GetToken().Value == "version" {
					check(kv.Value, fmt.Sprintf("%s[%d].version", key, i))
				}
			}
		}
	}
	return errs
}

// mappingValues returns the key-value pairs of a mapping node (a mapping
// of one key is a bare MappingValueNode).
func mappingValues(n ast.Node) []*ast.MappingValueNode {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}
	}
	return nil
}

// check validates one recipe in isolation.
func (r *Recipe) check(d *doc) ErrorList {
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.errAt(field, format, args...)) }

	if r.Name == "" {
		add("name", "missing required field name")
	} else if !nameRE.MatchString(r.Name) {
		add("name", "invalid name %q (lowercase letters, digits, '.', '_' and '-')", r.Name)
	} else if stem := strings.TrimSuffix(strings.TrimSuffix(path.Base(d.file), ".yaml"), ".yml"); stem != r.Name {
		add("name", "name %q does not match the file name %q", r.Name, path.Base(d.file))
	}
	if len(r.Versions) == 0 {
		add("versions", "at least one version is required")
	}
	seen := map[string]bool{}
	defaults := 0
	for i := range r.Versions {
		v := &r.Versions[i]
		f := fmt.Sprintf("versions[%d]", i)
		if v.Version == "" {
			add(f, "missing required field version")
		} else if seen[v.Version] {
			add(f+".version", "duplicate version %q", v.Version)
		}
		seen[v.Version] = true
		if v.Default {
			defaults++
			if defaults > 1 {
				add(f+".default", "more than one version is marked default")
			}
		}
		errs = append(errs, checkSource(d, f+".source", &v.Source)...)
		errs = append(errs, checkPackages(d, f+".host_packages", v.HostPackages)...)
		for j, p := range v.Patches {
			errs = append(errs, checkPatch(d, fmt.Sprintf("%s.patches[%d]", f, j), p)...)
		}
	}
	for j, p := range r.Patches {
		errs = append(errs, checkPatch(d, fmt.Sprintf("patches[%d]", j), p)...)
	}
	errs = append(errs, checkPackages(d, "host_packages", r.HostPackages)...)
	for i, dep := range r.Depends {
		if dep.Name == "" {
			add(fmt.Sprintf("depends[%d]", i), "missing required field name")
		}
		if dep.Name == r.Name {
			add(fmt.Sprintf("depends[%d].name", i), "recipe depends on itself")
		}
	}
	for _, name := range sortedKeys(r.Options) {
		errs = append(errs, checkOption(d, "options."+name, r.Options[name])...)
	}
	switch sys := r.Build.System(); {
	case sys == "" && r.Build.CMake == nil && r.Build.Make == nil && r.Build.Go == nil && r.Build.Script == nil && r.Build.Meson == nil:
		add("build", "build needs exactly one of cmake, make, meson, go or script")
	case sys == "":
		add("build", "build sets several build systems; exactly one of cmake, make, meson, go or script is allowed")
	case sys == "go" && len(r.Build.Go.Packages) == 0:
		add("build.go", "go build needs at least one entry in packages")
	case sys == "script" && len(r.Build.Script.Steps) == 0:
		add("build.script", "script build needs at least one step")
	case sys == "script":
		for i, s := range r.Build.Script.Steps {
			if s.Name == "" || s.Run == "" {
				add(fmt.Sprintf("build.script.steps[%d]", i), "a step needs name and run")
			} else if strings.Contains(s.Name, "/") {
				// The name is its log's file name (logs/NAME/HASH/STEP.log).
				add(fmt.Sprintf("build.script.steps[%d].name", i), "step name %q must be a plain name: it names the step's log file", s.Name)
			}
		}
	}
	if r.Probe != nil {
		for i, c := range r.Probe.Checks {
			f := fmt.Sprintf("probe.checks[%d]", i)
			if (c.Run == "") == (c.File == "") {
				add(f, "a probe check needs exactly one of run or file")
			}
			if c.Expect != "" {
				if _, err := regexp.Compile(c.Expect); err != nil {
					add(f+".expect", "invalid regular expression: %v", err)
				}
			}
		}
		if r.Probe.Version != nil && r.Probe.Version.Regex != "" {
			if _, err := regexp.Compile(r.Probe.Version.Regex); err != nil {
				add("probe.version.regex", "invalid regular expression: %v", err)
			}
		}
	}
	// Every ${...} reference must name something that exists.
	deps := map[string]bool{}
	for _, dep := range r.Depends {
		deps[dep.Name] = true
	}
	if r.Toolchain != "" {
		deps[r.Toolchain] = true
	}
	for _, t := range r.templates() {
		for _, m := range refRE.FindAllStringSubmatch(t.value, -1) {
			if msg := checkRef(m[1], r.Options, deps, r.Toolchain); msg != "" {
				add(t.field, "%s", msg)
			}
		}
	}
	return errs
}

// builtinRefs are the ${...} names every build can use.
var builtinRefs = map[string]bool{
	"prefix": true, "src": true, "build": true, "jobs": true, "link_jobs": true,
	"version": true, "name": true, "project": true, "recipe_dir": true,
}

func checkRef(ref string, opts map[string]Option, deps map[string]bool, toolchain string) string {
	parts := strings.Split(ref, ".")
	switch parts[0] {
	case "options":
		if len(parts) != 2 {
			return fmt.Sprintf("invalid reference ${%s} (want ${options.NAME})", ref)
		}
		if _, ok := opts[parts[1]]; !ok {
			return fmt.Sprintf("reference ${%s} names option %q, which the recipe does not declare", ref, parts[1])
		}
	case "deps":
		if len(parts) != 3 || (parts[2] != "prefix" && parts[2] != "version") {
			return fmt.Sprintf("invalid reference ${%s} (want ${deps.NAME.prefix} or ${deps.NAME.version})", ref)
		}
		if !deps[parts[1]] {
			return fmt.Sprintf("reference ${%s} names %q, which is not among the recipe's depends", ref, parts[1])
		}
	case "toolchain":
		if toolchain == "" {
			return fmt.Sprintf("reference ${%s} needs a toolchain field", ref)
		}
		if len(parts) != 2 || (parts[1] != "cc" && parts[1] != "cxx" && parts[1] != "prefix") {
			return fmt.Sprintf("invalid reference ${%s} (want ${toolchain.cc}, ${toolchain.cxx} or ${toolchain.prefix})", ref)
		}
	default:
		// Anything else in braces is left for the shell (${HOME}); only
		// our lowercase names are ours, so flag a near miss.
		if len(parts) == 1 && builtinRefs[parts[0]] {
			return ""
		}
		if strings.ToLower(parts[0]) == parts[0] && len(parts) > 1 {
			return fmt.Sprintf("unknown reference ${%s}", ref)
		}
	}
	return ""
}

type template struct{ field, value string }

// templates lists every string that is interpolated at build time, with
// its YAML path for error messages.
func (r *Recipe) templates() []template {
	var out []template
	for _, k := range sortedKeys(r.Env) {
		out = append(out, template{"env." + k, r.Env[k]})
	}
	for _, k := range sortedKeys(r.Exports) {
		out = append(out, template{"exports." + k, r.Exports[k]})
	}
	b := r.Build
	if b.CMake != nil {
		for _, k := range sortedKeys(b.CMake.Defines) {
			out = append(out, template{"build.cmake.defines." + k, b.CMake.Defines[k]})
		}
		for i, t := range b.CMake.Targets {
			out = append(out, template{fmt.Sprintf("build.cmake.targets[%d]", i), t})
		}
	}
	if b.Make != nil {
		for i, s := range b.Make.Configure {
			out = append(out, template{fmt.Sprintf("build.make.configure[%d]", i), s})
		}
		for i, s := range b.Make.Args {
			out = append(out, template{fmt.Sprintf("build.make.args[%d]", i), s})
		}
		for i, s := range b.Make.Targets {
			out = append(out, template{fmt.Sprintf("build.make.targets[%d]", i), s})
		}
	}
	if b.Meson != nil {
		for _, k := range sortedKeys(b.Meson.Options) {
			out = append(out, template{"build.meson.options." + k, b.Meson.Options[k]})
		}
		for i, s := range b.Meson.Args {
			out = append(out, template{fmt.Sprintf("build.meson.args[%d]", i), s})
		}
		for i, s := range b.Meson.Targets {
			out = append(out, template{fmt.Sprintf("build.meson.targets[%d]", i), s})
		}
	}
	if b.Go != nil {
		out = append(out, template{"build.go.ldflags", b.Go.LDFlags})
	}
	if b.Script != nil {
		for i, s := range b.Script.Steps {
			out = append(out, template{fmt.Sprintf("build.script.steps[%d].run", i), s.Run})
		}
	}
	return out
}

func checkSource(d *doc, f string, s *Source) ErrorList {
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.errAt(field, format, args...)) }
	kind := s.Kind()
	if kind == "" {
		n := 0
		for _, v := range []string{s.URL, s.Git, s.Apt, s.Local} {
			if v != "" {
				n++
			}
		}
		if n == 0 {
			add(f, "source needs one of url, git, apt or local")
		} else {
			add(f, "source sets several kinds; exactly one of url, git, apt or local is allowed")
		}
		return errs
	}
	// Fields that belong to another kind are a mistake, not noise.
	allowed := map[SourceKind][]string{
		SourceURL:   {"sha256", "mirrors", "strip"},
		SourceGit:   {"tag", "commit", "submodules"},
		SourceApt:   {"apt_version", "file", "sha256", "strip"},
		SourceLocal: {"exclude", "include"},
	}[kind]
	set := map[string]bool{
		"sha256": s.SHA256 != "", "mirrors": len(s.Mirrors) > 0, "strip": s.Strip != 0,
		"tag": s.Tag != "", "commit": s.Commit != "", "submodules": s.Submodules,
		"apt_version": s.AptVersion != "", "file": s.File != "", "exclude": len(s.Exclude) > 0, "include": len(s.Include) > 0,
	}
	for _, k := range sortedKeys(set) {
		if set[k] && !contains(allowed, k) {
			add(f+"."+k, "field %s does not apply to a %s source", k, kind)
		}
	}
	if s.Strip < 0 {
		add(f+".strip", "strip must not be negative")
	}
	switch kind {
	case SourceURL:
		if s.SHA256 == "" {
			add(f+".url", "a url source needs sha256")
		}
	case SourceGit:
		if s.Tag == "" {
			add(f+".git", "a git source needs tag")
		}
		if s.Commit == "" {
			add(f+".git", "a git source needs commit (the full hash the tag must resolve to)")
		} else if !commitRE.MatchString(s.Commit) {
			add(f+".commit", "commit %q is not a full 40-character hex hash", s.Commit)
		}
	case SourceApt:
		if s.AptVersion == "" {
			add(f+".apt", "an apt source needs apt_version")
		}
		if s.File == "" {
			add(f+".apt", "an apt source needs file (the archive of the source package to use)")
		}
		if s.SHA256 == "" {
			add(f+".apt", "an apt source needs sha256")
		}
	}
	if s.SHA256 != "" && !sha256RE.MatchString(s.SHA256) {
		add(f+".sha256", "sha256 %q is not 64 lowercase hex digits", s.SHA256)
	}
	// A malformed glob never matches, so an include would silently leave
	// everything out of the hash and the copy, an exclude nothing.
	for _, g := range []struct {
		field    string
		patterns []string
	}{{"exclude", s.Exclude}, {"include", s.Include}} {
		field := g.field
		for i, p := range g.patterns {
			if !doublestar.ValidatePattern(p) {
				add(fmt.Sprintf("%s.%s[%d]", f, field, i), "%q is not a valid glob (path.Match syntax plus **)", p)
			} else if path.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
				add(fmt.Sprintf("%s.%s[%d]", f, field, i), "%q must be relative to the source's directory and stay inside it", p)
			}
		}
	}
	return errs
}

// debPackageRE is Debian policy's package name: lowercase letters, digits,
// '+', '-' and '.', at least two characters, starting alphanumeric.
var debPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

func checkPackages(d *doc, f string, pkgs []string) ErrorList {
	var errs ErrorList
	for i, p := range pkgs {
		if !debPackageRE.MatchString(p) {
			errs = append(errs, d.errAt(fmt.Sprintf("%s[%d]", f, i), "invalid package name %q (a distribution package: lowercase letters, digits, '+', '-', '.')", p))
		}
	}
	return errs
}

func checkPatch(d *doc, f string, p Patch) ErrorList {
	var errs ErrorList
	if p.File == "" {
		errs = append(errs, d.errAt(f, "a patch needs file"))
	}
	if p.SHA256 != "" && !sha256RE.MatchString(p.SHA256) {
		errs = append(errs, d.errAt(f+".sha256", "sha256 %q is not 64 lowercase hex digits", p.SHA256))
	}
	return errs
}

func checkOption(d *doc, f string, o Option) ErrorList {
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.errAt(field, format, args...)) }
	if o.Type == "" {
		add(f, "option needs type (bool, string, list or enum)")
		return errs
	}
	if o.Type == OptEnum && len(o.Values) == 0 {
		add(f, "an enum option needs values")
	}
	if o.Type != OptEnum && len(o.Values) > 0 {
		add(f+".values", "values apply only to enum options")
	}
	if o.Default == nil {
		add(f, "option needs a default")
		return errs
	}
	if _, err := coerceOption(o, o.Default); err != nil {
		add(f+".default", "%v", err)
	}
	return errs
}

// coerceOption checks v against the option's type and normalises lists to
// []string.
func coerceOption(o Option, v any) (any, error) {
	switch o.Type {
	case OptBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("want a bool, got %s", describe(v))
	case OptString:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, fmt.Errorf("want a string, got %s", describe(v))
	case OptEnum:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want one of %s, got %s", strings.Join(o.Values, ", "), describe(v))
		}
		if !contains(o.Values, s) {
			return nil, fmt.Errorf("%q is not one of %s", s, strings.Join(o.Values, ", "))
		}
		return s, nil
	case OptList:
		switch l := v.(type) {
		case []string:
			return l, nil
		case []any:
			out := make([]string, len(l))
			for i, e := range l {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("want a list of strings, item %d is %s", i, describe(e))
				}
				out[i] = s
			}
			return out, nil
		}
		return nil, fmt.Errorf("want a list of strings, got %s", describe(v))
	}
	return nil, fmt.Errorf("unknown option type %q", o.Type)
}

func describe(v any) string {
	switch v.(type) {
	case bool:
		return fmt.Sprintf("bool %v", v)
	case string:
		return fmt.Sprintf("string %q", v)
	case nil:
		return "nothing"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// validate checks what needs the whole set: dependencies exist, their
// version constraints can be met, toolchains exist, and there are no cycles.
func (s *Set) validate() ErrorList {
	var errs ErrorList
	for _, name := range s.Names() {
		r := s.byName[name]
		d := &doc{file: r.file, ast: r.ast}
		for i, dep := range r.Depends {
			other := s.byName[dep.Name]
			if other == nil {
				errs = append(errs, d.errAt(fmt.Sprintf("depends[%d].name", i), "unknown dependency %q (no recipe of that name)", dep.Name))
				continue
			}
			if len(other.VersionsMatching(dep.Version)) == 0 {
				errs = append(errs, d.errAt(fmt.Sprintf("depends[%d].version", i), "no version of %q satisfies %q", dep.Name, dep.Version))
			}
		}
		if r.Toolchain != "" && s.byName[r.Toolchain] == nil {
			errs = append(errs, d.errAt("toolchain", "unknown toolchain %q (no recipe of that name)", r.Toolchain))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// Cycle detection by DFS over depends and toolchain edges.
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(n string) error
	visit = func(n string) error {
		color[n] = grey
		stack = append(stack, n)
		r := s.byName[n]
		for i, dep := range r.edges() {
			switch color[dep] {
			case grey:
				start := indexOf(stack, dep)
				cycle := append(append([]string{}, stack[start:]...), dep)
				d := &doc{file: r.file, ast: r.ast}
				field := "toolchain"
				if i < len(r.Depends) {
					field = fmt.Sprintf("depends[%d].name", i)
				}
				return d.errAt(field, "dependency cycle: %s", strings.Join(cycle, " -> "))
			case white:
				if err := visit(dep); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return nil
	}
	for _, n := range s.Names() {
		if color[n] == white {
			if err := visit(n); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errs
}

// edges lists dependency names: depends first, then the toolchain.
func (r *Recipe) edges() []string {
	out := make([]string, 0, len(r.Depends)+1)
	for _, d := range r.Depends {
		out = append(out, d.Name)
	}
	if r.Toolchain != "" && !contains(out, r.Toolchain) {
		out = append(out, r.Toolchain)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool { return indexOf(list, s) >= 0 }

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
