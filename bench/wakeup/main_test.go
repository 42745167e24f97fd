package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
)

func TestPingPongsComplete(t *testing.T) {
	cpus, err := machine.TwoCPUs()
	if err != nil {
		t.Skip(err)
	}
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name string
		run  pingPong
	}{
		{"pipe-same", func(n int) error { return machine.PipePingPong(n, cpus[0], cpus[0]) }},
		{"pipe-cross", func(n int) error { return machine.PipePingPong(n, cpus[0], cpus[1]) }},
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
