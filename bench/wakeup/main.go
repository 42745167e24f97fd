// Command wakeupbench measures what waking a sleeping thread costs on this
// machine, the cost that separates a request handed from one goroutine to
// another from one that stays on its thread. The serving figures of issue 18
// differ between machines of the same size mostly by it: on some VMs a
// thread woken on the other core costs several times what one woken on the
// same core does (the guest's idle vCPU has to be woken by the host).
//
// Cases, each a ping-pong of one-byte messages, all run in every round in
// rotating order:
//
//	pipe-same   two OS threads pinned to the same CPU, over two pipes
//	pipe-cross  the same threads pinned to two different CPUs
//	chan-1p     two goroutines over unbuffered channels, GOMAXPROCS=1
//	chan-2p     the same with GOMAXPROCS=2: each hand-off may wake the
//	            other P's thread, as the server's handler-to-instance
//	            hand-off does
//
// For each case it prints the medians over rounds of wall time, CPU time
// (the whole process's, both sides) and voluntary context switches per round
// trip, and the ratios cross/same and 2p/1p: the price of a wake-up that
// crosses cores, in the same run.
//
// Usage: go run ./bench/wakeup [-trips 20000] [-rounds 5]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
)

func main() {
	trips := flag.Int("trips", 20000, "round trips per case per round")
	rounds := flag.Int("rounds", 5, "rounds; each runs every case once, in rotating order")
	flag.Parse()
	if err := run(*trips, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "wakeupbench:", err)
		os.Exit(1)
	}
}

// sample is one case's cost per round trip in one round.
type sample struct {
	wall, cpu time.Duration
	vcsw      float64 // voluntary context switches
}

type pingPong func(trips int) error

type benchCase struct {
	name string
	run  pingPong
}

func run(trips, rounds int) error {
	if trips < 1 || rounds < 1 {
		return fmt.Errorf("-trips %d and -rounds %d must both be at least 1", trips, rounds)
	}
	cpus, err := machine.TwoCPUs()
	if err != nil {
		return err
	}
	cases := []benchCase{
		{"pipe-same", func(n int) error { return machine.PipePingPong(n, cpus[0], cpus[0]) }},
		{"pipe-cross", func(n int) error { return machine.PipePingPong(n, cpus[0], cpus[1]) }},
		{"chan-1p", func(n int) error { return chanPingPong(n, 1) }},
		{"chan-2p", func(n int) error { return chanPingPong(n, 2) }},
	}
	fmt.Printf("wakeupbench: %d round trips per case, %d rounds, CPUs %d and %d, load %s\n", trips, rounds, cpus[0], cpus[1], machine.LoadAvg())
	// A short pass first, so that no case pays for the first thread
	// creation or page faults.
	for _, c := range cases {
		if _, err := measure(c.run, min(trips, 1000)); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	got := make(map[string][]sample, len(cases))
	for r := range rounds {
		for k := range cases {
			c := cases[(r+k)%len(cases)]
			s, err := measure(c.run, trips)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			got[c.name] = append(got[c.name], s)
		}
	}
	fmt.Printf("%-11s %12s %12s %12s %10s\n", "case", "wall/trip", "CPU/trip", "vcsw/trip", "wall range")
	med := make(map[string]sample, len(cases))
	for _, c := range cases {
		m, lo, hi := summarize(got[c.name])
		med[c.name] = m
		fmt.Printf("%-11s %10.2fus %10.2fus %12.2f %4.1f-%.1fus\n", c.name, us(m.wall), us(m.cpu), m.vcsw, us(lo), us(hi))
	}
	fmt.Printf("pipe cross / same core: wall %.2fx, CPU %.2fx (%+.2f us wall, %+.2f us CPU per round trip)\n",
		ratio(med["pipe-cross"].wall, med["pipe-same"].wall), ratio(med["pipe-cross"].cpu, med["pipe-same"].cpu),
		us(med["pipe-cross"].wall-med["pipe-same"].wall), us(med["pipe-cross"].cpu-med["pipe-same"].cpu))
	fmt.Printf("channels, 2 Ps / 1 P:   wall %.2fx, CPU %.2fx (%+.2f us wall, %+.2f us CPU per round trip)\n",
		ratio(med["chan-2p"].wall, med["chan-1p"].wall), ratio(med["chan-2p"].cpu, med["chan-1p"].cpu),
		us(med["chan-2p"].wall-med["chan-1p"].wall), us(med["chan-2p"].cpu-med["chan-1p"].cpu))
	return nil
}

// measure runs pp for trips round trips and returns its cost per trip.
func measure(pp pingPong, trips int) (sample, error) {
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &before); err != nil {
		return sample{}, fmt.Errorf("getrusage: %w", err)
	}
	start := time.Now()
	if err := pp(trips); err != nil {
		return sample{}, err
	}
	wall := time.Since(start)
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
		return sample{}, fmt.Errorf("getrusage: %w", err)
	}
	cpu := cpuTime(&after) - cpuTime(&before)
	n := time.Duration(trips)
	return sample{wall: wall / n, cpu: cpu / n, vcsw: float64(after.Nvcsw-before.Nvcsw) / float64(trips)}, nil
}

func cpuTime(r *unix.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// summarize returns the per-field medians of ss and the range of wall.
func summarize(ss []sample) (med sample, lo, hi time.Duration) {
	med = sample{
		wall: sweep.Median(ss, func(s sample) time.Duration { return s.wall }),
		cpu:  sweep.Median(ss, func(s sample) time.Duration { return s.cpu }),
		vcsw: sweep.Median(ss, func(s sample) float64 { return s.vcsw }),
	}
	lo, hi = ss[0].wall, ss[0].wall
	for _, s := range ss {
		lo, hi = min(lo, s.wall), max(hi, s.wall)
	}
	return med, lo, hi
}

// chanPingPong bounces a value trips times between two goroutines over
// unbuffered channels with procs Ps, restoring GOMAXPROCS afterwards.
func chanPingPong(trips, procs int) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	a, b := make(chan int), make(chan int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for v := range a {
			b <- v
		}
	}()
	for i := range trips {
		a <- i
		if v := <-b; v != i {
			return fmt.Errorf("round trip %d answered %d", i, v)
		}
	}
	close(a)
	<-done
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
