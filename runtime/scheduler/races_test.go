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
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, _, _, err := collect(ctx, s, int32Request(2)); second <- err }()
	waitQueued(t, s, 1)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream of a client that left: %v", err)
	}
	close(be.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// One instance takes its queue in order: once a later request is
	// answered, the worker has taken the cancelled one.
	if _, _, _, err := collect(context.Background(), s, int32Request(3)); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Failures[Canceled] != 1 || st.Fail.Count != 1 || st.Success.Count != 2 {
		t.Errorf("failures %v (fail count %d), successes %d; want one cancelled request and two successes", st.Failures, st.Fail.Count, st.Success.Count)
	}
	if n := s.pending.Load(); n != 0 {
		t.Errorf("%d requests still pending", n)
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
