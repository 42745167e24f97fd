package python

import (
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// spinBudget keeps polling cheap when stubs outnumber cores. Polling (see
// KeyPollMicros) wins tens of microseconds per message only while the
// poller has a core nothing else wants; with more busy stubs than cores,
// every polling waiter takes CPU time from a stub that is computing, and
// the report's four instances on two cores ran ten times slower at
// concurrency 16 than with polling off. So polling is granted only while
// the stubs with a batch in hand plus the waiters already polling leave a
// core free; everyone else sleeps in read at once. One budget covers all
// of a Backend's instances (a server's python models share the machine).
type spinBudget struct {
	cores    atomic.Int32
	busy     atomic.Int32 // stubs holding a batch (sent, reply not yet read)
	spinning atomic.Int32 // server-side reads polling now

	// cpus are the CPUs the server and its stubs may run on, as far as
	// known: the server's own at start, and those of stubs confined to
	// others by a host policy (addCPUs). nil: not known (tests).
	mu   sync.Mutex
	cpus *unix.CPUSet
}

func newSpinBudget(cores int) *spinBudget {
	b := &spinBudget{}
	b.cores.Store(int32(max(cores, 1)))
	return b
}

// defaultSpinBudget counts the cores of runtime.NumCPU() and, where
// known (not nil), the CPUs of the server's affinity.
func defaultSpinBudget(affinity *unix.CPUSet) *spinBudget {
	b := newSpinBudget(runtime.NumCPU())
	if affinity != nil {
		set := *affinity
		b.cpus = &set
	}
	return b
}

// serverAffinity is the CPUs this process may run on, nil where they
// cannot be read.
func serverAffinity() *unix.CPUSet {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	return &set
}

// addCPUs counts the CPUs of a stub's host policy among the cores: a
// server started under taskset on CPU 0 whose stubs run on CPU 1 has two
// cores to poll on, not the one its own affinity shows (runtime.NumCPU),
// and counting one left every stub asleep between batches, each batch
// then paying two wake-ups across CPUs (docs/performance.md, "Nineteenth
// machine").
func (b *spinBudget) addCPUs(cpus []int) {
	if b == nil || len(cpus) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cpus == nil {
		return
	}
	for _, c := range cpus {
		b.cpus.Set(c)
	}
	if n := int32(b.cpus.Count()); n > b.cores.Load() {
		b.cores.Store(n)
	}
}

// acquire reports whether a server-side read may poll; a true result must
// be paired with release.
func (b *spinBudget) acquire() bool {
	if b == nil {
		return true
	}
	for {
		n := b.spinning.Load()
		if n+b.busy.Load() >= b.cores.Load() {
			return false
		}
		if b.spinning.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (b *spinBudget) release() {
	if b != nil {
		b.spinning.Add(-1)
	}
}

// startBatch counts a stub as busy until the returned function is called,
// and reports whether that stub may poll for its next batch once it has
// answered this one: only when it is the only busy stub short of the core
// count, so that polling stubs never crowd out computing ones. ownReader
// says whether the stub's own reader is polling now; it does not count,
// since the stub polls only once that reader has its reply.
func (b *spinBudget) startBatch(ownReader bool) (stubMayPoll bool, done func()) {
	if b == nil {
		return true, func() {}
	}
	n := b.busy.Add(1)
	spinning := b.spinning.Load()
	if ownReader {
		spinning--
	}
	return n+spinning < b.cores.Load(), func() { b.busy.Add(-1) }
}
