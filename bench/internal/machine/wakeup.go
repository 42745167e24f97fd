package machine

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
)

// TwoCPUs returns two CPUs this process may run on, the first two of its
// affinity mask.
func TwoCPUs() ([2]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return [2]int{}, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var got []int
	for c := 0; c < 1024 && len(got) < 2; c++ {
		if set.IsSet(c) {
			got = append(got, c)
		}
	}
	if len(got) < 2 {
		return [2]int{}, errors.New("this process may run on only one CPU: a wake-up across cores cannot be measured")
	}
	return [2]int{got[0], got[1]}, nil
}

// pinThread locks the calling goroutine to its OS thread and that thread
// to cpu. The goroutine must exit still locked: the runtime then ends the
// thread, so no pinned thread goes back to run other goroutines.
func pinThread(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin a thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// PipePingPong bounces a byte trips times between a thread on cpuA and
// one on cpuB, each blocking in read(2) until the other writes.
func PipePingPong(trips, cpuA, cpuB int) error {
	var ab, ba [2]int
	if err := unix.Pipe2(ab[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	if err := unix.Pipe2(ba[:], unix.O_CLOEXEC); err != nil {
		_ = unix.Close(ab[0])
		_ = unix.Close(ab[1])
		return fmt.Errorf("pipe: %w", err)
	}
	// Each side closes its write end when it returns, so that a side
	// that fails ends the other's read (EOF) rather than leaving it
	// blocked; the read ends are closed once both have returned.
	echoed := make(chan error, 1)
	go func() {
		defer unix.Close(ba[1])
		echoed <- bounce(cpuB, ab[0], ba[1], trips, false)
	}()
	pinged := make(chan error, 1)
	go func() {
		defer unix.Close(ab[1])
		pinged <- bounce(cpuA, ba[0], ab[1], trips, true)
	}()
	err := errors.Join(<-pinged, <-echoed)
	_ = unix.Close(ab[0])
	_ = unix.Close(ba[0])
	return err
}

// bounce passes a byte back and forth over r and w, trips times, on a
// thread pinned to cpu; the side that starts writes first, the other
// answers what it reads.
func bounce(cpu, r, w, trips int, starts bool) error {
	if err := pinThread(cpu); err != nil {
		return err
	}
	b := []byte{1}
	for i := range 2 * trips {
		if (i%2 == 0) == starts {
			if _, err := unix.Write(w, b); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			continue
		}
		n, err := unix.Read(r, b)
		switch {
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case n != 1:
			// The other side closed its write end: it failed.
			return errors.New("read: end of file, the other side stopped")
		}
	}
	return nil
}

// WakeUpCost is the median wall time of a round trip between two threads
// that sleep in read(2) until the other writes, pinned to one CPU and to
// two. The serving figures of machines of the same size differ mostly by
// Cross; benchmarks print it beside their figures so that a reader can
// tell the kind of machine (bench/wakeup measures it in more detail).
type WakeUpCost struct {
	Same, Cross time.Duration
}

// MeasureWakeUps times trips round trips on one CPU and across two,
// alternately, rounds times each, and returns the medians.
func MeasureWakeUps(trips, rounds int) (WakeUpCost, error) {
	if trips < 1 || rounds < 1 {
		return WakeUpCost{}, fmt.Errorf("wake-up round trips %d and rounds %d must both be at least 1", trips, rounds)
	}
	cpus, err := TwoCPUs()
	if err != nil {
		return WakeUpCost{}, err
	}
	var same, cross []time.Duration
	for range rounds {
		for _, c := range []struct {
			to   *[]time.Duration
			b    int
			name string
		}{{&same, cpus[0], "on one CPU"}, {&cross, cpus[1], "across two CPUs"}} {
			start := time.Now()
			if err := PipePingPong(trips, cpus[0], c.b); err != nil {
				return WakeUpCost{}, fmt.Errorf("wake-ups %s: %w", c.name, err)
			}
			*c.to = append(*c.to, time.Since(start)/time.Duration(trips))
		}
	}
	self := func(d time.Duration) time.Duration { return d }
	return WakeUpCost{Same: sweep.Median(same, self), Cross: sweep.Median(cross, self)}, nil
}

// String is the one line benchmarks print.
func (c WakeUpCost) String() string {
	r := 0.0
	if c.Same > 0 {
		r = float64(c.Cross) / float64(c.Same)
	}
	return fmt.Sprintf("a round trip between two sleeping threads takes %.1f us across cores, %.1f us on one core (%.1fx)",
		float64(c.Cross)/float64(time.Microsecond), float64(c.Same)/float64(time.Microsecond), r)
}

// WakeUps measures the machine's WakeUpCost briefly (2,000 round trips,
// three rounds: well under a second even where a cross-core wake-up is
// slow) and describes it in one line, or says why it could not. A
// benchmark calls it before it starts what it measures, so that nothing
// of its own runs meanwhile.
func WakeUps() string {
	c, err := MeasureWakeUps(2000, 3)
	if err != nil {
		return "wake-ups not measured: " + err.Error()
	}
	return c.String()
}
