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

func repeatSpec(name string, params map[string]string) *backend.ModelSpec {
	p := map[string]string{"fake_mode": "repeat"}
	for k, v := range params {
		p[k] = v
	}
	return &backend.ModelSpec{
		Name: name, Version: 1, Parameters: p,
		Inputs:  []backend.TensorSpec{{Name: "IN", DataType: backend.Int32, Dims: []int64{-1}}},
		Outputs: []backend.TensorSpec{{Name: "OUT", DataType: backend.Int32, Dims: []int64{1}}},
	}
}

func int32Request(vals ...int32) *backend.Request {
	data := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		data = binary.LittleEndian.AppendUint32(data, uint32(v))
	}
	return &backend.Request{Inputs: []backend.Tensor{{Name: "IN", DataType: backend.Int32, Shape: []int64{int64(len(vals))}, Data: data}}}
}

// collect streams req and returns the OUT values and error texts in order.
func collect(ctx context.Context, s *Scheduler, req *backend.Request) (vals []int32, errs []string, finals int, err error) {
	err = s.Stream(ctx, req, func(r *backend.Response, final bool) error {
		if final {
			finals++
		}
		switch {
		case r == nil:
		case r.Err != nil:
			errs = append(errs, r.Err.Error())
		default:
			vals = append(vals, int32(binary.LittleEndian.Uint32(r.Outputs[0].Data)))
		}
		return nil
	})
	return
}

func TestStreamDeliversEveryResponseInOrderThenTheFinalFlag(t *testing.T) {
	s, err := New(context.Background(), fake.New(), repeatSpec("rep", nil), Config{Name: "rep", Instances: 2, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var wg sync.WaitGroup
	fails := make(chan error, 32)
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 1 + c%40 // more than the buffer for some
			in := make([]int32, n)
			for i := range in {
				in[i] = int32(c*1000 + i)
			}
			vals, errs, finals, err := collect(context.Background(), s, int32Request(in...))
			if err != nil || len(errs) > 0 || finals != 1 || fmt.Sprint(vals) != fmt.Sprint(in) {
				fails <- fmt.Errorf("client %d: err %w, errors %v, %d finals, got %v want %v", c, err, errs, finals, vals, in)
			}
		}()
	}
	wg.Wait()
	close(fails)
	for err := range fails {
		t.Error(err)
	}
	st := s.Stats()
	if st.Success.Count != 32 || st.Fail.Count != 0 {
		t.Errorf("success %d fail %d, want 32 and 0", st.Success.Count, st.Fail.Count)
	}
	// Zero responses: the final flag alone.
	vals, _, finals, err := collect(context.Background(), s, int32Request())
	if err != nil || len(vals) != 0 || finals != 1 {
		t.Errorf("empty request: %v %v %d", err, vals, finals)
	}
}

func TestStreamErrorResponsesAndRefusals(t *testing.T) {
	s, err := New(context.Background(), fake.New(), repeatSpec("rep", nil), Config{Name: "rep", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	vals, errs, finals, err := collect(context.Background(), s, int32Request(1, fake.FailValue, 3))
	if err != nil || fmt.Sprint(vals) != "[1 3]" || len(errs) != 1 || !strings.Contains(errs[0], "element 1 asked to fail") || finals != 1 {
		t.Errorf("got %v %v %v %d", err, vals, errs, finals)
	}
	if st := s.Stats(); st.Fail.Count != 1 || st.Failures[Backend] != 1 {
		t.Errorf("a stream with an error response counts as failed: %+v", st)
	}
	_, err = s.Infer(context.Background(), int32Request(1))
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.Unsupported {
		t.Errorf("Infer on a decoupled model: %v", err)
	}
	plain, err := New(context.Background(), fake.New(), linearSpec("lin", 0, nil), Config{Name: "lin"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	if err := plain.Stream(context.Background(), rowsRequest(1, 0), func(*backend.Response, bool) error { return nil }); !errors.As(err, &be) || be.Code != backend.Unsupported {
		t.Errorf("Stream on a model that is not decoupled: %v", err)
	}
}

// holdBackend is a backend whose requests stay open after Execute: it sends
// one response and keeps the rest for the test to drive.
type holdBackend struct {
	mu   sync.Mutex
	reqs []*backend.Request
	got  chan struct{}
}

func (b *holdBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return holdInstance{b}, nil
}

type holdInstance struct{ b *holdBackend }

func (h holdInstance) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	for _, r := range reqs {
		if err := r.Sender.Send(&backend.Response{}, false); err != nil {
			return nil, err
		}
		h.b.mu.Lock()
		h.b.reqs = append(h.b.reqs, r)
		h.b.mu.Unlock()
		h.b.got <- struct{}{}
	}
	return nil, nil
}

func (holdInstance) Close() error { return nil }

func TestStreamClientGoneCancelsAndUnloadEndsOpenRequests(t *testing.T) {
	be := &holdBackend{got: make(chan struct{}, 4)}
	s, err := New(context.Background(), be, repeatSpec("hold", nil), Config{Name: "hold", Instances: 1, Decoupled: true})
	if err != nil {
		t.Fatal(err)
	}
	// A client that leaves after the first response: the backend sees
	// the request cancelled and its sends fail.
	ctx, cancel := context.WithCancel(context.Background())
	err = s.Stream(ctx, int32Request(1), func(*backend.Response, bool) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stream of a client that left: %v", err)
	}
	<-be.got
	r := be.reqs[0]
	if !r.Sender.Cancelled() || r.Sender.Send(&backend.Response{}, true) == nil {
		t.Error("the sender of a request whose client left must report it cancelled and refuse sends")
	}
	if st := s.Stats(); st.Failures[Canceled] != 1 || s.pending.Load() != 0 {
		t.Errorf("cancelled stream: failures %v, pending %d", st.Failures, s.pending.Load())
	}
	// A request the backend never finishes is finished by the unload.
	done := make(chan error, 1)
	var last *backend.Response
	var finals int
	go func() {
		done <- s.Stream(context.Background(), int32Request(1), func(r *backend.Response, final bool) error {
			if final {
				finals++
				last = r
			}
			return nil
		})
	}()
	<-be.got
	uctx, ucancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer ucancel()
	_ = s.Close(uctx)
	if err := <-done; err != nil || finals != 1 || last == nil || last.Err == nil || !strings.Contains(last.Err.Error(), "was unloaded before the request received its final response") {
		t.Errorf("open request at unload: err %v, finals %d, last %+v", err, finals, last)
	}
}
