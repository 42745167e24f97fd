package python

import "time"

// pollGap is the longest pause between two tries of a poll that still
// means the poller kept its CPU: a longer one means the operating system
// ran another process there, and polling on would take CPU time from it;
// the spin budget (spin.go) counts only the stubs, this sees everything
// else too (other processes, other servers). A try yields to this
// process's runnable goroutines, and those run for tens of microseconds
// (the scheduler answering a batch and gathering the next, the clients);
// at 30 us, the stub's figure, their runs counted as contention and the
// reader backed off on nearly every wait of a busy model. Another process
// that takes the CPU keeps it for a scheduler time slice, which is longer.
const pollGap = 500 * time.Microsecond

// maxPollSkip bounds the waits in a row that sleep at once after polling
// met contention: the back-off doubles from 1 up to this.
const maxPollSkip = 64

// pollOutcome is how a poll ended.
type pollOutcome int

const (
	pollAtOnce    pollOutcome = iota // the first try succeeded: nothing learnt
	pollGot                          // a later try succeeded, no contention seen
	pollExpired                      // the window passed, no contention seen
	pollContended                    // a pause longer than pollGap: other work wants the CPU
)

// pollFor calls try until it reports done, window passes, or a pause
// between two tries longer than pollGap shows contention; yield runs
// between tries. now is the clock (time.Now outside tests).
func pollFor(window time.Duration, now func() time.Time, yield func(), try func() bool) pollOutcome {
	last := now()
	until := last.Add(window)
	for tries := 0; ; tries++ {
		if try() {
			if tries == 0 {
				return pollAtOnce
			}
			return pollGot
		}
		t := now()
		if t.Sub(last) > pollGap {
			return pollContended
		}
		if !t.Before(until) {
			return pollExpired
		}
		last = t
		yield()
	}
}

// pollBackoff decides, wait by wait, whether a reader polls: after a poll
// that met contention it sleeps at once for the next 1, 2, 4 ... up to
// maxPollSkip waits, so a saturated machine sees a probe now and then
// rather than a poller on every wait; a poll that got its data without
// contention starts over. Used by one reader at a time.
type pollBackoff struct {
	skip int // waits left that do not poll
	last int // the last back-off; the next contended poll doubles it
}

// allow reports whether this wait may poll.
func (b *pollBackoff) allow() bool {
	if b.skip > 0 {
		b.skip--
		return false
	}
	return true
}

// observe records how a poll ended.
func (b *pollBackoff) observe(o pollOutcome) {
	switch o {
	case pollContended:
		b.last = min(max(2*b.last, 1), maxPollSkip)
		b.skip = b.last
	case pollGot:
		b.last = 0
	}
}

// maxPollStretch bounds how far a reader's poll window grows past the
// configured poll (KeyPollMicros) when its peer's answers take longer.
const maxPollStretch = 4

// pollWindow sets a reader's poll window from the waits it has seen. A
// fixed window that is shorter than the peer's usual turnaround (a batch
// of eight through the report's model.py takes longer than a 100 us
// window) makes every wait park, and then each answer pays for waking the
// reader on both sides; a window just past the recent waits avoids that,
// up to maxPollStretch times the configured poll. Used by one reader at a
// time.
type pollWindow struct {
	avg time.Duration // moving average of recent waits, 1/8 weight each
}

// next is the window for the next poll, for a configured poll of base: a
// quarter past the recent waits when that is within maxPollStretch*base,
// else base. A peer that usually takes longer than the longest window
// would only be polled for in vain.
func (w *pollWindow) next(base time.Duration) time.Duration {
	want := w.avg + w.avg/4
	if want > maxPollStretch*base {
		return base
	}
	return max(base, want)
}

// observe records how long a wait took until the data came, polled or
// parked. Waits count at most twice the longest window, so that one very
// long wait (the first batch after an idle minute) cannot hold the
// average up for long.
func (w *pollWindow) observe(d, base time.Duration) {
	d = min(d, 2*maxPollStretch*base)
	w.avg += (d - w.avg) / 8
}
