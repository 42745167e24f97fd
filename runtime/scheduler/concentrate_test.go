package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// machineBackend's instances stand for stubs on a machine of cores cores:
// an execute of a CPU-bound model takes work of CPU, stretched while more
// executes than cores share them, the stretch counted as run-queue wait;
// one of a model that sleeps takes work of wall time and almost no CPU.
// Each instance reports its figures as a stub's schedstat would.
type machineBackend struct {
	cores    int32
	work     time.Duration
	cpuBound atomic.Bool
	metered  bool

	running atomic.Int32
	mu      sync.Mutex
	execs   int
	alone   int   // executes that ran with no other
	most    int32 // the most executes at once
}

type machineInstance struct {
	be        *machineBackend
	run, wait atomic.Int64
}

// plainInstance hides machineInstance's CPUMeter.
type plainInstance struct{ *machineInstance }

func (in plainInstance) ExecCPU() {}

func (b *machineBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	in := &machineInstance{be: b}
	if !b.metered {
		return plainInstance{in}, nil
	}
	return in, nil
}

func (in *machineInstance) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	b := in.be
	now := b.running.Add(1)
	defer b.running.Add(-1)
	b.mu.Lock()
	b.execs++
	b.most = max(b.most, now)
	b.mu.Unlock()
	start := time.Now()
	if !b.cpuBound.Load() {
		time.Sleep(b.work)
		in.run.Add(int64(b.work / 50))
		b.count(now)
		return emptyResponses(len(reqs)), nil
	}
	// Shares of the cores while the others run: sampled as it goes, so
	// an execute that overlapped any other one counts as not alone.
	alone := now == 1
	left := b.work
	for left > 0 {
		n := max(b.running.Load(), 1)
		alone = alone && n == 1
		step := min(left, 200*time.Microsecond)
		stretch := time.Duration(float64(step) * max(1, float64(n)/float64(b.cores)))
		time.Sleep(stretch)
		left -= step
	}
	wall := time.Since(start)
	in.run.Add(int64(b.work))
	in.wait.Add(int64(max(wall-b.work, 0)))
	if alone {
		b.count(1)
	} else {
		b.count(2)
	}
	return emptyResponses(len(reqs)), nil
}

func (b *machineBackend) count(at int32) {
	if at == 1 {
		b.mu.Lock()
		b.alone++
		b.mu.Unlock()
	}
}

func (in *machineInstance) ExecCPU() (run, wait time.Duration, ok bool) {
	return time.Duration(in.run.Load()), time.Duration(in.wait.Load()), true
}

func (in *machineInstance) Close() error { return nil }

// load runs clients clients against s until stop closes.
func load(t *testing.T, s *Scheduler, clients int, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Infer(context.Background(), rowsRequest(1, 0)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	return &wg
}

// waitActive waits up to d for s.Active() to be want.
func waitActive(s *Scheduler, want int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s.Active() == want {
			return true
		}
	}
	return s.Active() == want
}

// TestConcentratesCPUBoundExecutes: four instances of a CPU-bound model on
// one core under sixteen clients execute one at a time once the
// concentrator has seen their wait for the core, and all four again once
// the model turns to waiting on something else.
func TestConcentratesCPUBoundExecutes(t *testing.T) {
	be := &machineBackend{cores: 1, work: time.Millisecond, metered: true}
	be.cpuBound.Store(true)
	s, err := New(context.Background(), be, linearSpec("m", 0, nil), Config{Name: "m", Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s.Active() != 4 {
		t.Fatalf("Active() = %d before any load, want every instance (4)", s.Active())
	}
	stop := make(chan struct{})
	wg := load(t, s, 16, stop)
	defer func() { close(stop); wg.Wait() }()
	if !waitActive(s, 1, 5*time.Second) {
		t.Fatalf("Active() = %d after 5s of CPU-bound executes on one core, want 1", s.Active())
	}
	be.mu.Lock()
	be.execs, be.alone = 0, 0
	be.mu.Unlock()
	time.Sleep(time.Second)
	be.mu.Lock()
	execs, alone := be.execs, be.alone
	be.mu.Unlock()
	// Probes for a second instance come ever more seldom; without the
	// concentrator none of the executes would run alone.
	if execs == 0 || alone*10 < execs*7 {
		t.Fatalf("%d of %d executes ran alone once concentrated, want at least 70%%", alone, execs)
	}

	be.cpuBound.Store(false)
	if !waitActive(s, 4, 5*time.Second) {
		t.Fatalf("Active() = %d after the model turned to sleeping, want 4", s.Active())
	}
	be.mu.Lock()
	be.most = 0
	be.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	be.mu.Lock()
	most := be.most
	be.mu.Unlock()
	if most != 4 {
		t.Fatalf("at most %d executes ran at once for a sleeping model, want 4 (every instance)", most)
	}
}

// TestSleepingModelKeepsEveryInstance: a model whose executes wait on
// something other than a core runs on all its instances at once, as
// under Triton, whatever the core count.
func TestSleepingModelKeepsEveryInstance(t *testing.T) {
	be := &machineBackend{cores: 1, work: 2 * time.Millisecond, metered: true}
	s, err := New(context.Background(), be, linearSpec("m", 0, nil), Config{Name: "m", Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	stop := make(chan struct{})
	wg := load(t, s, 16, stop)
	time.Sleep(700 * time.Millisecond)
	active := s.Active()
	close(stop)
	wg.Wait()
	be.mu.Lock()
	defer be.mu.Unlock()
	if active != 4 || be.most != 4 {
		t.Fatalf("Active() = %d, at most %d executes at once: want 4 and 4 for a sleeping model", active, be.most)
	}
}

// TestUnmeteredInstancesAreNotConcentrated: instances that cannot report
// their CPU (the torch backend, execute-concurrency=all) all execute, as
// under Triton, however they contend.
func TestUnmeteredInstancesAreNotConcentrated(t *testing.T) {
	be := &machineBackend{cores: 1, work: time.Millisecond}
	be.cpuBound.Store(true)
	s, err := New(context.Background(), be, linearSpec("m", 0, nil), Config{Name: "m", Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s.conc != nil {
		t.Fatal("a concentrator was made for instances without CPUMeter")
	}
	stop := make(chan struct{})
	wg := load(t, s, 16, stop)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if s.Active() != 4 {
		t.Fatalf("Active() = %d, want 4", s.Active())
	}
}

// TestConcentratorDecisions drives decide with windows' figures: shed one
// instance per window of long waits, grow only while work queues and
// waits are short, hold off probes after failed ones for twice as many
// windows each time, and go back to every instance for a model that does
// not keep a core busy.
func TestConcentratorDecisions(t *testing.T) {
	c := newConcentrator(meteredInstances(4), time.Now())
	ms := time.Millisecond
	most := int32(4) // executes at once in the windows below
	step := func(wall, run, wait time.Duration, queued bool) int32 {
		c.wall, c.run, c.wait, c.queued, c.most = wall, run, wait, queued, most
		c.decide()
		return c.active.Load()
	}
	// Executes that waited for a core but never overlapped (one client):
	// no fewer instances would shorten that.
	most = 1
	if got := step(100*ms, 50*ms, 50*ms, false); got != 4 {
		t.Fatalf("long waits of executes that ran alone: active %d, want 4", got)
	}
	// Long waits of two overlapping executes: one, whatever the count.
	most = 2
	if got := step(100*ms, 50*ms, 50*ms, true); got != 1 {
		t.Fatalf("long waits of two executes at once: active %d, want 1", got)
	}
	// An overlap while one was active (a request handed to an idle
	// instance as the count fell) leaves one, never none.
	if got := step(100*ms, 50*ms, 50*ms, true); got != 1 {
		t.Fatalf("long waits of overlapping executes with one active: active %d, want 1", got)
	}
	c.set(4)
	most = 4
	// Busy executes that wait half the time: 4 -> 3 -> 2 -> 1, not below.
	for _, want := range []int32{3, 2, 1, 1} {
		if got := step(100*ms, 50*ms, 50*ms, true); got != want {
			t.Fatalf("after a window of 50%% waits: active %d, want %d", got, want)
		}
	}
	// Short waits without queued work: no probe.
	if got := step(100*ms, 95*ms, 1*ms, false); got != 1 {
		t.Fatalf("short waits, nothing queued: active %d, want 1", got)
	}
	// Short waits with queued work: probe 2; it fails (long waits).
	if got := step(100*ms, 95*ms, 1*ms, true); got != 2 {
		t.Fatalf("short waits with queued work: active %d, want a probe to 2", got)
	}
	if got := step(100*ms, 50*ms, 50*ms, true); got != 1 {
		t.Fatalf("failed probe: active %d, want back to 1", got)
	}
	// The next probes wait 10, then 20, then 40 windows.
	for _, hold := range []int{firstHold, 2 * firstHold, 4 * firstHold} {
		for i := 0; i < hold; i++ {
			if got := step(100*ms, 95*ms, 1*ms, true); got != 1 {
				t.Fatalf("window %d of a hold of %d: active %d, want 1", i+1, hold, got)
			}
		}
		if got := step(100*ms, 95*ms, 1*ms, true); got != 2 {
			t.Fatalf("after a hold of %d windows: active %d, want a probe to 2", hold, got)
		}
		if got := step(100*ms, 50*ms, 50*ms, true); got != 1 {
			t.Fatalf("failed probe after a hold of %d: active %d, want 1", hold, got)
		}
	}
	// A probe that holds resets the backoff: the next probe comes at once.
	for range 8*firstHold + 1 {
		step(100*ms, 95*ms, 1*ms, true)
		if c.active.Load() == 2 {
			break
		}
	}
	if got := step(100*ms, 80*ms, 15*ms, true); got != 2 {
		t.Fatalf("a probe whose waits stay moderate: active %d, want it kept (2)", got)
	}
	if got := step(100*ms, 95*ms, 1*ms, true); got != 3 {
		t.Fatalf("after a probe held: active %d, want the next probe (3) at once", got)
	}
	// Executes that mostly sleep: every instance at once.
	if got := step(100*ms, 5*ms, 0, false); got != 4 {
		t.Fatalf("a sleeping model: active %d, want 4", got)
	}
}

// meteredInstances returns n instances that report their CPU.
func meteredInstances(n int) []backend.Instance {
	be := &machineBackend{cores: 1, work: time.Millisecond, metered: true}
	var insts []backend.Instance
	for range n {
		in, _ := be.NewInstance(context.Background(), nil, 0)
		insts = append(insts, in)
	}
	return insts
}

// TestConcentratorIgnoresReplacedProcesses: a window in which an
// instance's figures went down (its stub restarted) decides nothing, and
// the next window counts from the new figures.
func TestConcentratorIgnoresReplacedProcesses(t *testing.T) {
	insts := meteredInstances(2)
	a := insts[0].(*machineInstance)
	a.run.Store(int64(time.Second))
	now := time.Now()
	c := newConcentrator(insts, now)
	busy := func(run, wait time.Duration) {
		a.run.Add(int64(run))
		a.wait.Add(int64(wait))
		for range concExecs {
			c.observe(time.Millisecond, 2, true, now)
		}
		now = now.Add(concWindow)
		c.observe(10*time.Millisecond, 2, true, now)
	}
	a.run.Store(0) // restarted: a fresh process's figures
	busy(5*time.Millisecond, 5*time.Millisecond)
	if got := c.active.Load(); got != 2 {
		t.Fatalf("a window across a restart decided: active %d, want 2", got)
	}
	busy(5*time.Millisecond, 5*time.Millisecond)
	if got := c.active.Load(); got != 1 {
		t.Fatalf("the window after a restart: active %d, want 1 (half its CPU went waiting)", got)
	}
}
