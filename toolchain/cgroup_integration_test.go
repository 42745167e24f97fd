package toolchain_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/toolchain"
	"github.com/tritonbuild/tritonbuild/toolchain/memtest"
)

// The fixture: 6 compiles of 200 MiB each (and a 200 MiB link) under a
// 600 MiB memory cgroup. make -j4 cannot fit; two at a time can.
const (
	itLimit   = 600 << 20
	itObjects = 6
	itMem     = "200M"
	itHold    = 700 * time.Millisecond
	itReserve = 64 << 20
)

// newGroup makes a real memory cgroup, or ends the test through testenv.
func newGroup(t *testing.T) *memtest.Group {
	t.Helper()
	testenv.NeedTools(t, "make")
	g, err := memtest.NewGroup(itLimit)
	var ue *memtest.UnavailableError
	if errors.As(err, &ue) {
		testenv.Unavailable(t, "integration test needs a memory cgroup (root, cgroup v2 or v1 memory controller): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("cgroup v%d %s limit %s", g.Cgroup.Version, g.Cgroup.Dir, toolchain.FormatBytes(g.Limit))
	return g
}

// budgetFor derives the broker budget from the group's limit the way the
// builder derives it from the probe: what is available minus a reserve.
func budgetFor(t *testing.T, g *memtest.Group) int64 {
	t.Helper()
	ml, err := g.Cgroup.ReadMemoryLimit()
	if err != nil {
		t.Fatal(err)
	}
	if ml.Limit != itLimit {
		t.Fatalf("ReadMemoryLimit on the new group: limit %d, want %d", ml.Limit, itLimit)
	}
	return ml.Available - itReserve
}

func TestIntegrationCgroupFixedJobsAreOOMKilled(t *testing.T) {
	exe := self(t)
	g := newGroup(t)
	p, err := memtest.WriteProject(t.TempDir(), itObjects)
	if err != nil {
		t.Fatal(err)
	}
	mon := toolchain.NewOOMMonitor(g.Cgroup, nil)
	res := memtest.RunMake(context.Background(), g, p, memtest.MakeOptions{Jobs: 4, CC: exe + " fakecc", Mem: itMem, Hold: itHold})
	t.Logf("make -j4 without the broker: %v in %v, oom_kill +%d", res.Err, res.Wall.Round(time.Millisecond), res.OOMKills)
	if res.Err == nil {
		t.Fatalf("make -j4 with 4 x 200 MiB in 600 MiB succeeded; the fixture does not exercise the limit:\n%s", res.Output)
	}
	if res.OOMKills == 0 {
		t.Fatalf("make failed without an OOM kill: %v\n%s", res.Err, res.Output)
	}
	if err := mon.Classify(res.Err, res.Output); !toolchain.IsOOM(err) {
		t.Errorf("Classify = %v, want an OOM error", err)
	} else {
		t.Logf("classified: %v", err)
	}
}

func TestIntegrationCgroupBrokerAvoidsOOM(t *testing.T) {
	exe := self(t)
	g := newGroup(t)
	p, err := memtest.WriteProject(t.TempDir(), itObjects)
	if err != nil {
		t.Fatal(err)
	}
	budget := budgetFor(t, g)
	b, err := toolchain.StartBroker(context.Background(), toolchain.BrokerOptions{Budget: budget, TrimPrefixes: []string{p.Dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cc := strings.TrimPrefix(toolchain.Launcher{Exe: exe}.MakeEnv(exe+" fakecc", "")[0], "CC=")
	res := memtest.RunMake(context.Background(), g, p, memtest.MakeOptions{Jobs: 4, CC: cc, Mem: itMem, Hold: itHold, Env: b.Env()})
	c := b.Counters()
	t.Logf("make -j4 through the broker (budget %s): %v in %v, oom_kill +%d, counters %+v",
		toolchain.FormatBytes(budget), res.Err, res.Wall.Round(time.Millisecond), res.OOMKills, c)
	if res.Err != nil {
		t.Fatalf("build through the broker failed: %v\n%s", res.Err, res.Output)
	}
	if res.OOMKills != 0 || c.OOMKills != 0 {
		t.Errorf("OOM kills under the broker: cgroup +%d, launcher %d", res.OOMKills, c.OOMKills)
	}
	if c.Completed != itObjects+1 || c.PeakConcurrency > 2 || c.Waited == 0 {
		t.Errorf("counters = %+v; want %d completed, at most 2 at once, some waits", c, itObjects+1)
	}
	if p95 := b.Stats().KindP95(toolchain.KindCompile); p95 < 200<<20 || p95 > 300<<20 {
		t.Errorf("learned compile p95 = %s, want about 200 MiB", toolchain.FormatBytes(p95))
	}
}

func TestIntegrationCgroupOOMRetry(t *testing.T) {
	exe := self(t)
	g := newGroup(t)
	p, err := memtest.WriteProject(t.TempDir(), itObjects)
	if err != nil {
		t.Fatal(err)
	}
	budget := budgetFor(t, g)
	// The recipe declares 100 MiB per compile, half the truth: the first
	// attempt lets four run and the kernel kills one.
	b, err := toolchain.StartBroker(context.Background(), toolchain.BrokerOptions{
		Budget: budget, Declared: toolchain.Profile{CompileBytes: 100 << 20, LinkBytes: 100 << 20}, TrimPrefixes: []string{p.Dir},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cc := strings.TrimPrefix(toolchain.Launcher{Exe: exe}.MakeEnv(exe+" fakecc", "")[0], "CC=")
	var said []string
	policy := toolchain.RetryPolicy{Jobs: 4, Budget: budget, Logf: func(f string, a ...any) {
		said = append(said, f)
		t.Logf(f, a...)
	}}
	attempts, err := policy.Run(context.Background(), func(ctx context.Context, a toolchain.Attempt) error {
		b.SetBudget(a.Budget)
		mon := toolchain.NewOOMMonitor(g.Cgroup, b)
		res := memtest.RunMake(ctx, g, p, memtest.MakeOptions{Jobs: a.Jobs, CC: cc, Mem: itMem, Hold: itHold, Env: b.Env()})
		t.Logf("attempt %d: -j%d budget %s: %v in %v, oom_kill +%d", a.Number, a.Jobs, toolchain.FormatBytes(a.Budget),
			res.Err, res.Wall.Round(time.Millisecond), res.OOMKills)
		return mon.Classify(res.Err, res.Output)
	})
	if err != nil {
		t.Fatalf("retries did not recover: %v", err)
	}
	if len(attempts) != 2 || !toolchain.IsOOM(attempts[0].Err) || attempts[1].Jobs != 2 || len(said) != 1 {
		t.Fatalf("attempts = %+v, want an OOM-killed first attempt and a successful one at -j2", attempts)
	}
	if b.Counters().OOMKills == 0 {
		t.Error("the launcher did not report the OOM-killed command to the broker")
	}
}
