package scheduler

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

func newQueued(t *testing.T, maxBatch int, delayUS string, d *Dynamic) *Scheduler {
	t.Helper()
	s, err := New(context.Background(), fake.New(), linearSpec("q", maxBatch, map[string]string{"fake_delay_us": delayUS}), Config{
		Name: "q", MaxBatchSize: maxBatch, Instances: 1, Dynamic: d,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// answer is one Infer call's outcome and when it came.
type answer struct {
	name string
	err  error
	at   time.Time
}

// send runs Infer in the background and reports into out.
func send(s *Scheduler, name string, req *backend.Request, out chan<- answer, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := s.Infer(context.Background(), req)
		out <- answer{name, err, time.Now()}
	}()
}

// waitPending waits until n requests are accepted and not yet answered
// (queued, gathering into a batch or executing).
func waitPending(t *testing.T, s *Scheduler, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.pending.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests pending, want %d", s.pending.Load(), n)
		}
	}
}

// waitExecuting waits until n instances are executing a batch: a request
// sent before is then past the queue, whatever the machine's load.
func waitExecuting(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	executing := func() int {
		k := 0
		for _, run := range s.running {
			run.mu.Lock()
			if len(run.batch) > 0 {
				k++
			}
			run.mu.Unlock()
		}
		return k
	}
	for deadline := time.Now().Add(10 * time.Second); executing() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d instances executing, want %d", executing(), n)
		}
	}
}

// waitQueued waits until n requests wait in the scheduler's queues.
func waitQueued(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); s.Queued() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests queued, want %d", s.Queued(), n)
		}
	}
}

// TestQueueCountsTheFormingBatch is server's L0_http
// test_descriptive_status_code: with max_queue_size 1, a long queue delay
// and preferred batch size 8, the first request waits for its batch to
// fill, still in Triton's queue, and a second one is refused with 503 /
// "Exceeds maximum queue size"; the first then runs.
func TestQueueCountsTheFormingBatch(t *testing.T) {
	// The delay is long so that on a loaded machine the first request is
	// still gathering when the second arrives.
	s := newQueued(t, 8, "0", &Dynamic{PreferredBatchSizes: []int{8}, MaxQueueDelay: 3 * time.Second, Levels: []QueuePolicy{{MaxQueueSize: 1}}})
	out := make(chan answer, 2)
	var wg sync.WaitGroup
	send(s, "first", rowsRequest(1, 0), out, &wg)
	waitPending(t, s, 1) // the worker is gathering
	_, err := s.Infer(context.Background(), rowsRequest(1, 0))
	if status.HTTPStatus(err) != 503 || err.Error() != "[request id: <id_unknown>] Exceeds maximum queue size" {
		t.Fatalf("second request: %v", err)
	}
	wg.Wait()
	if a := <-out; a.err != nil {
		t.Fatalf("first request: %v", a.err)
	}
}

// TestTimeoutRejectIsPrompt is server's L0_dynamic_batcher
// test_default_queue_policy_timeout_prompt_response: a request queued
// behind a busy instance past default_timeout_microseconds (REJECT) is
// answered UNAVAILABLE "Request timeout expired" when the timeout ends,
// not when the instance frees; a request's own shorter timeout applies
// with allow_timeout_override.
func TestTimeoutRejectIsPrompt(t *testing.T) {
	for _, c := range []struct {
		name    string
		policy  QueuePolicy
		timeout time.Duration // the request's own
	}{
		{"default timeout", QueuePolicy{Timeout: 100 * time.Millisecond}, 0},
		{"request timeout", QueuePolicy{Timeout: time.Hour, AllowOverride: true}, 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newQueued(t, 0, "4000000", &Dynamic{Levels: []QueuePolicy{c.policy}})
			out := make(chan answer, 2)
			var wg sync.WaitGroup
			send(s, "busy", rowsRequest(1, 0), out, &wg)
			waitExecuting(t, s, 1) // for 4 s
			start := time.Now()
			req := rowsRequest(1, 0)
			req.Timeout = c.timeout
			_, err := s.Infer(context.Background(), req)
			took := time.Since(start)
			if status.GRPCCode(err).String() != "Unavailable" || err.Error() != "Request timeout expired" {
				t.Fatalf("queued request: %v", err)
			}
			if took < 90*time.Millisecond || took > 2500*time.Millisecond {
				t.Errorf("answered after %v, want about 100ms (the instance is busy for 4s)", took)
			}
			wg.Wait()
			if a := <-out; a.err != nil {
				t.Fatal(a.err)
			}
			if f := s.Stats().Fail.Count; f != 1 {
				t.Errorf("fail count %d, want 1", f)
			}
		})
	}
	// Without allow_timeout_override the request's timeout is ignored.
	s := newQueued(t, 0, "200000", &Dynamic{Levels: []QueuePolicy{{}}})
	out := make(chan answer, 2)
	var wg sync.WaitGroup
	send(s, "busy", rowsRequest(1, 0), out, &wg)
	waitExecuting(t, s, 1)
	req := rowsRequest(1, 0)
	req.Timeout = time.Millisecond
	if _, err := s.Infer(context.Background(), req); err != nil {
		t.Errorf("a request timeout without allow_timeout_override: %v", err)
	}
	wg.Wait()
}

// TestTimeoutDelay: under timeout_action DELAY a request past its timeout
// is not refused but runs after the requests of its level that are not.
func TestTimeoutDelay(t *testing.T) {
	// busy runs 1 s: long enough on a loaded machine for the other two to queue behind it.
	s := newQueued(t, 0, "1000000", &Dynamic{Levels: []QueuePolicy{{Timeout: time.Hour, Delay: true, AllowOverride: true}}})
	out := make(chan answer, 3)
	var wg sync.WaitGroup
	send(s, "busy", rowsRequest(1, 0), out, &wg)
	waitExecuting(t, s, 1)
	late := rowsRequest(1, 0)
	late.Timeout = time.Millisecond // past it when the instance frees
	send(s, "late", late, out, &wg)
	waitQueued(t, s, 1)
	send(s, "ontime", rowsRequest(1, 0), out, &wg)
	waitQueued(t, s, 2)
	wg.Wait()
	close(out)
	var order []string
	for a := range out {
		if a.err != nil {
			t.Fatalf("%s: %v", a.name, a.err)
		}
		order = append(order, a.name)
	}
	if len(order) != 3 || order[1] != "ontime" || order[2] != "late" {
		t.Errorf("completion order %v, want busy, ontime, late", order)
	}
}

// TestPriorityLevels: a request of a higher priority level (1) runs
// before one of a lower level queued earlier; a priority the model lacks
// means its default level; each level has its own queue policy.
func TestPriorityLevels(t *testing.T) {
	// busy runs 1 s: long enough on a loaded machine for the rest to queue behind it.
	s := newQueued(t, 0, "1000000", &Dynamic{
		Levels:       []QueuePolicy{{}, {MaxQueueSize: 1}},
		DefaultLevel: 2,
	})
	out := make(chan answer, 3)
	var wg sync.WaitGroup
	send(s, "busy", rowsRequest(1, 0), out, &wg)
	waitExecuting(t, s, 1)
	low := rowsRequest(1, 0)
	low.Priority = 9 // no such level: the default, 2
	send(s, "low", low, out, &wg)
	waitQueued(t, s, 1)
	// Level 2 holds one request at most.
	again := rowsRequest(1, 0)
	again.Priority = 2
	if _, err := s.Infer(context.Background(), again); err == nil || err.Error() != "[request id: <id_unknown>] Exceeds maximum queue size" {
		t.Errorf("a second level-2 request: %v", err)
	}
	high := rowsRequest(1, 0)
	high.Priority = 1
	send(s, "high", high, out, &wg)
	waitQueued(t, s, 2)
	wg.Wait()
	close(out)
	var order []string
	for a := range out {
		if a.err != nil {
			t.Fatalf("%s: %v", a.name, a.err)
		}
		order = append(order, a.name)
	}
	if len(order) != 3 || order[1] != "high" || order[2] != "low" {
		t.Errorf("completion order %v, want busy, high, low", order)
	}
}

// TestALeftRequestFreesItsQueuePlace: a queued request whose caller
// leaves (its context ends, or its REJECT timeout) gives its
// max_queue_size place to the next request at once, not only when the
// busy instance gets round to it; the left request is counted failed
// once and the worker drops it.
func TestALeftRequestFreesItsQueuePlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the level's; 0: the caller cancels
		reason  FailureReason
	}{
		{"cancelled", 0, Canceled},
		{"timed out", 50 * time.Millisecond, Rejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A full batch of 4 keeps the one instance busy for 600 ms.
			s := newQueued(t, 4, "600000", &Dynamic{Levels: []QueuePolicy{{MaxQueueSize: 1, Timeout: tc.timeout}}})
			first := make(chan error, 1)
			go func() { _, err := s.Infer(context.Background(), rowsRequest(4, 0)); first <- err }()
			waitExecuting(t, s, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			left := make(chan error, 1)
			go func() { _, err := s.Infer(ctx, rowsRequest(4, 0)); left <- err }()
			waitQueued(t, s, 1)
			if tc.timeout == 0 {
				cancel()
			}
			if err := <-left; err == nil {
				t.Fatal("the left request was answered")
			}
			// The instance is still busy with the first request: before
			// the fix this was refused with "Exceeds maximum queue size".
			_, err := s.Infer(context.Background(), rowsRequest(4, 0))
			if tc.timeout == 0 && err != nil {
				t.Fatalf("the request after the cancelled one: %v", err)
			}
			if tc.timeout > 0 && (err == nil || !strings.Contains(err.Error(), "Request timeout expired")) {
				t.Fatalf("the request after the timed-out one: %v, want it queued and timed out in its turn", err)
			}
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			waitAnswered(t, s)
			st := s.Stats()
			wantFail := uint64(1)
			if tc.timeout > 0 {
				wantFail = 2 // the third request timed out too, queued behind the first
			}
			if st.Failures[tc.reason] != wantFail || st.Fail.Count != wantFail {
				t.Errorf("failures %v (fail count %d), want %d %v", st.Failures, st.Fail.Count, wantFail, tc.reason)
			}
			if s.Queued() != 0 || s.levels[0].waiting.Load() != 0 {
				t.Errorf("queued %d, level count %d after all were answered", s.Queued(), s.levels[0].waiting.Load())
			}
		})
	}
}

// TestAHugeMaxQueueSizeCostsNothingAtLoad: Triton's max_queue_size is a
// uint32 and its queue grows as it fills, so a config with a bound in the
// billions loads there. Here the queue channel is allocated at load:
// sized from the bound it took 34 GB (a fatal out-of-memory on a machine
// with less). Requests past the channel's room wait to enter it, still
// counted against the bound, and all run.
func TestAHugeMaxQueueSizeCostsNothingAtLoad(t *testing.T) {
	be := &gateBackend{started: make(chan struct{}), release: make(chan struct{})}
	s, err := New(context.Background(), be, linearSpec("huge", 64, nil), Config{
		Name: "huge", MaxBatchSize: 64, Instances: 1,
		Dynamic: &Dynamic{Levels: []QueuePolicy{{MaxQueueSize: math.MaxInt32}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if c := cap(s.levels[0].ch); c > queueChanCap {
		t.Fatalf("queue channel of %d places allocated at load", c)
	}
	// More requests than the channel holds, while the one instance is
	// held: none is refused, and each is answered once it goes on.
	n := queueChanCap + 100
	errs := make(chan error, n)
	infer := func() { _, err := s.Infer(context.Background(), rowsRequest(1, 0)); errs <- err }
	go infer()
	<-be.started
	for range n - 1 {
		go infer()
	}
	waitPending(t, s, int64(n))
	close(be.release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitAnswered(t, s)
	if got := s.levels[0].waiting.Load(); got != 0 {
		t.Errorf("level count %d after all were answered", got)
	}
}
