package python

import (
	"runtime"
	"sync/atomic"
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
	cores    int32
	busy     atomic.Int32 // stubs holding a batch (sent, reply not yet read)
	spinning atomic.Int32 // server-side reads polling now
}

func newSpinBudget(cores int) *spinBudget {
	return &spinBudget{cores: int32(max(cores, 1))}
}

func defaultSpinBudget() *spinBudget { return newSpinBudget(runtime.NumCPU()) }

// acquire reports whether a server-side read may poll; a true result must
// be paired with release.
func (b *spinBudget) acquire() bool {
	if b == nil {
		return true
	}
	for {
		n := b.spinning.Load()
		if n+b.busy.Load() >= b.cores {
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
	return n+spinning < b.cores, func() { b.busy.Add(-1) }
}
