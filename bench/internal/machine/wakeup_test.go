package machine

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPinThreadLeavesOneCPU(t *testing.T) {
	cpus, err := TwoCPUs()
	if err != nil {
		t.Skip(err)
	}
	got := make(chan unix.CPUSet, 1)
	errs := make(chan error, 1)
	go func() {
		// Exits locked: the pinned thread ends with it.
		if err := pinThread(cpus[1]); err != nil {
			errs <- err
			return
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			errs <- err
			return
		}
		got <- set
	}()
	select {
	case err := <-errs:
		t.Fatal(err)
	case set := <-got:
		if set.Count() != 1 || !set.IsSet(cpus[1]) {
			t.Fatalf("pinned thread's affinity has %d CPUs (CPU %d set: %v), want only CPU %d", set.Count(), cpus[1], set.IsSet(cpus[1]), cpus[1])
		}
	}
	// The test's own thread keeps the whole mask.
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() < 2 {
		t.Fatalf("the caller's affinity shrank to %d CPUs", set.Count())
	}
}

// A side that cannot start (a CPU outside the mask) must end the ping-pong
// with its error, not leave the other side blocked in read(2).
func TestPipePingPongFailingSideEndsTheOther(t *testing.T) {
	cpus, err := TwoCPUs()
	if err != nil {
		t.Skip(err)
	}
	for _, pair := range [][2]int{{cpus[0], 1023}, {1023, cpus[0]}} {
		done := make(chan error, 1)
		go func() { done <- PipePingPong(100, pair[0], pair[1]) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "CPU 1023") {
				t.Fatalf("pins %v: err = %v, want one naming CPU 1023", pair, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pins %v: the ping-pong hung after one side failed", pair)
		}
	}
}

func TestMeasureWakeUps(t *testing.T) {
	if _, err := TwoCPUs(); err != nil {
		t.Skip(err)
	}
	c, err := MeasureWakeUps(200, 3)
	if err != nil {
		t.Fatal(err)
	}
	if c.Same <= 0 || c.Cross <= 0 {
		t.Fatalf("MeasureWakeUps = %+v, want both round trips positive", c)
	}
	if s := c.String(); !strings.Contains(s, "across cores") || !strings.Contains(s, "on one core") {
		t.Fatalf("String() = %q", s)
	}
	if _, err := MeasureWakeUps(0, 3); err == nil || !strings.Contains(err.Error(), "round trips 0") {
		t.Fatalf("MeasureWakeUps(0, 3) = %v, want an error naming the count", err)
	}
}
