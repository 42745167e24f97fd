package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func stateSpec(name string, maxBatch int) *backend.ModelSpec {
	spec := accSpec(name, maxBatch)
	spec.Parameters = map[string]string{"fake_mode": "statesum", "fake_delay_us": "200"}
	return spec
}

func sumState(initial int32) []State {
	return []State{{Input: "STATE_IN", Output: "STATE_OUT", DataType: backend.Int32, Dims: []int64{-1}, InitialShape: []int64{1}, Initial: i32(initial)}}
}

// The statesum model keeps nothing: the running sums are right only if the
// scheduler carries each sequence's own state, under either strategy, with
// slots shared through the backlog.
func TestSequenceImplicitStateCarriedPerSequence(t *testing.T) {
	for _, strat := range []Strategy{Direct, Oldest} {
		t.Run(fmt.Sprint(strat), func(t *testing.T) {
			s, err := New(context.Background(), fake.New(), stateSpec("st", 2), Config{
				Name: "st", MaxBatchSize: 2, Instances: 2,
				Sequence: &Sequence{Strategy: strat, MaxIdle: time.Minute, MaxQueueDelay: time.Millisecond, Controls: int32Controls, States: sumState(0)},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			runSequences(t, s, 2, 9, 5, strat == Oldest)
		})
	}
}

func TestSequenceImplicitStateInitialAndHidden(t *testing.T) {
	s, err := New(context.Background(), fake.New(), stateSpec("st", 0), Config{
		Name: "st", Instances: 1,
		// MaxIdle must outlast the gap between two steps of one sequence
		// on a loaded machine (a sequence idled out between them would
		// fail its next step), and the idle release below waits for it.
		Sequence: &Sequence{Strategy: Direct, MaxIdle: 2 * time.Second, States: sumState(100)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	step := func(seq backend.Sequence, v, want int32) {
		t.Helper()
		resp, err := s.Infer(ctx, seqRequest(0, seq, v))
		if err != nil {
			t.Fatal(err)
		}
		if got := outValue(t, resp); got != want {
			t.Fatalf("sequence %s: got %d, want %d", seq, got, want)
		}
		// STATE_OUT is not a declared output: the client never sees it.
		if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUT" {
			t.Fatalf("response outputs %v, want OUT alone", resp.Outputs)
		}
	}
	step(backend.Sequence{ID: 1, Start: true}, 1, 101)
	step(backend.Sequence{ID: 1}, 2, 103)
	// START resets the state even for a sequence that holds a slot.
	step(backend.Sequence{ID: 1, Start: true}, 5, 105)
	step(backend.Sequence{ID: 1, End: true}, 1, 106)
	// The slot's state is freed at END and at the idle timeout.
	step(backend.Sequence{ID: 2, Start: true}, 3, 103)
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.seq.mu.Lock()
		freed := s.seq.slots[0][0].state == nil && !s.seq.slots[0][0].bound
		s.seq.mu.Unlock()
		if freed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle sequence's state was never freed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	step(backend.Sequence{ID: 3, Start: true}, 0, 100)
}
