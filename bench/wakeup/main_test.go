package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPinThreadLeavesOneCPU(t *testing.T) {
	cpus, err := twoCPUs()
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

func TestPingPongsComplete(t *testing.T) {
	cpus, err := twoCPUs()
	if err != nil {
		t.Skip(err)
	}
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name string
		run  pingPong
	}{
		{"pipe-same", func(n int) error { return pipePingPong(n, cpus[0], cpus[0]) }},
		{"pipe-cross", func(n int) error { return pipePingPong(n, cpus[0], cpus[1]) }},
		{"chan-2p", func(n int) error { return chanPingPong(n, 2) }},
	} {
		s, err := measure(c.run, 200)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.wall <= 0 || s.cpu < 0 {
			t.Fatalf("%s: wall %v, CPU %v per trip", c.name, s.wall, s.cpu)
		}
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("GOMAXPROCS left at %d, was %d", got, procs)
	}
}

// A side that cannot start (a CPU outside the mask) must end the ping-pong
// with its error, not leave the other side blocked in read(2).
func TestPipePingPongFailingSideEndsTheOther(t *testing.T) {
	cpus, err := twoCPUs()
	if err != nil {
		t.Skip(err)
	}
	for _, pair := range [][2]int{{cpus[0], 1023}, {1023, cpus[0]}} {
		done := make(chan error, 1)
		go func() { done <- pipePingPong(100, pair[0], pair[1]) }()
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

func TestSummarizeMedianAndRange(t *testing.T) {
	ss := []sample{{wall: 5, cpu: 1, vcsw: 2}, {wall: 1, cpu: 3, vcsw: 1}, {wall: 9, cpu: 2, vcsw: 3}}
	m, lo, hi := summarize(ss)
	if m.wall != 5 || m.cpu != 2 || m.vcsw != 2 || lo != 1 || hi != 9 {
		t.Fatalf("summarize = %+v, %v-%v; want medians 5/2/2, range 1-9", m, lo, hi)
	}
}

func TestRunRejectsBadCounts(t *testing.T) {
	if err := run(0, 1); err == nil || !strings.Contains(err.Error(), "-trips 0") {
		t.Fatalf("run(0, 1) = %v", err)
	}
}
