package scheduler

import (
	"context"
	"errors"
	"strings"
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
