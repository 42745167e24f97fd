package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// fullStream is a decoupled backend that sends more responses than the
// stream buffers, then its final response, which blocks on the full
// buffer (sending tells when it is about to).
type fullStream struct{ sending chan struct{} }

func (b *fullStream) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *fullStream) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	for _, r := range reqs {
		for i := 0; i <= streamBuffer; i++ {
			_ = r.Sender.Send(&backend.Response{}, false)
		}
		close(b.sending)
		_ = r.Sender.Send(nil, true)
	}
	return nil, nil
}

func (b *fullStream) Close() error { return nil }

// TestStreamFinalBlockedWhenClientLeavesCountsOnce: a request whose
// final response waits for room in its stream when its client leaves is
// counted once, as cancelled: the final response marked the request
// finished, so the client's leaving counted nothing, and the failed send
// did not count it either.
func TestStreamFinalBlockedWhenClientLeavesCountsOnce(t *testing.T) {
	be := &fullStream{sending: make(chan struct{})}
	s, err := New(context.Background(), be, repeatSpec("fs", nil), Config{Name: "fs", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	gone := errors.New("the client stopped reading")
	err = s.Stream(context.Background(), int32Request(1), func(*backend.Response, bool) error {
		<-be.sending
		time.Sleep(50 * time.Millisecond) // the final Send waits on the full buffer
		return gone
	})
	if !errors.Is(err, gone) {
		t.Fatalf("Stream returned %v, want the callback's error", err)
	}
	waitAnswered(t, s)
	st := s.Stats()
	if n := st.Success.Count + st.Fail.Count; n != 1 {
		t.Fatalf("success %d + fail %d = %d, want the request counted once", st.Success.Count, st.Fail.Count, n)
	}
	if st.Failures[Canceled] != 1 {
		t.Errorf("failures by reason %v, want one CANCELED", st.Failures)
	}
}
