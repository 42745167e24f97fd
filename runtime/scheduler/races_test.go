package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// gatedStream is a decoupled backend whose first Execute tells started
// and waits for release; every request gets an empty final flag.
type gatedStream struct {
	started, release chan struct{}
	once             sync.Once
}

func newGatedStream() *gatedStream {
	return &gatedStream{started: make(chan struct{}), release: make(chan struct{})}
}

func (b *gatedStream) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *gatedStream) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	b.once.Do(func() {
		close(b.started)
		<-b.release
	})
	for _, r := range reqs {
		_ = r.Sender.Send(nil, true)
	}
	return nil, nil
}

func (b *gatedStream) Close() error { return nil }

// waitAnswered waits until every accepted request is answered and
// accounted (a stream's client may see its final response before its
// request is counted).
func waitAnswered(t *testing.T, s *Scheduler) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.pending.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still pending", s.pending.Load())
		}
	}
}

// TestStreamCancelledWhileQueuedCountsOnce: a queued request of a
// decoupled model whose client leaves is one cancelled request, whether
// its stream closing or the worker taking it from the queue sees it first.
func TestStreamCancelledWhileQueuedCountsOnce(t *testing.T) {
	be := newGatedStream()
	s, err := New(context.Background(), be, repeatSpec("gs", nil), Config{Name: "gs", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	first := make(chan error, 1)
	go func() { _, _, _, err := collect(context.Background(), s, int32Request(1)); first <- err }()
	<-be.started
	leaveWhileQueued(t, s)
	close(be.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// One instance takes its queue in order: once a later request is
	// answered, the worker has taken the cancelled one.
	if _, _, _, err := collect(context.Background(), s, int32Request(3)); err != nil {
		t.Fatal(err)
	}
	waitAnswered(t, s)
	st := s.Stats()
	if st.Failures[Canceled] != 1 || st.Fail.Count != 1 || st.Success.Count != 2 {
		t.Errorf("failures %v (fail count %d), successes %d; want one cancelled request and two successes", st.Failures, st.Fail.Count, st.Success.Count)
	}
}

// TestALeftStreamFreesItsQueuePlace: a queued request of a decoupled
// model whose client leaves gives its max_queue_size place to the next
// request at once, as Infer's do, not when the busy instance next meets
// it: the third request is queued, not refused with "Exceeds maximum
// queue size".
func TestALeftStreamFreesItsQueuePlace(t *testing.T) {
	be := newGatedStream()
	s, err := New(context.Background(), be, repeatSpec("gq", nil), Config{Name: "gq", Instances: 1, Decoupled: true,
		Dynamic: &Dynamic{Levels: []QueuePolicy{{MaxQueueSize: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	// Released before Close on a failure too, which would wait for it.
	release := sync.OnceFunc(func() { close(be.release) })
	defer release()
	first := make(chan error, 1)
	go func() { _, _, _, err := collect(context.Background(), s, int32Request(1)); first <- err }()
	<-be.started
	leaveWhileQueued(t, s)
	third := make(chan error, 1)
	go func() {
		_, errs, _, err := collect(context.Background(), s, int32Request(3))
		if err == nil && len(errs) > 0 {
			err = errors.New(errs[0])
		}
		third <- err
	}()
	select {
	case err := <-third:
		t.Fatalf("the request after the left one, while the instance is busy: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	waitAnswered(t, s)
	st := s.Stats()
	if st.Failures[Canceled] != 1 || st.Fail.Count != 1 || st.Success.Count != 2 {
		t.Errorf("failures %v (fail count %d), successes %d; want one cancelled request and two successes", st.Failures, st.Fail.Count, st.Success.Count)
	}
	if n := s.levels[0].waiting.Load(); n != 0 {
		t.Errorf("the level counts %d requests after all were answered", n)
	}
}

// TestIterativeSequenceLeavesTheCallersRequestAlone: the correlation id
// the scheduler gives a request of an iterative model is its own; the
// caller's request is not written, so it may be sent again (also
// concurrently, which -race checks).
func TestIterativeSequenceLeavesTheCallersRequestAlone(t *testing.T) {
	for _, decoupled := range []bool{false, true} {
		be := &iterBackend{decoupled: decoupled}
		s := iterScheduler(t, be, 2)
		req := int32Request(2)
		// A request whose sequence id another one shares may never be
		// answered: bounded so that the test fails rather than hangs.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if decoupled {
					vals, _, _, err := collect(ctx, s, req)
					if err == nil && len(vals) != 2 {
						err = errors.New("want two responses")
					}
					errs <- err
					return
				}
				_, err := s.Infer(ctx, req)
				errs <- err
			}()
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("decoupled=%v: %v", decoupled, err)
			}
		}
		if req.Sequence != (backend.Sequence{}) {
			t.Errorf("decoupled=%v: the caller's request was given sequence %+v", decoupled, req.Sequence)
		}
	}
}

// TestSequenceBatchingRefusesAQueuePolicy: Triton's scheduling_choice
// makes dynamic_batching (where queue policies live) and
// sequence_batching exclusive, and the sequence workers do not serve a
// level's DELAY list: a scheduler with both is refused.
func TestSequenceBatchingRefusesAQueuePolicy(t *testing.T) {
	_, err := New(context.Background(), fake.New(), repeatSpec("both", nil), Config{
		Name: "both", Instances: 1,
		Dynamic:  &Dynamic{Levels: []QueuePolicy{{Timeout: time.Microsecond, Delay: true}}},
		Sequence: &Sequence{Strategy: Direct, MaxIdle: time.Second, Controls: int32Controls[:1]},
	})
	if err == nil || !strings.Contains(err.Error(), "dynamic_batching and sequence_batching") {
		t.Fatalf("dynamic and sequence batching together: %v", err)
	}
}

// finalThenFail is a decoupled backend that sends each request's final
// flag and then fails the execution.
type finalThenFail struct{}

func (finalThenFail) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return finalThenFail{}, nil
}

func (finalThenFail) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	for _, r := range reqs {
		_ = r.Sender.Send(nil, true)
	}
	return nil, errors.New("failed after the final response")
}

func (finalThenFail) Close() error { return nil }

// TestStreamFinishedThenFailedCountsOnce: a request of a decoupled model
// that received its final response is a success, also when its
// execution fails afterwards; the failure answers nobody.
func TestStreamFinishedThenFailedCountsOnce(t *testing.T) {
	s, err := New(context.Background(), finalThenFail{}, repeatSpec("ftf", nil), Config{Name: "ftf", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := 0; i < 2; i++ {
		if _, errs, finals, err := collect(context.Background(), s, int32Request(1)); err != nil || len(errs) != 0 || finals != 1 {
			t.Fatalf("request %d: errs %v, finals %d, err %v", i, errs, finals, err)
		}
	}
	// The second request ran after the first's execution returned.
	waitAnswered(t, s)
	if st := s.Stats(); st.Success.Count != 2 || st.Failures[Backend] != 0 {
		t.Errorf("successes %d, failures %v; want two successes and no failure", st.Success.Count, st.Failures)
	}
}

// TestStreamTimeoutRejectIsPrompt: a queued request of a decoupled model
// whose REJECT timeout ends gets Triton's "Request timeout expired" as its
// final response then, while the instance is still busy, as Infer does;
// the worker drops it later without answering or counting it again.
func TestStreamTimeoutRejectIsPrompt(t *testing.T) {
	be := newGatedStream()
	s, err := New(context.Background(), be, repeatSpec("gto", nil), Config{Name: "gto", Instances: 1, Decoupled: true,
		// Priority 1 has no timeout: the requests around the timed-out one
		// must not time out on a loaded machine.
		Dynamic: &Dynamic{Levels: []QueuePolicy{{}, {Timeout: time.Millisecond}}, DefaultLevel: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	untimed := func(v int32) *backend.Request {
		r := int32Request(v)
		r.Priority = 1
		return r
	}
	first := make(chan error, 1)
	go func() { _, _, _, err := collect(context.Background(), s, untimed(1)); first <- err }()
	<-be.started
	// Bounded so that a missed timeout fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, errs, finals, err := collect(ctx, s, int32Request(2))
	if err != nil || finals != 1 || len(errs) != 1 || !strings.Contains(errs[0], "Request timeout expired") {
		t.Errorf("timed-out stream: errs %v, finals %d, err %v", errs, finals, err)
	}
	close(be.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, errs, _, err := collect(context.Background(), s, untimed(3)); err != nil || len(errs) != 0 {
		t.Fatal(errs, err)
	}
	waitAnswered(t, s)
	// Priority 1 goes first: the expired request may still be queued.
	for deadline := time.Now().Add(10 * time.Second); s.Queued() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the expired request is still queued")
		}
	}
	st := s.Stats()
	if st.Failures[Rejected] != 1 || st.Fail.Count != 1 || st.Success.Count != 2 || s.pending.Load() != 0 || s.Queued() != 0 {
		t.Errorf("failures %v, successes %d, pending %d, queued %d; want one rejected request and two successes", st.Failures, st.Success.Count, s.pending.Load(), s.Queued())
	}
	// Each level's count of admitted requests (max_queue_size's) is back
	// to zero: the expired request left it once.
	for i := range s.levels {
		if n := s.levels[i].waiting.Load(); n != 0 {
			t.Errorf("level %d counts %d requests after all were answered", i, n)
		}
	}
}

// TestStreamUnloadAnswersEachRequestOnce: an unload that gives up on a
// stuck execution ends its streamed request (OTHER) and meets the queued
// one whose client already left (CANCELED): each counted once, nothing
// left pending.
func TestStreamUnloadAnswersEachRequestOnce(t *testing.T) {
	be := newGatedStream()
	s, err := New(context.Background(), be, repeatSpec("gu", nil), Config{Name: "gu", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer close(be.release) // lets the stuck execution return at the end
	type outcome struct {
		errs []string
		err  error
	}
	first := make(chan outcome, 1)
	go func() {
		_, errs, _, err := collect(context.Background(), s, int32Request(1))
		first <- outcome{errs, err}
	}()
	<-be.started
	leaveWhileQueued(t, s)
	uctx, ucancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer ucancel()
	_ = s.Close(uctx) // the execution never returns: Close gives up on it
	got := <-first
	if got.err != nil || len(got.errs) != 1 || !strings.Contains(got.errs[0], "was unloaded while this request was executing") {
		t.Errorf("stuck request at unload: errs %v, err %v", got.errs, got.err)
	}
	st := s.Stats()
	if st.Failures[Canceled] != 1 || st.Failures[Other] != 1 || st.Fail.Count != 2 || s.pending.Load() != 0 {
		t.Errorf("failures %v (fail count %d), pending %d; want one CANCELED and one OTHER", st.Failures, st.Fail.Count, s.pending.Load())
	}
}

// leaveWhileQueued streams a second request behind the one executing and
// cancels it while it waits in the queue, as a client that leaves does; its
// stream must end with the context's error.
func leaveWhileQueued(t *testing.T, s *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, _, _, err := collect(ctx, s, int32Request(2)); second <- err }()
	waitQueued(t, s, 1)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream of a client that left: %v", err)
	}
}
