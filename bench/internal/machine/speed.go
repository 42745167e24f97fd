package machine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SpeedProbe times a fixed piece of work on each CPU at an interval while
// a benchmark runs. The guests these benchmarks run on have vCPUs that
// slow down by about 1.8x for seconds at a time, one vCPU independently of
// the other, whatever the guest itself is doing (a host core shared with
// another guest, most likely); a row measured while the vCPU its stub ran
// on was in such a phase is the slow one of a bimodal set
// (docs/performance.md, "Twenty-third machine"). The probe says, per
// measured stretch, how much of it each vCPU spent slow, so that a reader
// can tell the machine's swing from the code's.
type SpeedProbe struct {
	cpus  []int
	every time.Duration
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	samples [][]speedSample // per CPU, in time order
}

type speedSample struct {
	at   time.Time
	took time.Duration
}

// probeWork builds and reads a map of a few thousand pseudo-random keys:
// about 0.3 ms on the machines recorded, long enough to time with the
// monotonic clock and short enough that a sample rarely loses its CPU
// midway. Hashing, allocation and unpredictable branches over a few
// hundred KiB slow down in a vCPU's slow phase about as much as the
// python stub's interpreter does (1.6x against 2x, sampled side by side
// on the twenty-third machine); a tight ALU loop or a sort showed a
// fraction of it (1.1-1.3x). The keys come from a fixed xorshift sequence
// so that every sample does the same work.
func probeWork() int {
	const n = 8192
	m := make(map[uint64]int, n)
	x := uint64(88172645463325252)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	for i := range n {
		m[next()] = i
	}
	x = 88172645463325252
	sum := 0
	for range 2 * n {
		sum += m[next()]
	}
	return sum
}

// StartSpeedProbe starts one sampling thread per CPU of this process's
// affinity, each pinned to its CPU, timing probeWork every interval.
// Each costs its CPU about 0.3 ms a sample: 0.3% at 100 ms.
func StartSpeedProbe(every time.Duration) (*SpeedProbe, error) {
	if every <= 0 {
		return nil, errors.New("speed probe: the interval must be positive")
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	p := &SpeedProbe{every: every, stop: make(chan struct{})}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			p.cpus = append(p.cpus, c)
		}
	}
	p.samples = make([][]speedSample, len(p.cpus))
	started := make(chan error, len(p.cpus))
	for i, cpu := range p.cpus {
		p.wg.Add(1)
		go p.sample(i, cpu, started)
	}
	var errs []error
	for range p.cpus {
		errs = append(errs, <-started)
	}
	if err := errors.Join(errs...); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *SpeedProbe) sample(i, cpu int, started chan<- error) {
	defer p.wg.Done()
	// Exits still locked, so the pinned thread ends with it.
	if err := pinThread(cpu); err != nil {
		started <- err
		return
	}
	started <- nil
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	sink := 0
	for {
		select {
		case <-p.stop:
			_ = sink
			return
		case <-tick.C:
		}
		start := time.Now()
		sink += probeWork()
		took := time.Since(start)
		p.mu.Lock()
		p.samples[i] = append(p.samples[i], speedSample{start, took})
		p.mu.Unlock()
	}
}

// Stop ends the sampling threads.
func (p *SpeedProbe) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// CPUSpeed is one CPU over a stretch of time: the median time of the
// probe's work, and the share of samples that took more than 1.5x the
// fastest time any CPU showed (the machine's own speed, so far).
type CPUSpeed struct {
	CPU     int
	Samples int
	Median  time.Duration
	Slow    float64
}

// Between reports each CPU's samples taken from from to to.
func (p *SpeedProbe) Between(from, to time.Time) []CPUSpeed {
	p.mu.Lock()
	defer p.mu.Unlock()
	return speeds(p.cpus, p.samples, from, to)
}

func speeds(cpus []int, samples [][]speedSample, from, to time.Time) []CPUSpeed {
	// The baseline is a low percentile of every sample, not the minimum,
	// so that one lucky sample does not make the whole run look slow.
	var all []time.Duration
	for _, ss := range samples {
		for _, s := range ss {
			all = append(all, s.took)
		}
	}
	if len(all) == 0 {
		return nil
	}
	slices.Sort(all)
	base := all[len(all)/20]
	out := make([]CPUSpeed, len(cpus))
	for i, cpu := range cpus {
		var in []time.Duration
		slow := 0
		for _, s := range samples[i] {
			if s.at.Before(from) || s.at.After(to) {
				continue
			}
			in = append(in, s.took)
			if s.took*2 > base*3 {
				slow++
			}
		}
		out[i] = CPUSpeed{CPU: cpu, Samples: len(in)}
		if len(in) > 0 {
			slices.Sort(in)
			out[i].Median = in[len(in)/2]
			out[i].Slow = float64(slow) / float64(len(in))
		}
	}
	return out
}

// FormatSpeeds is speeds as "cpu0 slow 5%, cpu1 slow 55%".
func FormatSpeeds(sp []CPUSpeed) string {
	if len(sp) == 0 {
		return "no samples"
	}
	parts := make([]string, len(sp))
	for i, s := range sp {
		if s.Samples == 0 {
			parts[i] = fmt.Sprintf("cpu%d no samples", s.CPU)
			continue
		}
		parts[i] = fmt.Sprintf("cpu%d slow %.0f%%", s.CPU, 100*s.Slow)
	}
	return strings.Join(parts, ", ")
}
