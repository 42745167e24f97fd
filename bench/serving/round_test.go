package main

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// TestRunRoundInterleaves: the cases of a round take turns slice by slice,
// in alternating order, and each case's round result counts the calls of
// all its slices, so that a swing of the machine during the round falls
// on both cases of a pair rather than on one.
func TestRunRoundInterleaves(t *testing.T) {
	var mu sync.Mutex
	var turns []string
	mk := func(name string) target {
		return target{name: name, request: func(string, int) error {
			mu.Lock()
			defer mu.Unlock()
			if len(turns) == 0 || turns[len(turns)-1] != name {
				turns = append(turns, name)
			}
			time.Sleep(100 * time.Microsecond)
			return nil
		}}
	}
	run := []target{mk("a"), mk("b"), mk("c")}
	round, perSlice, err := runRound(nil, run, "m", 1, 40*time.Millisecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Slices a b c | c b a | a b c | c b a, a case's consecutive turns
	// read as one.
	want := []string{"a", "b", "c", "b", "a", "b", "c", "b", "a"}
	if !slices.Equal(turns, want) {
		t.Errorf("turns %v, want %v", turns, want)
	}
	for i, tg := range run {
		if len(perSlice[i]) != 4 || round[i].throughput <= 0 {
			t.Errorf("%s: %d slice results (want 4), round %+v", tg.name, len(perSlice[i]), round[i])
		}
	}
}

// TestSampleSums: a round's result is taken over the calls of all its
// slices, not averaged from the slices' own figures.
func TestSampleSums(t *testing.T) {
	var s sample
	s.add(sample{lat: []time.Duration{3, 1, 2}, elapsed: time.Second, cpu: 30})
	s.add(sample{lat: []time.Duration{14, 10, 12, 11, 13}, elapsed: time.Second, cpu: 50})
	r, err := s.result()
	if err != nil {
		t.Fatal(err)
	}
	if r.p50 != 11 || r.throughput != 4 || r.cpu != 10 {
		t.Errorf("got p50 %v, %v req/s, cpu %v per call; want 11ns, 4, 10ns", r.p50, r.throughput, r.cpu)
	}
	if _, err := (sample{}).result(); err == nil {
		t.Error("an empty sample gave a result")
	}
}

// TestSinceLeavesOutTheWarmUp: the scheduler line of a run counts only
// what ran after its mark (the warm-up's small batches once skewed rows
// per execution).
func TestSinceLeavesOutTheWarmUp(t *testing.T) {
	warm := scheduler.Stats{InferenceCount: 10, ExecutionCount: 10,
		Queue: scheduler.Duration{Count: 10, Ns: 10_000_000}, ComputeInfer: scheduler.Duration{Count: 10, Ns: 1_000_000}}
	end := scheduler.Stats{InferenceCount: 410, ExecutionCount: 110,
		Queue: scheduler.Duration{Count: 410, Ns: 10_000_000 + 400*20_000}, ComputeInfer: scheduler.Duration{Count: 110, Ns: 1_000_000 + 100*30_000}}
	d := since(end, warm)
	if d.inferences != 400 || d.executions != 100 || d.queueUs != 20 || d.executeUs != 30 {
		t.Errorf("since the warm-up: %+v, want 400 inferences in 100 executions, queue 20 us, execute 30 us", d)
	}
	if d := since(warm, warm); d.executions != 0 || d.queueUs != 0 {
		t.Errorf("nothing ran: %+v", d)
	}
}
