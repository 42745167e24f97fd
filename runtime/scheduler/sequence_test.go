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
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func accSpec(name string, maxBatch int) *backend.ModelSpec {
	return &backend.ModelSpec{
		Name: name, Version: 1, MaxBatchSize: maxBatch, Parameters: map[string]string{"fake_mode": "accumulate", "fake_delay_us": "500"},
		Inputs:  []backend.TensorSpec{{Name: "IN", DataType: backend.Int32, Dims: []int64{1}}},
		Outputs: []backend.TensorSpec{{Name: "OUT", DataType: backend.Int32, Dims: []int64{1}}},
	}
}

func i32(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }

var int32Controls = []Control{
	{Kind: ControlStart, Input: "START", DataType: backend.Int32, False: i32(0), True: i32(1)},
	{Kind: ControlEnd, Input: "END", DataType: backend.Int32, False: i32(0), True: i32(1)},
	{Kind: ControlReady, Input: "READY", DataType: backend.Int32, False: i32(0), True: i32(1)},
}

func seqRequest(maxBatch int, seq backend.Sequence, v int32) *backend.Request {
	shape := []int64{1}
	if maxBatch > 0 {
		shape = []int64{1, 1}
	}
	return &backend.Request{Sequence: seq, Inputs: []backend.Tensor{{Name: "IN", DataType: backend.Int32, Shape: shape, Data: i32(v)}}}
}

func outValue(t *testing.T, resp *backend.Response) int32 {
	t.Helper()
	if resp.Err != nil {
		t.Fatal(resp.Err)
	}
	return int32(binary.LittleEndian.Uint32(resp.Outputs[0].Data))
}

// runSequences sends n interleaved sequences of length steps concurrently,
// each client checking that every response is its own running sum.
func runSequences(t *testing.T, s *Scheduler, maxBatch, n, steps int, str bool) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			seq := backend.Sequence{ID: uint64(1000 + c)}
			if str {
				seq = backend.Sequence{StrID: fmt.Sprintf("client-%d", c)}
			}
			sum := int32(0)
			for i := 0; i < steps; i++ {
				seq.Start, seq.End = i == 0, i == steps-1
				v := int32(c*100 + i)
				sum += v
				resp, err := s.Infer(context.Background(), seqRequest(maxBatch, seq, v))
				if err != nil {
					errs <- fmt.Errorf("sequence %s step %d: %w", seq, i, err)
					return
				}
				if resp.Err != nil || int32(binary.LittleEndian.Uint32(resp.Outputs[0].Data)) != sum {
					errs <- fmt.Errorf("sequence %s step %d: got %v %w, want sum %d", seq, i, resp.Outputs, resp.Err, sum)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSequenceDirectKeepsEachSequenceInItsSlot(t *testing.T) {
	be := fake.New()
	// No CORRID: the fake model keys its state by batch row, so the sums
	// are right only if every sequence keeps its slot. 8 sequences over 2
	// instances of 2 slots also exercise the backlog.
	s, err := New(context.Background(), be, accSpec("d", 2), Config{
		Name: "d", MaxBatchSize: 2, Instances: 2,
		Sequence: &Sequence{Strategy: Direct, MaxIdle: time.Second, Controls: int32Controls},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	runSequences(t, s, 2, 8, 6, false)
	for _, b := range be.Batches("d") {
		if b > 2 {
			t.Fatalf("a direct batch of %d rows exceeds the 2 slots: %v", b, be.Batches("d"))
		}
	}
	// Null rows (READY false) filled an empty lower slot at least once,
	// or every batch was full: either way no row ran without a request.
	rows, ready := 0, 0
	for i, b := range be.Batches("d") {
		rows += b
		ready += be.ReadyRows("d")[i]
	}
	if ready != 8*6 {
		t.Fatalf("%d rows ran with READY true, want one per request (48); %d rows in all", ready, rows)
	}
}

func TestSequenceOldestBatchesAcrossSequencesByCorrelationID(t *testing.T) {
	for _, str := range []bool{false, true} {
		t.Run(fmt.Sprintf("string=%v", str), func(t *testing.T) {
			be := fake.New()
			corr := Control{Kind: ControlCorrID, Input: "CORRID", DataType: backend.Uint64}
			if str {
				corr.DataType = backend.Bytes
			}
			s, err := New(context.Background(), be, accSpec("o", 4), Config{
				Name: "o", MaxBatchSize: 4, Instances: 1,
				Sequence: &Sequence{Strategy: Oldest, MaxIdle: time.Second, MaxCandidates: 6, MaxQueueDelay: 2 * time.Millisecond,
					Controls: append([]Control{corr}, int32Controls...)},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			runSequences(t, s, 4, 10, 5, str)
			batched := false
			for _, b := range be.Batches("o") {
				if b > 4 {
					t.Fatalf("batch of %d over max_batch_size 4", b)
				}
				batched = batched || b > 1
			}
			if !batched {
				t.Fatalf("the oldest strategy never batched sequences together: %v", be.Batches("o"))
			}
		})
	}
}

func TestSequenceRefusalsAndIdleRelease(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, accSpec("r", 0), Config{
		Name: "r", MaxBatchSize: 0, Instances: 1,
		// MaxIdle outlasts the steps of sequence 1 below on a loaded
		// machine; the idle release then waits for it.
		Sequence: &Sequence{Strategy: Direct, MaxIdle: time.Second, MaxBacklog: 1, Controls: int32Controls},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	wantErr := func(req *backend.Request, code backend.Code, text string) {
		t.Helper()
		_, err := s.Infer(ctx, req)
		var be *backend.Error
		if !errors.As(err, &be) || be.Code != code || !strings.Contains(err.Error(), text) {
			t.Fatalf("got %v, want code %d with %q", err, code, text)
		}
	}
	wantErr(seqRequest(0, backend.Sequence{Start: true}, 1), backend.InvalidArg,
		"inference request to model 'r' must specify a non-zero or non-empty correlation ID")
	wantErr(seqRequest(0, backend.Sequence{ID: 7}, 1), backend.InvalidArg,
		"inference request for sequence 7 to model 'r' must specify the START flag on the first request of the sequence")
	wantErr(seqRequest(0, backend.Sequence{StrID: "abc"}, 1), backend.InvalidArg,
		"inference request for sequence abc to model 'r' must specify the START flag on the first request of the sequence")

	// Sequence 1 holds the only slot; sequence 2 waits in the backlog
	// (its request blocks); a third sequence finds the backlog full.
	resp, err := s.Infer(ctx, seqRequest(0, backend.Sequence{ID: 1, Start: true}, 5))
	if err != nil || outValue(t, resp) != 5 {
		t.Fatalf("start of sequence 1: %v %v", resp, err)
	}
	second := make(chan int32, 1)
	go func() {
		resp, err := s.Infer(ctx, seqRequest(0, backend.Sequence{ID: 2, Start: true}, 40))
		if err != nil {
			t.Error(err)
			second <- -1
			return
		}
		second <- outValue(t, resp)
	}()
	// Sequence 3 must come after sequence 2 is in the backlog.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s.seq.mu.Lock()
		n := len(s.seq.backlog)
		s.seq.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sequence 2 never reached the backlog")
		}
	}
	wantErr(seqRequest(0, backend.Sequence{ID: 3, Start: true}, 1), backend.Unavailable, "sequence 3 to model 'r' cannot start")
	resp, err = s.Infer(ctx, seqRequest(0, backend.Sequence{ID: 1}, 6))
	if err != nil || outValue(t, resp) != 11 {
		t.Fatalf("sequence 1 continues: %v %v", resp, err)
	}
	// Sequence 1 goes idle: its slot is released to sequence 2 and its
	// next request is refused as one that never started.
	select {
	case v := <-second:
		if v != 40 {
			t.Fatalf("sequence 2 started with state: got %d, want 40", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the idle sequence's slot was never released to the backlog")
	}
	wantErr(seqRequest(0, backend.Sequence{ID: 1}, 1), backend.InvalidArg,
		"inference request for sequence 1 to model 'r' must specify the START flag on the first request of the sequence")
	// Refused requests left the queue's count as they came: none waits.
	if n := s.levels[0].waiting.Load(); n != 0 {
		t.Errorf("%d requests counted as waiting after the refusals and the answered requests", n)
	}
}
