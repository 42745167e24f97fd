package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTimeoutRejectWhileWaitingForQueueRoom: a request admitted under
// max_queue_size whose level's queue channel is full of requests that
// left (their places freed, their entries not yet met by a worker) waits
// to enter the channel; its REJECT timeout still answers it when it ends,
// as for any queued request, not when the busy instance next drains the
// channel.
func TestTimeoutRejectWhileWaitingForQueueRoom(t *testing.T) {
	const timeout = 100 * time.Millisecond
	be := &gateBackend{started: make(chan struct{}), release: make(chan struct{})}
	s, err := New(context.Background(), be, linearSpec("room", 4, nil), Config{
		Name: "room", MaxBatchSize: 4, Instances: 1,
		Dynamic: &Dynamic{Levels: []QueuePolicy{{MaxQueueSize: 1, Timeout: timeout}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	released := false
	release := func() {
		if !released {
			released = true
			close(be.release)
		}
	}
	defer release()
	first := make(chan error, 1)
	go func() { _, err := s.Infer(context.Background(), rowsRequest(4, 0)); first <- err }()
	<-be.started
	// Two requests time out in turn while the instance is held: each
	// frees its place, and both stay in the channel (of 2 places).
	for i := 0; i < 2; i++ {
		if _, err := s.Infer(context.Background(), rowsRequest(4, 0)); err == nil || !strings.Contains(err.Error(), "Request timeout expired") {
			t.Fatalf("request %d: %v, want it timed out", i, err)
		}
	}
	if n := len(s.levels[0].ch); n != cap(s.levels[0].ch) {
		t.Fatalf("%d of %d places of the channel taken, want it full", n, cap(s.levels[0].ch))
	}
	third := make(chan error, 1)
	start := time.Now()
	go func() { _, err := s.Infer(context.Background(), rowsRequest(4, 0)); third <- err }()
	select {
	case err := <-third:
		if err == nil || !strings.Contains(err.Error(), "Request timeout expired") {
			t.Fatalf("third request: %v, want it timed out", err)
		}
		if d := time.Since(start); d > 20*timeout {
			t.Errorf("third request answered after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("third request not answered 5 s after its 100 ms timeout: it waits for the busy instance")
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitAnswered(t, s)
	st := s.Stats()
	if st.Failures[Rejected] != 3 || st.Fail.Count != 3 {
		t.Errorf("failures %v (fail count %d), want 3 REJECTED", st.Failures, st.Fail.Count)
	}
	if s.Queued() != 0 || s.levels[0].waiting.Load() != 0 {
		t.Errorf("queued %d, level count %d after all were answered", s.Queued(), s.levels[0].waiting.Load())
	}
}
