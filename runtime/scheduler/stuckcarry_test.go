package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestUnloadAnswersTheRequestAStuckInstanceCarried: a request that did
// not fit the batch its worker closed, with no idle instance to start the
// next one, stays with that worker while the batch executes. When the
// execution does not return before the unload's deadline, Close answers
// the batch, and must answer that request too: it is queued, not
// executing, and nothing else will.
func TestUnloadAnswersTheRequestAStuckInstanceCarried(t *testing.T) {
	be := fake.New()
	defer be.Release()
	s, err := New(context.Background(), be, linearSpec("stuck", 4, map[string]string{"fake_fail": "hang"}), Config{
		Name: "stuck", MaxBatchSize: 4, Instances: 1,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	infer := func(rows int) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(rows, 1))
			done <- err
		}()
		return done
	}
	a := infer(3)
	for !s.isGathering() {
		time.Sleep(time.Millisecond)
	}
	b := infer(2) // lets a's batch close, and does not fit it
	waitExecuting(t, s, 1)
	if q := s.Queued(); q != 0 {
		t.Fatalf("%d requests queued, want b taken by the worker as its next batch", q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = s.Close(ctx)
	for name, done := range map[string]chan error{"a (executing)": a, "b (carried)": b} {
		select {
		case err := <-done:
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.Unavailable || !strings.Contains(err.Error(), "unloaded") {
				t.Errorf("%s: %v, want Unavailable saying the model was unloaded", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: not answered 5 s after the unload returned", name)
		}
	}
	if p := s.pending.Load(); p != 0 {
		t.Errorf("%d requests still pending after both were answered", p)
	}
}

// heldBatches holds its first executions, each until the test releases
// it (by the order they started), and runs the rest at once; it records
// the rows of every execution.
type heldBatches struct {
	mu      sync.Mutex
	gates   []chan struct{}
	n       int
	rows    []int
	started chan int // the rows of each held execution, as it starts
}

func (b *heldBatches) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *heldBatches) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	rows := 0
	for _, r := range reqs {
		rows += int(r.Inputs[0].Shape[0])
	}
	b.mu.Lock()
	var gate chan struct{}
	if b.n < len(b.gates) {
		gate = b.gates[b.n]
	}
	b.n++
	b.rows = append(b.rows, rows)
	b.mu.Unlock()
	if gate != nil {
		b.started <- rows
		<-gate
	}
	return emptyResponses(len(reqs)), nil
}

func (b *heldBatches) Close() error { return nil }

// TestCarriedRequestGoesToTheInstanceThatFreesUpFirst: a request that
// did not fit the batch its worker closed, with no idle instance then,
// starts the next batch on whichever instance frees up first, as it would
// from Triton's queue; it used to wait for the worker that closed the
// batch to finish executing it. Here x (4 rows) holds instance 1, a (3)
// gathers and executes on instance 2, b (2) did not fit a: when x's
// execution ends, b and c (2) are one batch on instance 1 while a's is
// still held.
func TestCarriedRequestGoesToTheInstanceThatFreesUpFirst(t *testing.T) {
	be := &heldBatches{gates: []chan struct{}{make(chan struct{}), make(chan struct{})}, started: make(chan int, 4)}
	s, err := New(context.Background(), be, linearSpec("c", 4, nil), Config{
		Name: "c", MaxBatchSize: 4, Instances: 2,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	released := 0
	defer func() {
		for _, g := range be.gates[released:] {
			close(g)
		}
	}()
	send := func(rows int) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(rows, 1))
			done <- err
		}()
		return done
	}
	started := func(want int) {
		t.Helper()
		select {
		case rows := <-be.started:
			if rows != want {
				t.Fatalf("a held execution of %d rows started, want %d", rows, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no execution of %d rows started in 10 s", want)
		}
	}
	x := send(4)
	started(4)
	send(3)
	for !s.isGathering() {
		time.Sleep(time.Millisecond)
	}
	b := send(2)
	started(3) // a executes alone: b did not fit, and no instance is idle
	if q := s.Queued(); q != 0 {
		t.Fatalf("%d requests queued, want b carried by a's worker", q)
	}
	close(be.gates[0]) // x's instance frees up first
	released = 1
	if err := <-x; err != nil {
		t.Fatal(err)
	}
	c := send(2)
	timeout := time.After(10 * time.Second)
	for name, done := range map[string]chan error{"b": b, "c": c} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-timeout:
			t.Fatalf("%s not answered in 10 s while a's batch executes: b waits for the instance that closed a's batch, not the one that freed up", name)
		}
	}
}

// TestLateBatchGrowsToMaxBatchSize: once the oldest request of a batch has
// waited past max_queue_delay, Triton's batcher sends what is queued up to
// max_batch_size rather than stopping at the largest preferred size, so a
// model that falls behind runs larger batches. Six one-row requests queue
// behind a held execution (preferred [2], max 8, 20 ms delay) for longer
// than the delay: they are one batch of 6, not three of 2.
func TestLateBatchGrowsToMaxBatchSize(t *testing.T) {
	be := &heldBatches{gates: []chan struct{}{make(chan struct{})}, started: make(chan int, 1)}
	s, err := New(context.Background(), be, linearSpec("late", 8, nil), Config{
		Name: "late", MaxBatchSize: 8, Instances: 1,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{2}, MaxQueueDelay: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var wg sync.WaitGroup
	infer := func(rows int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Infer(context.Background(), rowsRequest(rows, 1)); err != nil {
				t.Error(err)
			}
		}()
	}
	infer(2) // a preferred size: executes at once, and is held
	<-be.started
	for range 6 {
		infer(1)
	}
	for s.Queued() < 6 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(40 * time.Millisecond) // past the delay
	close(be.gates[0])
	wg.Wait()
	be.mu.Lock()
	defer be.mu.Unlock()
	if !slices.Equal(be.rows, []int{2, 6}) {
		t.Errorf("executions of %v rows, want [2 6]: the six requests that waited past the delay go as one batch up to max_batch_size", be.rows)
	}
}
