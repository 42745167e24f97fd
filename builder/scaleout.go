package builder

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tritonbuild/tritonbuild/toolchain"
)

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

// AddRemoteSlots raises every build node's compile jobs by the distcc
// hosts' slots (links stay as planned: they run here). Call it after
// AssignJobs, unless --jobs was given explicitly.
func AddRemoteSlots(plan *Plan, d *toolchain.DistccConfig) {
	if d == nil {
		return
	}
	slots := d.Slots()
	for _, n := range plan.Nodes {
		if n.Jobs == nil || slots == 0 {
			continue
		}
		n.Jobs.Compile += slots
		n.Jobs.Why += fmt.Sprintf("; +%d remote distcc slots", slots)
	}
}

// ChainLauncher extends the memory launcher's chain for compiles with
// ccache and/or distcc: launch -> ccache -> distcc -> compiler. Links keep
// going through the broker alone.
type ChainLauncher struct {
	Base   *MemoryLauncher
	Ccache *toolchain.CcacheConfig
	Distcc *toolchain.DistccConfig
}

// Prepare starts the base launcher and adds the chain's settings, with
// ccache's base dir set to the node's work dir.
func (c *ChainLauncher) Prepare(ctx context.Context, n *Node, jobs JobPlan, statsPath, workDir string) (Launch, error) {
	base, err := c.Base.Prepare(ctx, n, jobs, statsPath, workDir)
	if err != nil {
		return nil, err
	}
	inner, env := toolchain.CompileChain(c.Ccache, c.Distcc, workDir)
	return &chainLaunch{Launch: base, exe: c.Base.Exe, inner: inner, env: env}, nil
}

type chainLaunch struct {
	Launch
	exe   string
	inner []string
	env   []string
}

func (c *chainLaunch) Env() []string { return append(c.Launch.Env(), c.env...) }

func (c *chainLaunch) CMakeArgs() []string {
	return toolchain.Launcher{Exe: c.exe}.CMakeArgs(c.inner...)
}

func (c *chainLaunch) Wrap(cc, cxx string) (string, string) {
	if len(c.inner) == 0 {
		return c.Launch.Wrap(cc, cxx)
	}
	words := strings.Join(c.inner, " ")
	return c.Launch.Wrap(words+" "+cc, words+" "+cxx)
}
