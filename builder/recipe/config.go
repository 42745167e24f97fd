package recipe

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/tritonbuild/tritonbuild/toolchain"
)

// Config is the project's build.yaml: what to build and how.
type Config struct {
	Settings `yaml:",inline"`
	// Profiles are named overlays of Settings (--profile NAME).
	Profiles map[string]Settings `yaml:"profiles" json:"profiles,omitempty"`

	// file and dir locate build.yaml; relative paths resolve against dir.
	file string
	dir  string
	doc  *doc
}

// Settings are the values a profile may override. Zero values mean
// "inherit"; maps merge key by key.
type Settings struct {
	// Targets are the recipes `tritonbuild all` builds (closures included).
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Prefix is where `tritonbuild install` lays out the targets' closure.
	Prefix string `yaml:"prefix" json:"prefix,omitempty"`
	// Store holds install trees, sources and logs (default: the user's
	// cache dir; --store and TRITONBUILD_STORE override).
	Store string `yaml:"store" json:"store,omitempty"`
	// Versions pins a recipe to one of its versions.
	Versions map[string]string `yaml:"versions" json:"versions,omitempty"`
	// Options sets recipe option values: options: {llvm: {targets: X86}}.
	Options map[string]map[string]any `yaml:"options" json:"options,omitempty"`
	// Externals uses an installed prefix instead of building a recipe; the
	// recipe's probe must accept it.
	Externals map[string]string `yaml:"externals" json:"externals,omitempty"`
	// Mirrors are URL bases tried before upstream: MIRROR/NAME/FILE.
	Mirrors []string `yaml:"mirrors" json:"mirrors,omitempty"`
	// RecipesDirs overlay user recipes on the built-ins, in order.
	RecipesDirs []string `yaml:"recipes_dirs" json:"recipes_dirs,omitempty"`
	Jobs        Jobs     `yaml:"jobs" json:"jobs,omitempty"`
	Image       *Image   `yaml:"image" json:"image,omitempty"`
	// Cache shares built trees through an OCI registry and compiler
	// output through ccache; Distribute sends compiles to distcc hosts.
	Cache      CacheSettings      `yaml:"cache" json:"cache,omitempty"`
	Distribute DistributeSettings `yaml:"distribute" json:"distribute,omitempty"`
}

// Jobs is the parallelism policy.
type Jobs struct {
	// Max caps concurrent jobs (0: the number of usable CPUs).
	Max int `yaml:"max" json:"max,omitempty"`
	// Reserve is memory kept free for the rest of the machine.
	Reserve ByteSize `yaml:"reserve" json:"reserve,omitempty"`
}

// Image describes the OCI image `tritonbuild all` assembles.
type Image struct {
	// Target is the recipe whose closure goes into the image.
	Target string `yaml:"target" json:"target"`
	// Tag names the image in tarballs and pushes (repo:tag).
	Tag string `yaml:"tag" json:"tag,omitempty"`
	// Tarball and Layout are output paths (relative to build.yaml).
	Tarball string `yaml:"tarball" json:"tarball,omitempty"`
	Layout  string `yaml:"layout" json:"layout,omitempty"`
	// ModelRepository adds a model repository layer at /models.
	ModelRepository string `yaml:"model_repository" json:"model_repository,omitempty"`
	// Python adds the host's Python interpreter with numpy and torch.
	Python bool `yaml:"python" json:"python,omitempty"`
}

// LoadConfig reads build.yaml strictly.
func LoadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading build config: %w", err)
	}
	return ParseConfig(file, data)
}

// ParseConfig decodes build.yaml content; file names it in errors and
// anchors relative paths.
func ParseConfig(file string, data []byte) (*Config, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, decodeError(file, nil, err)
	}
	c := &Config{file: file}
	if len(f.Docs) > 0 && f.Docs[0].Body != nil {
		if err := yaml.NodeToValue(f.Docs[0].Body, c, yaml.Strict()); err != nil {
			return nil, decodeError(file, f, err)
		}
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	c.dir = filepath.Dir(abs)
	c.doc = &doc{file: file, ast: f}
	return c, nil
}

// FindConfig walks up from dir to the nearest build.yaml, so commands work
// from subdirectories like git does. It returns "build.yaml" when none.
func FindConfig(dir string) string {
	for d := dir; ; {
		p := filepath.Join(d, "build.yaml")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "build.yaml"
		}
		d = parent
	}
}

// Dir is the directory holding build.yaml (the project root).
func (c *Config) Dir() string { return c.dir }

// File is build.yaml's path.
func (c *Config) File() string { return c.file }

// Resolve returns the settings with the named profile applied ("" for
// none). An unknown profile is an error listing the known ones.
func (c *Config) Resolve(profile string) (Settings, error) {
	s := c.Settings
	if profile == "" {
		return s, nil
	}
	p, ok := c.Profiles[profile]
	if !ok {
		return s, fmt.Errorf("%s: unknown profile %q (known: %v)", c.file, profile, sortedKeys(c.Profiles))
	}
	if len(p.Targets) > 0 {
		s.Targets = p.Targets
	}
	if p.Prefix != "" {
		s.Prefix = p.Prefix
	}
	if p.Store != "" {
		s.Store = p.Store
	}
	s.Versions = mergeMap(s.Versions, p.Versions)
	s.Externals = mergeMap(s.Externals, p.Externals)
	s.Options = mergeOptions(s.Options, p.Options)
	if len(p.Mirrors) > 0 {
		s.Mirrors = p.Mirrors
	}
	if len(p.RecipesDirs) > 0 {
		s.RecipesDirs = p.RecipesDirs
	}
	if p.Jobs.Max != 0 {
		s.Jobs.Max = p.Jobs.Max
	}
	if p.Jobs.Reserve != 0 {
		s.Jobs.Reserve = p.Jobs.Reserve
	}
	if p.Cache.Registry != "" || p.Cache.Ccache != nil || p.Cache.NoPush || p.Cache.Insecure {
		s.Cache = p.Cache
	}
	if p.Distribute.Distcc != nil {
		s.Distribute = p.Distribute
	}
	if p.Image != nil {
		img := *p.Image
		if s.Image != nil {
			merged := *s.Image
			if img.Target != "" {
				merged.Target = img.Target
			}
			if img.Tag != "" {
				merged.Tag = img.Tag
			}
			if img.Tarball != "" {
				merged.Tarball = img.Tarball
			}
			if img.Layout != "" {
				merged.Layout = img.Layout
			}
			if img.ModelRepository != "" {
				merged.ModelRepository = img.ModelRepository
			}
			merged.Python = merged.Python || img.Python
			img = merged
		}
		s.Image = &img
	}
	return s, nil
}

// Abs resolves a path from build.yaml against its directory.
func (c *Config) Abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

func mergeMap(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

func mergeOptions(base, over map[string]map[string]any) map[string]map[string]any {
	if len(over) == 0 {
		return base
	}
	out := map[string]map[string]any{}
	for r, m := range base {
		out[r] = map[string]any{}
		for k, v := range m {
			out[r][k] = v
		}
	}
	for r, m := range over {
		if out[r] == nil {
			out[r] = map[string]any{}
		}
		for k, v := range m {
			out[r][k] = v
		}
	}
	return out
}

// CacheSettings is build.yaml's cache section:
//
//	cache:
//	  registry: registry.example/team/tritonbuild-cache   # binary cache
//	  insecure: false                                      # plain HTTP
//	  ccache: {dir: /var/cache/ccache, remote: "http://cache:8080/ccache", max_size: 20G}
type CacheSettings struct {
	// Registry is the repository holding install trees tagged by node
	// hash (package builder/remote); "" disables the binary cache.
	Registry string `yaml:"registry" json:"registry,omitempty"`
	// Insecure talks plain HTTP to the registry.
	Insecure bool `yaml:"insecure" json:"insecure,omitempty"`
	// NoPush pulls only: builds do not upload (e.g. on developer machines
	// while CI fills the cache).
	NoPush bool            `yaml:"no_push" json:"no_push,omitempty"`
	Ccache *CcacheSettings `yaml:"ccache" json:"ccache,omitempty"`
}

// CcacheSettings configure ccache in the compile launcher chain.
type CcacheSettings struct {
	// Dir is the local cache; relative paths resolve against build.yaml.
	Dir string `yaml:"dir" json:"dir,omitempty"`
	// Remote is ccache's remote storage URL (ccache >= 4.4).
	Remote  string `yaml:"remote" json:"remote,omitempty"`
	MaxSize string `yaml:"max_size" json:"max_size,omitempty"`
}

// DistributeSettings is build.yaml's distribute section:
//
//	distribute:
//	  distcc: {hosts: ["build1/8", "build2:3632/8"]}
type DistributeSettings struct {
	Distcc *DistccSettings `yaml:"distcc" json:"distcc,omitempty"`
}

// DistccSettings list the distccd hosts compiles go to.
type DistccSettings struct {
	Hosts []string `yaml:"hosts" json:"hosts"`
	// Fallback lets distcc compile locally when no host answers.
	Fallback bool `yaml:"fallback" json:"fallback,omitempty"`
}

// Config turns the settings into the toolchain's form; baseDir anchors a
// relative cache dir. A nil receiver gives nil.
func (c *CcacheSettings) Config(baseDir string) *toolchain.CcacheConfig {
	if c == nil {
		return nil
	}
	dir := c.Dir
	if dir != "" && !filepath.IsAbs(dir) {
		dir = filepath.Join(baseDir, dir)
	}
	return &toolchain.CcacheConfig{Dir: dir, Remote: c.Remote, MaxSize: c.MaxSize}
}

// Config turns the settings into the toolchain's form, checking every host
// spec. A nil receiver (or one without hosts) gives nil.
func (d *DistributeSettings) Config() (*toolchain.DistccConfig, error) {
	if d == nil || d.Distcc == nil {
		return nil, nil
	}
	cfg := &toolchain.DistccConfig{Hosts: d.Distcc.Hosts, Fallback: d.Distcc.Fallback}
	if _, err := cfg.ParseHosts(); err != nil {
		return nil, fmt.Errorf("build config distribute.distcc: %w", err)
	}
	return cfg, nil
}
