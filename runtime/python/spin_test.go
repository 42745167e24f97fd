package python

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestSpinBudget(t *testing.T) {
	b := newSpinBudget(2)
	// One stub computing: its stub may poll afterwards, and one server-side
	// wait may poll (two cores: the stub's and the poller's).
	poll1, done1 := b.startBatch(false)
	if !poll1 {
		t.Fatal("the only busy stub was refused polling")
	}
	if !b.acquire() {
		t.Fatal("server-side poll refused with one stub busy on two cores")
	}
	// A second busy stub finds no free core: neither it nor a second
	// server-side wait polls.
	poll2, done2 := b.startBatch(false)
	if poll2 {
		t.Fatal("second busy stub on two cores allowed to poll")
	}
	if b.acquire() {
		t.Fatal("server-side poll granted with every core taken")
	}
	b.release()
	done2()
	done1()
	if b.busy.Load() != 0 || b.spinning.Load() != 0 {
		t.Fatalf("budget not returned: busy %d spinning %d", b.busy.Load(), b.spinning.Load())
	}
	// Four stubs on two cores (the report's tuned configuration): none polls.
	var dones []func()
	granted := 0
	for i := 0; i < 4; i++ {
		ok, done := b.startBatch(false)
		if ok {
			granted++
		}
		dones = append(dones, done)
	}
	if granted != 1 {
		t.Fatalf("%d of 4 simultaneous stubs allowed to poll on two cores, want 1 (the first)", granted)
	}
	if b.acquire() {
		t.Fatal("server-side poll granted with four stubs busy")
	}
	for _, d := range dones {
		d()
	}
	// A nil budget (tests, single instances built by hand) never limits.
	var none *spinBudget
	if ok, done := none.startBatch(false); !ok || !none.acquire() {
		t.Fatal("nil budget refused polling")
	} else {
		done()
		none.release()
	}
}

// A stub whose own reader is polling (waiting for the next batch's reply
// right after this one's) may still poll for its next batch: the two
// never wait at the same time. Another instance's polling reader counts.
func TestSpinBudgetLeavesOutTheStubsOwnReader(t *testing.T) {
	b := newSpinBudget(2)
	if !b.acquire() {
		t.Fatal("a server-side poll refused on an idle budget")
	}
	if ok, done := b.startBatch(true); !ok {
		t.Fatal("the only busy stub was refused polling because of its own reader")
	} else {
		done()
	}
	if ok, done := b.startBatch(false); ok {
		t.Fatal("a stub was allowed to poll beside another instance's polling reader on two cores")
	} else {
		done()
	}
	b.release()
}

// TestSpinBudgetCountsStubCPUs: a server that may run on CPU 0 only, with
// a stub confined to CPU 1 by its host policy, polls as on two cores; CPUs
// it already counts add nothing.
func TestSpinBudgetCountsStubCPUs(t *testing.T) {
	b := newSpinBudget(1)
	var own unix.CPUSet
	own.Set(0)
	b.cpus = &own
	if poll, done := b.startBatch(false); poll {
		t.Fatal("a busy stub may poll on one core")
	} else {
		done()
	}
	b.addCPUs([]int{0})
	if got := b.cores.Load(); got != 1 {
		t.Fatalf("the server's own CPU counted again: %d cores", got)
	}
	b.addCPUs([]int{1})
	if got := b.cores.Load(); got != 2 {
		t.Fatalf("a stub on CPU 1 beside a server on CPU 0: %d cores, want 2", got)
	}
	poll, done := b.startBatch(false)
	defer done()
	if !poll {
		t.Fatal("the only busy stub was refused polling on two cores")
	}
	if !b.acquire() {
		t.Fatal("server-side poll refused with one stub busy on two cores")
	}
	b.release()
}
