package scheduler

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// CPUMeter is implemented by instances whose executes run on one thread
// of a process of their own (a python stub). ExecCPU returns the CPU time
// that thread has used and the time it has spent runnable but waiting for
// a core, both since the process started; ok is false when they cannot be
// read (no process yet, a kernel without schedstats, or the backend
// configured not to be concentrated). The figures of one process only ever
// grow: a smaller one means the process was replaced.
type CPUMeter interface {
	ExecCPU() (run, wait time.Duration, ok bool)
}

// A concentrator decides how many of a model's instances execute at once
// when the instances report their CPU (CPUMeter). Triton runs every
// instance of a group concurrently, which is what a model that waits on
// something other than a core (a sleep, a remote call, a disk) wants. A
// model whose executes keep a core busy gains nothing from more concurrent
// executions than there are cores free for them: on the report's four
// python instances on two cores, the stubs took turns on the cores, each
// batch waited behind the others', and the p50 at 16 clients was twice
// that of one instance (docs/performance.md). The concentrator watches the
// executing threads' run-queue wait: while it is a large share of what
// they ask of the CPU and executes overlapped, one instance fewer
// executes; while it is small and work queues, one more is tried. Workers
// beyond the count park, off the idle stack, so the work falls to the
// ones that just ran (warm stubs) and their batches grow instead of
// splitting.
//
// A probe that fails (the wait grows again) holds off the next one for
// firstHold windows, doubled per failure up to maxHold, so a machine where
// one more never helps pays for a window every few seconds, not every
// other window.
type concentrator struct {
	n      int32
	active atomic.Int32 // instances allowed to execute at once, 1..n
	awake  atomic.Int32 // workers not parked
	unpark chan struct{}
	// executing counts the instances inside Execute now.
	executing atomic.Int32

	// meters are the instances' CPU figures, read when a window starts
	// and ends (last), never around each execute: a read of schedstat is
	// a system call into procfs, several microseconds on a virtual
	// machine (docs/performance.md, "The concentrator").
	meters []CPUMeter
	last   []cpuReading

	mu     sync.Mutex
	start  time.Time // of the window
	execs  int
	wall   time.Duration // executes' wall time in the window
	run    time.Duration // the executing threads' CPU time in it, polls between executes included
	wait   time.Duration // their run-queue wait in it
	queued bool          // work waited in the queue as an execute ended
	most   int32         // the most executes at once the window saw
	// hold is the windows to let pass before the next probe, backoff the
	// hold after the next failed one; probing is set while the last
	// change was an increase that no window has confirmed yet.
	hold, backoff int
	probing       bool
}

// The window and thresholds of a concentrator's decisions.
const (
	// concWindow is the least time a decision looks at, and concExecs
	// the least executes: fewer say little about the load.
	concWindow = 100 * time.Millisecond
	concExecs  = 8
	// An execute whose threads asked for a core less than concBound of
	// its wall time waits on something else: every instance runs.
	concBound = 0.5
	// The share of the wanted CPU time spent waiting for a core above
	// which one instance fewer executes, and below which one more is
	// tried while work queues.
	concShed = 0.25
	concGrow = 0.10
	// firstHold is the windows between a failed probe and the next one,
	// doubled per failure up to maxHold: a probe costs its window (at 4
	// windows apart, a second stub ran in about a tenth of the windows of
	// a 2 s measurement).
	firstHold = 10
	maxHold   = 100
)

// cpuReading is one read of an instance's CPUMeter.
type cpuReading struct {
	run, wait time.Duration
	ok        bool
}

// newConcentrator returns the concentrator of insts, or nil unless every
// one reports its CPU and some can be read now: instances that only ever
// answer ok false (execute-concurrency=all) cost no park checks, lock or
// reads on the execute path.
func newConcentrator(insts []backend.Instance, now time.Time) *concentrator {
	n := len(insts)
	c := &concentrator{n: int32(n), unpark: make(chan struct{}, n), meters: make([]CPUMeter, n), last: make([]cpuReading, n)}
	for i, in := range insts {
		m, ok := in.(CPUMeter)
		if !ok {
			return nil
		}
		c.meters[i] = m
	}
	c.active.Store(int32(n))
	c.awake.Store(int32(n))
	c.read(now)
	for _, r := range c.last {
		if r.ok {
			return c
		}
	}
	return nil
}

// read ends the window: it adds to it the CPU figures' growth since the
// last read and starts the next one. It reports false when some instance
// could not be read or its figures went down (its process was replaced):
// the window then says nothing about the instances.
func (c *concentrator) read(now time.Time) bool {
	whole := true
	var run, wait time.Duration
	for i, m := range c.meters {
		var r cpuReading
		r.run, r.wait, r.ok = m.ExecCPU()
		l := c.last[i]
		if !r.ok || !l.ok || r.run < l.run || r.wait < l.wait {
			whole = false
		} else {
			run += r.run - l.run
			wait += r.wait - l.wait
		}
		c.last[i] = r
	}
	c.run, c.wait = run, wait
	c.start = now
	return whole
}

// Active is how many instances may execute at once now: the instance
// count unless a concentrator lowered it.
func (s *Scheduler) Active() int {
	if s.conc == nil {
		return len(s.instances)
	}
	return int(s.conc.active.Load())
}

// park keeps a worker from waiting for work while more workers are awake
// than instances may execute. It returns true at once when the worker
// may go on, and otherwise parks it until the count grows (true), the
// scheduler stops (false, nil), or a job handed to it before it parked
// arrives (true, the job, which it runs before looking again).
func (c *concentrator) park(mine chan *job, stop chan struct{}) (bool, *job) {
	for {
		a := c.awake.Load()
		if a <= c.active.Load() {
			return true, nil
		}
		if c.awake.CompareAndSwap(a, a-1) {
			break
		}
	}
	for {
		select {
		case j := <-mine:
			c.awake.Add(1)
			return true, j
		case <-c.unpark:
		case <-stop:
			return false, nil
		}
		for {
			a := c.awake.Load()
			if a >= c.active.Load() {
				break // another worker took the place; park again
			}
			if c.awake.CompareAndSwap(a, a+1) {
				return true, nil
			}
		}
	}
}

// observe adds one execute (its wall time, how many executes ran as it
// started, whether work waited as it ended) and decides at the end of a
// window.
func (c *concentrator) observe(wall time.Duration, along int32, queued bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.execs++
	c.wall += wall
	c.queued = c.queued || queued
	c.most = max(c.most, along)
	if c.execs < concExecs || now.Sub(c.start) < concWindow {
		return
	}
	if c.read(now) {
		c.decide()
	}
	c.execs, c.wall, c.queued, c.most = 0, 0, false, 0
}

// decide sets the active count from the window's figures. Callers hold mu.
func (c *concentrator) decide() {
	k := c.active.Load()
	wanted := c.run + c.wait
	if c.wall <= 0 || float64(wanted) < concBound*float64(c.wall) {
		c.set(c.n)
		c.hold, c.backoff, c.probing = 0, 0, false
		return
	}
	waiting := float64(c.wait) / float64(wanted)
	switch {
	case waiting > concShed && c.most > 1 && k > 1:
		// Executes that ran alone (one client at a time) waited for
		// something other than each other, a wake-up on a busy or
		// virtual CPU: fewer instances would not shorten that, and
		// parking the one that just ran would only hand the next
		// request to a colder one. Past the most that ran at once,
		// shedding one more would change nothing.
		c.set(min(k, c.most) - 1) // at least 1 (set)
		if c.probing {
			c.backoff = min(max(2*c.backoff, firstHold), maxHold)
		}
		c.hold, c.probing = c.backoff, false
	case waiting < concGrow && k < c.n && c.queued:
		if c.hold > 0 {
			c.hold--
			return
		}
		c.set(k + 1)
		c.probing = true
	default:
		if c.probing {
			c.probing, c.backoff = false, 0 // the probe held
		}
		if c.hold > 0 {
			c.hold--
		}
	}
}

// set changes the active count, waking as many parked workers as it grew.
// The count stays within 1..n: with none active every worker would park
// and the queue would never drain.
func (c *concentrator) set(k int32) {
	k = min(max(k, 1), c.n)
	old := c.active.Swap(k)
	for i := old; i < k; i++ {
		select {
		case c.unpark <- struct{}{}:
		default: // as many wake-ups pending as parked workers
		}
	}
}
