package machine

import (
	"testing"
	"time"
)

func TestSpeedsCountSlowSamplesAgainstTheFastest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var fast, mixed []speedSample
	for i := range 40 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		fast = append(fast, speedSample{at, 300 * time.Microsecond})
		took := 300 * time.Microsecond
		if i >= 20 {
			took = 540 * time.Microsecond // a phase at 1.8x
		}
		mixed = append(mixed, speedSample{at, took})
	}
	got := speeds([]int{0, 1}, [][]speedSample{fast, mixed}, t0, t0.Add(4*time.Second))
	if got[0].Slow != 0 || got[1].Slow != 0.5 || got[1].Samples != 40 {
		t.Fatalf("whole run: %+v", got)
	}
	// Only the second half: cpu1 slow throughout, cpu0 never.
	got = speeds([]int{0, 1}, [][]speedSample{fast, mixed}, t0.Add(2*time.Second), t0.Add(4*time.Second))
	if got[0].Slow != 0 || got[1].Slow != 1 || got[1].Median != 540*time.Microsecond || got[0].Samples != 20 {
		t.Fatalf("second half: %+v", got)
	}
	if s := FormatSpeeds(got); s != "cpu0 slow 0%, cpu1 slow 100%" {
		t.Errorf("formatted %q", s)
	}
	if got := speeds([]int{0}, [][]speedSample{nil}, t0, t0); got != nil {
		t.Errorf("no samples: %+v", got)
	}
}

func TestSpeedProbeSamplesEveryCPU(t *testing.T) {
	p, err := StartSpeedProbe(5 * time.Millisecond)
	if err != nil {
		t.Skipf("cannot pin threads here: %v", err)
	}
	from := time.Now()
	time.Sleep(120 * time.Millisecond)
	p.Stop()
	for _, s := range p.Between(from, time.Now()) {
		t.Logf("cpu%d: %d samples, median %s", s.CPU, s.Samples, s.Median)
		if s.Samples < 3 || s.Median <= 0 {
			t.Errorf("cpu%d: %d samples, median %s", s.CPU, s.Samples, s.Median)
		}
	}
	p.Stop() // a second Stop is harmless
}
