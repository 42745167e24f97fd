package python

import (
	"testing"
	"time"
)

// fakeClock advances by step at each reading, and by jump at the reading
// numbered jumpAt (the OS running something else between two tries).
type fakeClock struct {
	t          time.Time
	step, jump time.Duration
	reads      int
	jumpAt     int
}

func (c *fakeClock) now() time.Time {
	c.reads++
	c.t = c.t.Add(c.step)
	if c.reads == c.jumpAt {
		c.t = c.t.Add(c.jump)
	}
	return c.t
}

func TestPollForStopsWhenTheCPUIsTaken(t *testing.T) {
	tries := 0
	never := func() bool { tries++; return false }
	// An idle CPU: tries a microsecond apart run until the window ends.
	idle := &fakeClock{step: time.Microsecond}
	if o := pollFor(100*time.Microsecond, idle.now, func() {}, never); o != pollExpired {
		t.Fatalf("idle poll ended %d, want pollExpired", o)
	}
	if tries < 90 {
		t.Fatalf("idle poll gave up after %d tries of a 100 us window", tries)
	}
	// A yield that came back 1 ms later (another process ran): stop at
	// once, long before the window ends.
	tries = 0
	busy := &fakeClock{step: time.Microsecond, jump: time.Millisecond, jumpAt: 3}
	if o := pollFor(100*time.Microsecond, busy.now, func() {}, never); o != pollContended {
		t.Fatalf("poll on a taken CPU ended %d, want pollContended", o)
	}
	if tries != 2 {
		t.Fatalf("poll on a taken CPU made %d tries, want 2 (stop at the first long pause)", tries)
	}
	// A yield that came back 100 us later: this process's goroutines ran
	// (the scheduler answering a batch). Not contention: polling goes on.
	tries = 0
	ours := &fakeClock{step: time.Microsecond, jump: 100 * time.Microsecond, jumpAt: 3}
	if o := pollFor(time.Millisecond, ours.now, func() {}, never); o != pollExpired {
		t.Fatalf("poll after a 100 us yield ended %d, want pollExpired", o)
	}
	if tries < 500 {
		t.Fatalf("poll gave up after %d tries following a 100 us yield", tries)
	}
	// Data at the first try, and after some polling.
	if o := pollFor(time.Millisecond, idle.now, func() {}, func() bool { return true }); o != pollAtOnce {
		t.Fatalf("data at once: %d", o)
	}
	n := 0
	if o := pollFor(time.Millisecond, idle.now, func() {}, func() bool { n++; return n == 5 }); o != pollGot {
		t.Fatalf("data at the fifth try: %d", o)
	}
}

func TestPollBackoffSkipsWaitsAfterContention(t *testing.T) {
	var b pollBackoff
	if !b.allow() {
		t.Fatal("a fresh reader may not poll")
	}
	// Each contended poll doubles the run of waits that sleep at once.
	for _, want := range []int{1, 2, 4, 8, 16, 32, 64, 64} {
		b.observe(pollContended)
		skipped := 0
		for !b.allow() {
			skipped++
		}
		if skipped != want {
			t.Fatalf("skipped %d waits after a contended poll, want %d", skipped, want)
		}
	}
	// Data at once or an idle window teach nothing; a poll that got its
	// data without contention starts over.
	b.observe(pollAtOnce)
	b.observe(pollExpired)
	if b.last != maxPollSkip {
		t.Fatalf("back-off %d changed without a poll that got data", b.last)
	}
	b.observe(pollGot)
	b.observe(pollContended)
	if b.allow() || !b.allow() {
		t.Fatal("after a successful poll, contention did not start over at one skipped wait")
	}
}

func TestPollWindowFollowsThePeer(t *testing.T) {
	const base = 100 * time.Microsecond
	var w pollWindow
	if got := w.next(base); got != base {
		t.Fatalf("a fresh reader polls %v, want the configured %v", got, base)
	}
	// Answers that take 200 us: the window grows to a quarter past them.
	for i := 0; i < 100; i++ {
		w.observe(200*time.Microsecond, base)
	}
	if got := w.next(base); got < 240*time.Microsecond || got > 260*time.Microsecond {
		t.Fatalf("window %v after 200 us waits, want about 250 us", got)
	}
	// Fast answers: never below the configured poll.
	for i := 0; i < 100; i++ {
		w.observe(5*time.Microsecond, base)
	}
	if got := w.next(base); got != base {
		t.Fatalf("window %v after 5 us waits, want %v", got, base)
	}
	// A peer slower than the longest window: back to the configured poll,
	// not the longest window spent in vain.
	for i := 0; i < 100; i++ {
		w.observe(50*time.Millisecond, base)
	}
	if got := w.next(base); got != base {
		t.Fatalf("window %v after 50 ms waits, want %v", got, base)
	}
	// One slow wait among fast ones moves the window only a little.
	var v pollWindow
	for i := 0; i < 100; i++ {
		v.observe(100*time.Microsecond, base)
	}
	v.observe(time.Minute, base)
	if got := v.next(base); got > maxPollStretch*base {
		t.Fatalf("window %v after one long wait", got)
	}
}
