// Package heapfloor keeps Go's collector from starting a cycle while the
// heap is still small.
//
// A server's live heap is a few MiB (its tensors are libtorch's, in C
// memory), so under Go's default GOGC=100 the heap goal sits at the 4 MiB
// minimum and a busy server runs a collection every few dozen
// milliseconds: about 26 a second under 64 connections at 24,000 requests
// a second, 5-7% of its CPU in marking and assists, each cycle paying
// again for the stacks of every connection's goroutine. A Floor moves the
// goal up to its size while the live heap is small and leaves Go's
// default alone once the live heap is half of it or more, so memory grows
// by at most the floor over what GOGC=100 would use. GOMEMLIMIT, when set,
// still bounds the heap below the floor.
package heapfloor

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultBytes is the floor tritonserver and its benchmarks set. Goals of
// 16, 32, 64 and 128 MiB all served more requests per CPU second than
// the default under h2load at 64 connections, with no order among them
// beyond the noise; at 32 MiB the server collects about twice a second
// there instead of about 26 times (docs/performance.md, "A heap floor").
const DefaultBytes = 32 << 20

// heapMinimum is Go's smallest heap goal at GOGC=100 (the runtime's
// defaultHeapMinimum), which it scales with the GC percent: a percent
// above floor/heapMinimum*100 would raise the goal past the floor.
const heapMinimum = 4 << 20

// Floor re-tunes the GC percent after every collection; Stop ends it.
type Floor struct {
	bytes   uint64
	mu      sync.Mutex
	stopped bool
}

// sentinel is garbage from birth: its cleanup runs after the cycle that
// collects it, which is how the floor hears of each cycle. The pointer
// field keeps it out of the tiny allocator, whose blocks outlive their
// objects.
type sentinel struct{ _ *byte }

// Start sets a floor of bytes and returns it, or returns nil without
// changing anything when bytes is 0 or the environment sets GOGC (the
// operator's own setting wins). How says how the collector now paces,
// for a log or a benchmark's header.
func Start(bytes uint64) (f *Floor, how string) {
	if bytes == 0 {
		return nil, "floor 0: Go's default collector pacing"
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		return nil, "GOGC=" + v + " is set: the collector paces by it"
	}
	f = &Floor{bytes: bytes}
	debug.SetGCPercent(f.percent())
	f.arm()
	return f, fmt.Sprintf("Go heap floor %d MiB", bytes>>20)
}

// Stop ends the tuning and puts back GOGC=100, the pacing of a process
// without GOGC in its environment (Start tunes only such a process). Not
// the percent found at Start: that may be another floor's, when two
// overlap (the server's tests run several servers in one process).
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		debug.SetGCPercent(100)
	}
}

func (f *Floor) arm() {
	runtime.AddCleanup(&sentinel{}, (*Floor).collected, f)
}

// collected runs after each cycle (on the runtime's cleanup goroutine).
func (f *Floor) collected() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	debug.SetGCPercent(f.percent())
	f.arm()
}

// percent is the GC percent whose goal is the floor for the live heap the
// last cycle marked: Go's goal is live + (live + stacks + globals) x
// percent/100, and never under heapMinimum x percent/100; 100 (Go's
// default) once that goal is above the floor anyway.
func (f *Floor) percent() int {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	live, base := v[0], v[0]+v[1]+v[2]
	if live >= f.bytes || base == 0 {
		return 100
	}
	p := min((f.bytes-live)*100/base, f.bytes*100/heapMinimum)
	return int(max(p, 100))
}
