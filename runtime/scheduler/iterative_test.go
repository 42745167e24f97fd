package scheduler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// iterBackend reschedules each request until it ran IN times (IN < 0:
// forever), answering with the iteration count: one response per
// iteration when decoupled, a single one at the end otherwise. It records
// the START control of every execution.
type iterBackend struct {
	decoupled bool
	mu        sync.Mutex
	iters     map[uint64]int32 // by the correlation id the scheduler gave the request
	starts    []int32          // START of each execution, in order, per request
	ran       chan struct{}
}

func (b *iterBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return iterInstance{b}, nil
}

type iterInstance struct{ b *iterBackend }

func (in iterInstance) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	b := in.b
	resps := make([]*backend.Response, len(reqs))
	for i, r := range reqs {
		want := int32(binary.LittleEndian.Uint32(r.Input("IN").Data))
		b.mu.Lock()
		b.iters[r.Sequence.ID]++
		n := b.iters[r.Sequence.ID]
		b.starts = append(b.starts, int32(binary.LittleEndian.Uint32(r.Input("START").Data)))
		b.mu.Unlock()
		out := &backend.Response{Outputs: []backend.Tensor{{Name: "OUT", DataType: backend.Int32, Shape: []int64{1}, Data: i32(n)}}}
		again := want < 0 || n < want
		switch {
		case b.decoupled:
			_ = r.Sender.Send(out, !again)
			if again {
				resps[i] = &backend.Response{Reschedule: true}
			}
		case again:
			resps[i] = &backend.Response{Reschedule: true}
		default:
			resps[i] = out
		}
		if b.ran != nil {
			select {
			case b.ran <- struct{}{}:
			default:
			}
		}
	}
	return resps, nil
}

func (iterInstance) Close() error { return nil }

func iterScheduler(t *testing.T, be *iterBackend, instances int) *Scheduler {
	t.Helper()
	be.iters = map[uint64]int32{}
	s, err := New(context.Background(), be, repeatSpec("iter", nil), Config{
		Name: "iter", Instances: instances, Decoupled: be.decoupled,
		Sequence: &Sequence{Strategy: Direct, MaxIdle: time.Millisecond, Iterative: true,
			Controls: int32Controls[:1]},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestIterativeSequenceReschedulesEachRequestUntilReleased(t *testing.T) {
	// Six requests without correlation ids over one slot: each one is a
	// sequence that holds the slot through its iterations (a max idle of
	// 1ms must not end it) and frees it for the backlog when released.
	be := &iterBackend{}
	s := iterScheduler(t, be, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for c := 1; c <= 6; c++ {
		wg.Add(1)
		go func(c int32) {
			defer wg.Done()
			resp, err := s.Infer(context.Background(), int32Request(c))
			if err != nil {
				errs <- err
				return
			}
			if got := outValue(t, resp); got != c {
				errs <- fmt.Errorf("request of %d iterations answered after %d", c, got)
			}
		}(int32(c))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	starts := 0
	for _, v := range be.starts {
		starts += int(v)
	}
	if len(be.starts) != 21 || starts != 6 {
		t.Errorf("%d executions with %d START, want 21 with one START per request", len(be.starts), starts)
	}
	if st := s.Stats(); st.Success.Count != 6 || s.pending.Load() != 0 {
		t.Errorf("successes %d, pending %d after all answered", st.Success.Count, s.pending.Load())
	}
}

func TestIterativeSequenceStreamsEveryIteration(t *testing.T) {
	be := &iterBackend{decoupled: true}
	s := iterScheduler(t, be, 2)
	vals, errs, finals, err := collect(context.Background(), s, int32Request(4))
	if err != nil || len(errs) != 0 || finals != 1 || fmt.Sprint(vals) != "[1 2 3 4]" {
		t.Fatalf("stream: vals %v errs %v finals %d err %v, want [1 2 3 4] and one final", vals, errs, finals, err)
	}
}

func TestIterativeSequenceStopsWhenTheClientGoesAway(t *testing.T) {
	for _, decoupled := range []bool{false, true} {
		t.Run(fmt.Sprintf("decoupled=%v", decoupled), func(t *testing.T) {
			be := &iterBackend{decoupled: decoupled, ran: make(chan struct{}, 1)}
			s := iterScheduler(t, be, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				if decoupled {
					_, _, _, err := collect(ctx, s, int32Request(-1))
					done <- err
					return
				}
				_, err := s.Infer(ctx, int32Request(-1))
				done <- err
			}()
			<-be.ran
			<-be.ran // rescheduled at least once
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled request: %v", err)
			}
			// The request is executed at most once more, then answered
			// and its slot freed: the next request gets it.
			deadline := time.Now().Add(10 * time.Second)
			for s.pending.Load() != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := s.pending.Load(); n != 0 {
				t.Fatalf("a cancelled iterative request is still pending (%d)", n)
			}
			if decoupled {
				if vals, _, _, err := collect(context.Background(), s, int32Request(2)); err != nil || len(vals) != 2 {
					t.Fatalf("next request: %v %v", vals, err)
				}
			} else if resp, err := s.Infer(context.Background(), int32Request(2)); err != nil || outValue(t, resp) != 2 {
				t.Fatalf("next request: %v", err)
			}
		})
	}
}

func TestRescheduleWithoutIterativeSequenceFailsTheRequest(t *testing.T) {
	be := &iterBackend{iters: map[uint64]int32{}}
	s, err := New(context.Background(), be, repeatSpec("plain", nil), Config{Name: "plain", Instances: 1,
		Sequence: &Sequence{Strategy: Direct, MaxIdle: time.Second, Controls: int32Controls[:1]}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	req := int32Request(3)
	req.Sequence = backend.Sequence{ID: 7, Start: true, End: true}
	resp, err := s.Infer(context.Background(), req)
	if err != nil || resp.Err == nil || !strings.Contains(resp.Err.Error(), "iterative_sequence: true") {
		t.Fatalf("reschedule outside an iterative model: %v %+v", err, resp)
	}
}
