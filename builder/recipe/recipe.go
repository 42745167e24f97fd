package recipe

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Recipe is one package: how to get its sources in each version and how to
// build and install them. One YAML file per recipe.
type Recipe struct {
	Name        string `yaml:"name" json:"name" jsonschema:"required,pattern=^[a-z0-9][a-z0-9._-]*$"`
	Description string `yaml:"description" json:"description,omitempty"`
	License     string `yaml:"license" json:"license,omitempty" jsonschema:"description=SPDX license expression"`
	Homepage    string `yaml:"homepage" json:"homepage,omitempty"`
	// Versions lists the buildable versions; exactly one may be marked
	// default (otherwise the first is the default).
	Versions []Version `yaml:"versions" json:"versions" jsonschema:"required,minItems=1"`
	// Depends lists other recipes whose install trees this one needs.
	Depends []Dependency `yaml:"depends" json:"depends,omitempty"`
	// Toolchain names a recipe (normally llvm) whose clang/clang++ compile
	// this recipe; it is an implicit dependency.
	Toolchain string            `yaml:"toolchain" json:"toolchain,omitempty"`
	Options   map[string]Option `yaml:"options" json:"options,omitempty"`
	Patches   []Patch           `yaml:"patches" json:"patches,omitempty"`
	Build     Build             `yaml:"build" json:"build" jsonschema:"required"`
	// Env is exported to every build step; values may use ${...} references.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
	// Exports are environment variables set in the builds of every recipe
	// that depends on this one (directly or not): how a library tells its
	// users the ABI it was built with. Values may use ${options.*},
	// ${prefix} and ${version} of this recipe.
	Exports map[string]string `yaml:"exports" json:"exports,omitempty"`
	// Memory is the expected peak memory of one compile and one link job,
	// used until measured figures exist.
	Memory MemoryProfile `yaml:"memory" json:"memory,omitempty"`
	// Disk is the space a build needs (sources, build dir and tree).
	Disk ByteSize `yaml:"disk" json:"disk,omitempty"`
	// Probe decides whether an installed copy may stand in as an external.
	Probe *Probe `yaml:"probe" json:"probe,omitempty"`
	// HostPackages are the distribution packages (Debian names) a build of
	// any version needs installed on the machine: the system libraries
	// CMake finds, the modules of code generators. A version adds its own.
	// doctor checks them and prints the apt-get line that installs what is
	// missing; a build stops before anything runs when one is missing.
	HostPackages []string `yaml:"host_packages" json:"host_packages,omitempty"`

	// file is where the recipe came from ("recipes/llvm.yaml" or a path);
	// baseDir is what relative local sources and patches resolve against.
	file    string
	baseDir string
	builtin bool
	src     []byte
	ast     *ast.File
}

// File returns the path the recipe was loaded from.
func (r *Recipe) File() string { return r.file }

// Version is one buildable version of a recipe.
type Version struct {
	Version string  `yaml:"version" json:"version" jsonschema:"required"`
	Default bool    `yaml:"default" json:"default,omitempty"`
	Source  Source  `yaml:"source" json:"source" jsonschema:"required"`
	Patches []Patch `yaml:"patches" json:"patches,omitempty"`
	// Epoch is the release date of the pinned source (Unix seconds); it is
	// the default SOURCE_DATE_EPOCH for reproducible output.
	Epoch int64 `yaml:"epoch" json:"epoch,omitempty"`
	// HostPackages are what this version needs besides the recipe's.
	HostPackages []string `yaml:"host_packages" json:"host_packages,omitempty"`
}

// Source says where a version's code comes from. Exactly one of URL, Git,
// Apt and Local is set; the other fields belong to that kind.
type Source struct {
	// url kind: an http(s) or file URL of an archive, with its sha256.
	URL     string   `yaml:"url" json:"url,omitempty"`
	SHA256  string   `yaml:"sha256" json:"sha256,omitempty" jsonschema:"pattern=^[0-9a-f]{64}$"`
	Mirrors []string `yaml:"mirrors" json:"mirrors,omitempty"`
	// git kind: a repository pinned by tag and the commit it must resolve to.
	Git        string `yaml:"git" json:"git,omitempty"`
	Tag        string `yaml:"tag" json:"tag,omitempty"`
	Commit     string `yaml:"commit" json:"commit,omitempty" jsonschema:"pattern=^[0-9a-f]{40}$"`
	Submodules bool   `yaml:"submodules" json:"submodules,omitempty"`
	// apt kind: a distribution source package; File is the archive used.
	Apt        string `yaml:"apt" json:"apt,omitempty"`
	AptVersion string `yaml:"apt_version" json:"apt_version,omitempty"`
	File       string `yaml:"file" json:"file,omitempty"`
	// local kind: a directory hashed by content. Relative paths resolve
	// against the recipe's directory (the project root for built-ins).
	Local   string   `yaml:"local" json:"local,omitempty"`
	Exclude []string `yaml:"exclude" json:"exclude,omitempty"`
	// Include, when set, limits a local source to the paths its globs
	// match (and the directories leading to them); Exclude still applies.
	Include []string `yaml:"include" json:"include,omitempty"`
	// Strip drops leading path components when extracting archives.
	Strip int `yaml:"strip" json:"strip,omitempty"`
}

// SourceKind names the kind of a Source.
type SourceKind string

// Source kinds.
const (
	SourceURL   SourceKind = "url"
	SourceGit   SourceKind = "git"
	SourceApt   SourceKind = "apt"
	SourceLocal SourceKind = "local"
)

// Kind returns the source's kind, or "" when none or several are set.
func (s *Source) Kind() SourceKind {
	var kinds []SourceKind
	if s.URL != "" {
		kinds = append(kinds, SourceURL)
	}
	if s.Git != "" {
		kinds = append(kinds, SourceGit)
	}
	if s.Apt != "" {
		kinds = append(kinds, SourceApt)
	}
	if s.Local != "" {
		kinds = append(kinds, SourceLocal)
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// Dependency names another recipe and the versions acceptable.
type Dependency struct {
	Name    string     `yaml:"name" json:"name" jsonschema:"required"`
	Version Constraint `yaml:"version" json:"version,omitempty"`
}

// Patch is applied to the extracted sources with `patch -pStrip`.
type Patch struct {
	File   string `yaml:"file" json:"file" jsonschema:"required"`
	Strip  *int   `yaml:"strip" json:"strip,omitempty"`
	SHA256 string `yaml:"sha256" json:"sha256,omitempty"`
}

// OptionType is the type of a recipe option.
type OptionType string

// Option types.
const (
	OptBool   OptionType = "bool"
	OptString OptionType = "string"
	OptList   OptionType = "list"
	OptEnum   OptionType = "enum"
)

// UnmarshalYAML refuses unknown option types with the node's position.
func (t *OptionType) UnmarshalYAML(node ast.Node) error {
	s, err := scalarString(node)
	if err != nil {
		return err
	}
	switch OptionType(s) {
	case OptBool, OptString, OptList, OptEnum:
		*t = OptionType(s)
		return nil
	}
	return nodeError(node, fmt.Sprintf("unknown option type %q (want bool, string, list or enum)", s))
}

// Option is a typed, named knob of a recipe; build.yaml sets values.
type Option struct {
	Type        OptionType `yaml:"type" json:"type" jsonschema:"required,enum=bool,enum=string,enum=list,enum=enum"`
	Default     any        `yaml:"default" json:"default,omitempty"`
	Values      []string   `yaml:"values" json:"values,omitempty" jsonschema:"description=allowed values of an enum"`
	Description string     `yaml:"description" json:"description,omitempty"`
}

// Build is a typed union: exactly one build system is set.
type Build struct {
	CMake  *CMakeBuild  `yaml:"cmake" json:"cmake,omitempty"`
	Make   *MakeBuild   `yaml:"make" json:"make,omitempty"`
	Go     *GoBuild     `yaml:"go" json:"go,omitempty"`
	Script *ScriptBuild `yaml:"script" json:"script,omitempty"`
	Meson  *MesonBuild  `yaml:"meson" json:"meson,omitempty"`
}

// System names the build system set, or "" when none or several are.
func (b *Build) System() string {
	var set []string
	if b.CMake != nil {
		set = append(set, "cmake")
	}
	if b.Make != nil {
		set = append(set, "make")
	}
	if b.Go != nil {
		set = append(set, "go")
	}
	if b.Script != nil {
		set = append(set, "script")
	}
	if b.Meson != nil {
		set = append(set, "meson")
	}
	if len(set) != 1 {
		return ""
	}
	return set[0]
}

// Generator is a CMake generator.
type Generator string

// UnmarshalYAML accepts the generators tritonbuild drives.
func (g *Generator) UnmarshalYAML(node ast.Node) error {
	s, err := scalarString(node)
	if err != nil {
		return err
	}
	switch s {
	case "Ninja", "Unix Makefiles":
		*g = Generator(s)
		return nil
	}
	return nodeError(node, fmt.Sprintf("unknown generator %q (want Ninja or \"Unix Makefiles\")", s))
}

// CMakeBuild configures with CMake, builds targets and installs.
type CMakeBuild struct {
	Generator Generator `yaml:"generator" json:"generator,omitempty" jsonschema:"enum=Ninja,enum=Unix Makefiles"`
	// SourceDir is the directory holding the top CMakeLists.txt, relative
	// to the extracted source (LLVM's is "llvm").
	SourceDir string `yaml:"source_dir" json:"source_dir,omitempty"`
	BuildType string `yaml:"build_type" json:"build_type,omitempty"`
	// Defines become -DKEY=VALUE; a bool option renders as ON/OFF and a list
	// option as a ;-list.
	Defines map[string]string `yaml:"defines" json:"defines,omitempty"`
	// Targets limits the build to these targets (default: all).
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// InstallComponents installs only these components (default: all).
	InstallComponents []string `yaml:"install_components" json:"install_components,omitempty"`
	// ParallelJobVars names cache variables that receive the planned
	// compile and link job counts (LLVM_PARALLEL_COMPILE_JOBS, ...).
	CompileJobsVar string `yaml:"compile_jobs_var" json:"compile_jobs_var,omitempty"`
	LinkJobsVar    string `yaml:"link_jobs_var" json:"link_jobs_var,omitempty"`
}

// MakeBuild runs an optional configure command, make, and make install.
type MakeBuild struct {
	Configure []string `yaml:"configure" json:"configure,omitempty"`
	Targets   []string `yaml:"targets" json:"targets,omitempty"`
	Args      []string `yaml:"args" json:"args,omitempty"`
	Install   []string `yaml:"install" json:"install,omitempty" jsonschema:"description=install targets (default: install)"`
}

// MesonBuild configures with `meson setup`, builds with `meson compile`
// and installs with `meson install`.
type MesonBuild struct {
	// SourceDir is the directory of the top meson.build, relative to the
	// extracted source.
	SourceDir string `yaml:"source_dir" json:"source_dir,omitempty"`
	// BuildType is meson's --buildtype; the default "plain" leaves the
	// optimization to the toolchain's flags (-O2 -g), as distributions do.
	BuildType string `yaml:"build_type" json:"build_type,omitempty"`
	// Options become -DKEY=VALUE (a bool option renders as true/false, a
	// list option as a comma-separated array).
	Options map[string]string `yaml:"options" json:"options,omitempty"`
	// Args are further arguments of `meson setup`.
	Args []string `yaml:"args" json:"args,omitempty"`
	// Targets limits `meson compile` to these targets (default: all).
	Targets []string `yaml:"targets" json:"targets,omitempty"`
}

// GoBuild compiles Go main packages into ${prefix}/bin.
type GoBuild struct {
	Packages []string `yaml:"packages" json:"packages" jsonschema:"required,minItems=1"`
	CGO      bool     `yaml:"cgo" json:"cgo,omitempty"`
	LDFlags  string   `yaml:"ldflags" json:"ldflags,omitempty"`
	Tags     []string `yaml:"tags" json:"tags,omitempty"`
}

// ScriptBuild runs shell steps in order with bash -e.
type ScriptBuild struct {
	Steps []Step `yaml:"steps" json:"steps" jsonschema:"required,minItems=1"`
}

// Step is one named shell step.
type Step struct {
	Name string `yaml:"name" json:"name" jsonschema:"required"`
	Run  string `yaml:"run" json:"run" jsonschema:"required"`
}

// MemoryProfile is the declared peak memory per job kind.
type MemoryProfile struct {
	Compile ByteSize `yaml:"compile" json:"compile,omitempty"`
	Link    ByteSize `yaml:"link" json:"link,omitempty"`
}

// Probe checks an installed prefix before it is accepted as an external.
// Commands run with bash; $PREFIX is the external's path.
type Probe struct {
	// Version prints the installed version (first line of stdout, or the
	// first match of Regex); it becomes part of the node's identity.
	Version *ProbeCommand `yaml:"version" json:"version,omitempty"`
	Checks  []ProbeCheck  `yaml:"checks" json:"checks,omitempty"`
}

// ProbeCommand runs a command and extracts a value from its output.
type ProbeCommand struct {
	Run   string `yaml:"run" json:"run" jsonschema:"required"`
	Regex string `yaml:"regex" json:"regex,omitempty"`
}

// ProbeCheck is one requirement: a command whose output must match Expect,
// or a file that must exist. Help says what to install when it fails.
// Warn makes a failure a warning on the plan instead of a rejection, for
// what still works without it, only slower (a reference BLAS under an
// installed libtorch, say).
type ProbeCheck struct {
	Name   string `yaml:"name" json:"name" jsonschema:"required"`
	Run    string `yaml:"run" json:"run,omitempty"`
	Expect string `yaml:"expect" json:"expect,omitempty"`
	File   string `yaml:"file" json:"file,omitempty"`
	Help   string `yaml:"help" json:"help,omitempty"`
	Warn   bool   `yaml:"warn" json:"warn,omitempty"`
}

// ByteSize is a size written as 512MiB, 1.5GiB, 2G or a plain byte count.
type ByteSize int64

// UnmarshalYAML parses human sizes with the node's position on error.
func (b *ByteSize) UnmarshalYAML(node ast.Node) error {
	s, err := scalarString(node)
	if err != nil {
		return err
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return nodeError(node, err.Error())
	}
	*b = v
	return nil
}

// ParseByteSize parses "1.5GiB", "512M", "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512MiB, 1.5GiB)", s)
	}
	return ByteSize(f * mult), nil
}

// String renders the size in GiB/MiB for humans.
func (b ByteSize) String() string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + "GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) + "MiB"
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// DefaultVersion returns the version marked default, else the first.
func (r *Recipe) DefaultVersion() *Version {
	for i := range r.Versions {
		if r.Versions[i].Default {
			return &r.Versions[i]
		}
	}
	return &r.Versions[0]
}

// HostPackagesOf returns the distribution packages building version v
// needs: the recipe's, then the version's, each once.
func (r *Recipe) HostPackagesOf(v *Version) []string {
	var out []string
	for _, p := range append(append([]string{}, r.HostPackages...), v.HostPackages...) {
		if !contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// FindVersion returns the named version or nil.
func (r *Recipe) FindVersion(v string) *Version {
	for i := range r.Versions {
		if r.Versions[i].Version == v {
			return &r.Versions[i]
		}
	}
	return nil
}

// VersionsMatching returns the versions satisfying c, newest first.
func (r *Recipe) VersionsMatching(c Constraint) []*Version {
	var out []*Version
	for i := range r.Versions {
		if c.Match(r.Versions[i].Version) {
			out = append(out, &r.Versions[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return compareVersions(out[i].Version, out[j].Version) > 0 })
	return out
}

func scalarString(node ast.Node) (string, error) {
	switch n := node.(type) {
	case *ast.StringNode:
		return n.Value, nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.LiteralNode:
		return node.GetToken().Value, nil
	}
	return "", nodeError(node, fmt.Sprintf("expected a scalar, got %s", node.Type()))
}
