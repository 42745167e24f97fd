package builder

import (
	"context"
	"fmt"
	"strings"

	"github.com/tritonbuild/tritonbuild/toolchain"
)

// addRemoteSlots raises every build node's compile jobs by the distcc
// hosts' slots (links stay as planned: they run here). Call it after
// assignJobs, unless --jobs was given explicitly.
func addRemoteSlots(plan *Plan, d *toolchain.DistccConfig) {
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

// chainLauncher extends the memory launcher's chain for compiles with
// ccache and/or distcc: launch -> ccache -> distcc -> compiler. Links keep
// going through the broker alone.
type chainLauncher struct {
	Base   *memoryLauncher
	Ccache *toolchain.CcacheConfig
	Distcc *toolchain.DistccConfig
}

// Prepare starts the base launcher and adds the chain's settings, with
// ccache's base dir set to the node's work dir.
func (c *chainLauncher) Prepare(ctx context.Context, n *Node, jobs JobPlan, statsPath, workDir string) (Launch, error) {
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
