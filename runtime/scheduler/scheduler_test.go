package scheduler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func linearSpec(name string, maxBatch int, params map[string]string) *backend.ModelSpec {
	return &backend.ModelSpec{
		Name: name, Version: 1, MaxBatchSize: maxBatch, Parameters: params,
		Inputs:  []backend.TensorSpec{{Name: "X", DataType: backend.FP32, Dims: []int64{2}}},
		Outputs: []backend.TensorSpec{{Name: "Y", DataType: backend.FP32, Dims: []int64{3}}},
	}
}

func rowsRequest(rows int, base float32) *backend.Request {
	data := make([]byte, rows*2*4)
	for i := 0; i < rows*2; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(base+float32(i)))
	}
	return &backend.Request{Inputs: []backend.Tensor{{Name: "X", DataType: backend.FP32, Shape: []int64{int64(rows), 2}, Data: data}}}
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func TestDynamicBatchingGroupsRequestsAndAnswersEachOwnRows(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("m", 16, map[string]string{"fake_delay_us": "2000"}), Config{
		Name: "m", MaxBatchSize: 16, Instances: 1,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{8}, MaxQueueDelay: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for c := 0; c < 24; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rows := 1 + c%3
			req := rowsRequest(rows, float32(c*10))
			resp, err := s.Infer(context.Background(), req)
			if err != nil {
				errs <- err
				return
			}
			want := fake.Linear(floats(req.Inputs[0].Data), 2, 3)
			got := floats(resp.Outputs[0].Data)
			if len(got) != len(want) {
				errs <- errors.New("wrong number of output values")
				return
			}
			for i := range want {
				if got[i] != want[i] {
					errs <- errors.New("a client got rows that are not its own")
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.InferenceCount != 48 { // 8 clients each of 1, 2 and 3 rows
		t.Errorf("inference count %d, want 48", st.InferenceCount)
	}
	if st.ExecutionCount >= 24 {
		t.Errorf("no batching happened: %d executions for 24 requests", st.ExecutionCount)
	}
	for _, b := range be.Batches("m") {
		if b > 16 {
			t.Errorf("batch of %d rows exceeds max_batch_size 16", b)
		}
	}
	if st.Success.Count != 24 || st.Queue.Count != 24 || st.ComputeInfer.Count != 24 {
		t.Errorf("request-level counts: %+v", st)
	}
	var execs uint64
	for _, b := range st.Batches {
		execs += b.ComputeInfer.Count
	}
	if execs != st.ExecutionCount {
		t.Errorf("batch stats count %d executions, execution_count is %d", execs, st.ExecutionCount)
	}
}

func TestQueueFullIsUnavailable(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("q", 4, map[string]string{"fake_delay_us": "50000"}), Config{
		Name: "q", MaxBatchSize: 4, Instances: 1,
		Dynamic: &Dynamic{Levels: []QueuePolicy{{MaxQueueSize: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	rejected := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Infer(context.Background(), rowsRequest(4, 0))
			var be *backend.Error
			if errors.As(err, &be) && be.Code == backend.Unavailable {
				mu.Lock()
				rejected++
				mu.Unlock()
			} else if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if rejected == 0 {
		t.Error("a queue of 1 with 8 concurrent full-batch requests must reject some")
	}
	if st := s.Stats(); st.Fail.Count != uint64(rejected) {
		t.Errorf("fail count %d, rejected %d", st.Fail.Count, rejected)
	}
}

func TestWithoutDynamicBatchingEachRequestRunsAlone(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("single", 8, nil), Config{Name: "single", MaxBatchSize: 8, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Infer(context.Background(), rowsRequest(2, 1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, b := range be.Batches("single") {
		if b != 2 {
			t.Fatalf("batches %v: every execution should be one request of 2 rows", be.Batches("single"))
		}
	}
	if be.Instances("single") != 2 {
		t.Errorf("instances %d", be.Instances("single"))
	}
}

func TestErrorsAndBatchSizeLimits(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("e", 4, nil), Config{Name: "e", MaxBatchSize: 4, Dynamic: &Dynamic{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Infer(context.Background(), rowsRequest(5, 0)); err == nil {
		t.Error("batch of 5 over max_batch_size 4 must fail")
	}
	resp, err := s.Infer(context.Background(), rowsRequest(1, fake.FailValue))
	if err != nil || resp.Err == nil {
		t.Errorf("per-request backend error should come back in the response: %v %v", resp, err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Infer(context.Background(), rowsRequest(1, 0))
	var bErr *backend.Error
	if !errors.As(err, &bErr) || bErr.Code != backend.Unavailable {
		t.Errorf("after Close: %v", err)
	}

	failing, err := New(context.Background(), be, linearSpec("f", 4, map[string]string{"fake_fail": "execute"}), Config{Name: "f", MaxBatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer failing.Close(context.Background())
	if _, err := failing.Infer(context.Background(), rowsRequest(1, 0)); !errors.As(err, &bErr) || bErr.Code != backend.Internal {
		t.Errorf("failed execution: %v", err)
	}
	if st := failing.Stats(); st.Fail.Count != 1 || st.Success.Count != 0 {
		t.Errorf("stats after failure: %+v", st)
	}
}

func TestCloseDrainsAcceptedRequests(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("d", 4, map[string]string{"fake_delay_us": "20000"}), Config{Name: "d", MaxBatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { _, err := s.Infer(context.Background(), rowsRequest(1, 0)); done <- err }()
	}
	waitPending(t, s, 3)
	// The drain waits for the last answer's wake-up (unpend), not a
	// clock: a lost one would run into this deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-done; err != nil {
			t.Errorf("accepted request failed during drain: %v", err)
		}
	}
}

// countingBackend records which instance ran each batch.
type countingBackend struct {
	mu    sync.Mutex
	runs  map[int]int
	delay time.Duration // per Execute
}

type countingInstance struct {
	be  *countingBackend
	idx int
}

func (b *countingBackend) NewInstance(_ context.Context, _ *backend.ModelSpec, idx int) (backend.Instance, error) {
	return &countingInstance{be: b, idx: idx}, nil
}

func (in *countingInstance) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	in.be.mu.Lock()
	in.be.runs[in.idx]++
	in.be.mu.Unlock()
	time.Sleep(in.be.delay)
	return emptyResponses(len(reqs)), nil
}

// emptyResponses answers n requests with no outputs, for test backends
// that only count or hold executions.
func emptyResponses(n int) []*backend.Response {
	resps := make([]*backend.Response, n)
	for i := range resps {
		resps[i] = &backend.Response{}
	}
	return resps
}

func (in *countingInstance) Close() error { return nil }

// TestSequentialRequestsStayOnOneInstance: one client at a time finds every
// instance idle, and the most recently idle one (the one that just
// answered) takes the next request, instead of the requests rotating over
// instances whose caches (or python stubs) have gone cold.
func TestSequentialRequestsStayOnOneInstance(t *testing.T) {
	be := &countingBackend{runs: map[int]int{}}
	s, err := New(context.Background(), be, linearSpec("m", 0, nil), Config{Name: "m", Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := s.Infer(context.Background(), rowsRequest(1, 0)); err != nil {
			t.Fatal(err)
		}
		// Let the worker that answered get back to waiting, as a client's
		// network round trip would.
		time.Sleep(time.Millisecond)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	most := 0
	for _, c := range be.runs {
		most = max(most, c)
	}
	if most < n*3/4 { // rotating over 4 instances would give each about n/4
		t.Fatalf("runs per instance %v: want one instance to take nearly all %d sequential requests", be.runs, n)
	}
}

// TestConcurrentRequestsUseEveryInstance: under load (executes that take a
// while) the handoff still spreads work over all instances, and every
// request is answered.
func TestConcurrentRequestsUseEveryInstance(t *testing.T) {
	be := &countingBackend{runs: map[int]int{}, delay: 200 * time.Microsecond}
	s, err := New(context.Background(), be, linearSpec("m", 0, map[string]string{}), Config{Name: "m", Instances: 3})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for c := 0; c < 12; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if _, err := s.Infer(context.Background(), rowsRequest(1, 0)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	total := 0
	for _, c := range be.runs {
		total += c
	}
	if total != 12*100 || len(be.runs) != 3 {
		t.Fatalf("runs per instance %v (total %d): want all 3 instances used and 1200 runs", be.runs, total)
	}
}

// waitingBackend's instances run until their context ends, as a python
// stub whose execute never returns does: they honour cancellation.
type waitingBackend struct{}

type waitingInstance struct{}

func (waitingBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return waitingInstance{}, nil
}

func (waitingInstance) Execute(ctx context.Context, _ []*backend.Request) ([]*backend.Response, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("waiting instance: %w", ctx.Err())
}

func (waitingInstance) Close() error { return nil }

// TestCloseCutsCancellableExecution: a request whose execution Close
// cancels at the drain deadline is answered Unavailable saying so, not with
// the backend's "context canceled" as a model failure.
func TestCloseCutsCancellableExecution(t *testing.T) {
	s, err := New(context.Background(), waitingBackend{}, linearSpec("w", 4, nil), Config{Name: "w", Version: 3, MaxBatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Infer(context.Background(), rowsRequest(1, 0)); done <- err }()
	waitPending(t, s, 1)
	time.Sleep(10 * time.Millisecond) // executing
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = s.Close(ctx)
	err = <-done
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.Unavailable || !strings.Contains(err.Error(), "model 'w' version 3 was unloaded while this request was executing") {
		t.Errorf("the cut request: %v, want Unavailable saying the model was unloaded", err)
	}
}

// gateBackend's instance records the input shapes of every batch; its
// first Execute tells started and waits for release.
type gateBackend struct {
	started, release chan struct{}
	mu               sync.Mutex
	batches          [][]string // per batch, each request's shape of X
	once             sync.Once
}

func (b *gateBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *gateBackend) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	b.once.Do(func() {
		close(b.started)
		<-b.release
	})
	var shapes []string
	resps := make([]*backend.Response, len(reqs))
	for i, r := range reqs {
		shapes = append(shapes, fmt.Sprint(r.Inputs[0].Shape))
		resps[i] = &backend.Response{}
	}
	b.mu.Lock()
	b.batches = append(b.batches, shapes)
	b.mu.Unlock()
	return resps, nil
}

func (b *gateBackend) Close() error { return nil }

// TestEqualShapesEndABatch: requests queued as [1,2], [1,3], [1,2], [1,3]
// form one batch when X allows ragged batches (no EqualShapes), and, as
// Triton's dynamic batcher does for an input with a variable dimension
// that does not, batches that never mix shapes otherwise.
func TestEqualShapesEndABatch(t *testing.T) {
	for _, equal := range []bool{false, true} {
		be := &gateBackend{started: make(chan struct{}), release: make(chan struct{})}
		cfg := Config{Name: "m", MaxBatchSize: 8, Instances: 1, Dynamic: &Dynamic{}}
		if equal {
			cfg.EqualShapes = []string{"X"}
		}
		s, err := New(context.Background(), be, linearSpec("m", 8, nil), cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := func(cols int64) *backend.Request {
			return &backend.Request{Inputs: []backend.Tensor{{Name: "X", DataType: backend.FP32, Shape: []int64{1, cols}, Data: make([]byte, 4*cols)}}}
		}
		out := make(chan answer, 5)
		var wg sync.WaitGroup
		send(s, "blocker", req(2), out, &wg)
		<-be.started
		for i, cols := range []int64{2, 3, 2, 3} {
			send(s, fmt.Sprint(i), req(cols), out, &wg)
			waitQueued(t, s, i+1)
		}
		close(be.release)
		wg.Wait()
		close(out)
		for a := range out {
			if a.err != nil {
				t.Fatalf("%s: %v", a.name, a.err)
			}
		}
		got := be.batches[1:]
		if !equal {
			if len(got) != 1 || len(got[0]) != 4 {
				t.Errorf("ragged: batches %v, want the four requests in one", got)
			}
		} else {
			if len(got) != 4 {
				t.Errorf("equal shapes: batches %v, want four (the queue alternates shapes)", got)
			}
			for _, b := range got {
				for _, sh := range b {
					if sh != b[0] {
						t.Errorf("equal shapes: a batch mixes %v", b)
					}
				}
			}
		}
		_ = s.Close(context.Background())
	}
}

// TestGatheringBatchTakesLaterRequests: while one instance gathers a
// batch, requests join it rather than starting a second batch on the idle
// instance, and the gathering worker closes the batch as soon as the
// queued rows reach a preferred size (notify), long before its delay:
// with two batches gathering side by side, neither would reach 4 rows
// and both would wait out the 30 s delay.
func TestGatheringBatchTakesLaterRequests(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("g", 16, nil), Config{
		Name: "g", MaxBatchSize: 16, Instances: 2,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if !s.lazy {
		t.Fatal("one level without a DELAY policy and a queue delay: the gathering worker should be woken lazily")
	}
	done := make(chan error, 4)
	send := func() {
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(1, 1))
			done <- err
		}()
	}
	send()
	for !s.isGathering() {
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		send()
	}
	timeout := time.After(20 * time.Second)
	for range 4 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("4 requests not answered in 20 s (batches so far %v): the batch did not close at its preferred size", be.Batches("g"))
		}
	}
	if b := be.Batches("g"); len(b) != 1 || b[0] != 4 {
		t.Fatalf("batches %v, want one batch of 4 rows", b)
	}
	if s.isGathering() {
		t.Error("a worker still announces a gathering batch after it executed")
	}
}

// TestExpiredDelayTakesWhatQueued: requests that joined a gathering batch
// through the queue without letting it close (no preferred size, short of
// max_batch_size) are still that batch's when its delay ends, as under
// Triton: three requests queued within the delay are one execution, not
// the first alone and the others after a second delay.
func TestExpiredDelayTakesWhatQueued(t *testing.T) {
	be := fake.New()
	const delay = time.Second
	s, err := New(context.Background(), be, linearSpec("e", 8, nil), Config{
		Name: "e", MaxBatchSize: 8, Instances: 1,
		Dynamic: &Dynamic{MaxQueueDelay: delay},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	done := make(chan error, 3)
	send := func() {
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(1, 1))
			done <- err
		}()
	}
	start := time.Now()
	send()
	for !s.isGathering() {
		time.Sleep(time.Millisecond)
	}
	send()
	send()
	// Both queued behind the gathering batch (the first left the queue).
	for s.queuedRows.Load() != 2 && time.Since(start) < delay {
		time.Sleep(time.Millisecond)
	}
	if time.Since(start) >= delay {
		t.Skip("the machine took longer than the queue delay to queue three requests")
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if b := be.Batches("e"); len(b) != 1 || b[0] != 3 {
		t.Fatalf("batches %v, want one batch of 3 rows", b)
	}
	if st := s.Stats(); st.ExecutionCount != 1 {
		t.Fatalf("execution count %d, want 1", st.ExecutionCount)
	}
}

// gatedBatches is a backend whose first Execute tells started and waits
// for release; each request gets an empty response.
type gatedBatches struct {
	started, release chan struct{}
	first            atomic.Bool
}

func (b *gatedBatches) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *gatedBatches) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	if b.first.CompareAndSwap(false, true) { // not a sync.Once: later calls must not wait for it
		close(b.started)
		<-b.release
	}
	return emptyResponses(len(reqs)), nil
}

func (b *gatedBatches) Close() error { return nil }

// TestCarriedRequestStartsNextBatchOnIdleInstance: a request that joined a
// gathering batch through the queue but did not fit it starts the next
// batch on the idle instance, as under Triton, rather than waiting for
// the instance that closed the batch to finish executing it: here b (2
// rows) does not fit a (3 rows, max 4) and, with c, is the next batch of
// 4 while a's execution is still held.
func TestCarriedRequestStartsNextBatchOnIdleInstance(t *testing.T) {
	be := &gatedBatches{started: make(chan struct{}), release: make(chan struct{})}
	s, err := New(context.Background(), be, linearSpec("c", 4, nil), Config{
		Name: "c", MaxBatchSize: 4, Instances: 2,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	defer close(be.release)
	send := func(rows int) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(rows, 1))
			done <- err
		}()
		return done
	}
	send(3)
	for !s.isGathering() {
		time.Sleep(time.Millisecond)
	}
	b := send(2)
	<-be.started // a executes alone: b did not fit
	c := send(2)
	timeout := time.After(20 * time.Second)
	for _, done := range []chan error{b, c} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("b and c not answered in 20 s while the first batch executes: the request that did not fit waits for the busy instance")
		}
	}
}

// TestLazyGatherStress: under the lazily woken batcher, with two
// instances, requests of 1-3 rows, a small queue bound, request timeouts
// and clients that leave, every request is answered, nothing stays
// queued or announced, and the statistics add up (each request counted
// once, success or failure; executions and inferences as executed).
func TestLazyGatherStress(t *testing.T) {
	be := fake.New()
	s, err := New(context.Background(), be, linearSpec("st", 8, map[string]string{"fake_delay_us": "100"}), Config{
		Name: "st", MaxBatchSize: 8, Instances: 2,
		Dynamic: &Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 300 * time.Microsecond,
			Levels: []QueuePolicy{{MaxQueueSize: 24, Timeout: time.Second, AllowOverride: true}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !s.lazy {
		t.Fatal("one REJECT level with a queue delay should be woken lazily")
	}
	const clients, each = 16, 150
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				req := rowsRequest(1+(c+n)%3, 1)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch n % 11 {
				case 3:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(n%5)*100*time.Microsecond)
				case 7:
					req.Timeout = time.Duration(n%4) * 200 * time.Microsecond
				}
				_, _ = s.Infer(ctx, req)
				cancel()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatalf("clients not answered in 60 s: %d pending, %d queued rows, gathering %v", s.pending.Load(), s.queuedRows.Load(), s.isGathering())
	}
	waitAnswered(t, s)
	if q := s.queuedRows.Load(); q != 0 || s.isGathering() || s.Queued() != 0 {
		t.Fatalf("after the last answer: %d queued rows, %d queued, gathering %v", q, s.Queued(), s.isGathering())
	}
	st := s.Stats()
	if got := st.Success.Count + st.Fail.Count; got != clients*each {
		t.Errorf("success %d + failed %d = %d, want %d requests", st.Success.Count, st.Fail.Count, got, clients*each)
	}
	batches := be.Batches("st")
	rows := 0
	for _, b := range batches {
		rows += b
	}
	if st.ExecutionCount != uint64(len(batches)) || st.InferenceCount != uint64(rows) {
		t.Errorf("executions %d, inferences %d; the backend ran %d batches of %d rows", st.ExecutionCount, st.InferenceCount, len(batches), rows)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutAtDispatchLeavesTheJobToItsCaller: a request whose REJECT
// timeout ends while its batch gathers is answered by the worker's
// dispatch when the worker gets there before the request's own timer; its
// caller then recycles the job at once, so the worker must not read it
// afterwards (the race detector sees the read). Which goroutine gets
// there first is up to the Go scheduler (one P, kept busy across both
// deadlines), so the scene is played several times.
func TestTimeoutAtDispatchLeavesTheJobToItsCaller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	be := fake.New()
	const delay = 20 * time.Millisecond
	s, err := New(context.Background(), be, linearSpec("td", 8, nil), Config{
		Name: "td", MaxBatchSize: 8, Instances: 1,
		// Two levels: every push wakes the gathering worker, which takes
		// the second request before its timeout ends.
		Dynamic: &Dynamic{MaxQueueDelay: delay, DefaultLevel: 1,
			Levels: []QueuePolicy{{Timeout: time.Minute, AllowOverride: true}, {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	const rounds = 25
	for range rounds {
		t0 := time.Now()
		first := make(chan error, 1)
		go func() {
			_, err := s.Infer(context.Background(), rowsRequest(1, 1))
			first <- err
		}()
		for s.Queued() != 0 || s.pending.Load() != 1 {
			time.Sleep(100 * time.Microsecond)
		}
		// Its timeout ends just before the batch's delay.
		req := rowsRequest(1, 2)
		req.Timeout = time.Until(t0.Add(delay - 2*time.Millisecond))
		second := make(chan error, 1)
		go func() {
			_, err := s.Infer(context.Background(), req)
			second <- err
		}()
		for s.Queued() != 0 || s.pending.Load() != 2 {
			time.Sleep(100 * time.Microsecond)
		}
		for time.Since(t0) < delay+10*time.Millisecond {
			// Busy: the timers run when this goroutine is preempted.
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err == nil {
			t.Fatal("the request whose timeout ended while its batch gathered was executed")
		}
		waitAnswered(t, s)
	}
	st := s.Stats()
	if b := be.Batches("td"); len(b) != rounds || st.InferenceCount != rounds {
		t.Fatalf("batches %v, inference count %d: want %d batches of the first request's row", b, st.InferenceCount, rounds)
	}
}

// TestBatchClosesAtTheLargestPreferredSize: as under Triton, a batch does
// not grow past its largest preferred size: a request that would carry it
// past (here 3 rows gathering, then 2, preferred 4, max 8) closes it at
// once instead of joining and waiting out the delay, and starts the next
// batch, which a third request of 2 then fills to 4.
func TestBatchClosesAtTheLargestPreferredSize(t *testing.T) {
	for _, lazy := range []bool{true, false} {
		dyn := Dynamic{PreferredBatchSizes: []int{4}, MaxQueueDelay: 30 * time.Second}
		if !lazy {
			// Two priority levels take the batcher out of lazy mode.
			dyn.Levels, dyn.DefaultLevel = []QueuePolicy{{}, {}}, 1
		}
		s, err := New(context.Background(), fake.New(), linearSpec("p", 8, nil), Config{Name: "p", MaxBatchSize: 8, Instances: 1, Dynamic: &dyn})
		if err != nil {
			t.Fatal(err)
		}
		send := func(rows int) chan error { return inferAsync(s, rows) }
		// The sleeps order the requests; the answers do not depend on
		// how long each took to arrive.
		a := send(3)
		time.Sleep(20 * time.Millisecond)
		b := send(2)
		time.Sleep(20 * time.Millisecond)
		c := send(2)
		timeout := time.After(10 * time.Second)
		for name, done := range map[string]chan error{"a (3 rows)": a, "b (2 rows)": b, "c (2 rows)": c} {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-timeout:
				t.Fatalf("lazy %v: %s not answered in 10 s: the batch grew past its largest preferred size and waits out its 30 s delay", lazy, name)
			}
		}
		var sizes []int
		for _, st := range s.Stats().Batches {
			for range st.ComputeInfer.Count {
				sizes = append(sizes, st.BatchSize)
			}
		}
		if !slices.Equal(sizes, []int{3, 4}) {
			t.Errorf("lazy %v: batches of %v rows, want [3 4]", lazy, sizes)
		}
		s.Close(context.Background())
	}
}

// TestBatchGoesAtTheLargestPreferredSizeQueued: as Triton's batcher does,
// a batch goes at once at the largest preferred size the queued requests
// reach; those queued beyond it, too few for the next preferred size, are
// left for a batch of their own instead of holding this one for the
// delay.
func TestBatchGoesAtTheLargestPreferredSizeQueued(t *testing.T) {
	for _, lazy := range []bool{true, false} {
		dyn := Dynamic{PreferredBatchSizes: []int{4, 8}, MaxQueueDelay: 30 * time.Second}
		if !lazy {
			dyn.Levels, dyn.DefaultLevel = []QueuePolicy{{}, {}}, 1
		}
		// Each execution takes 300 ms, so that requests queue behind one.
		spec := linearSpec("p", 8, map[string]string{"fake_delay_us": "300000"})
		s, err := New(context.Background(), fake.New(), spec, Config{Name: "p", MaxBatchSize: 8, Instances: 1, Dynamic: &dyn})
		if err != nil {
			t.Fatal(err)
		}
		send := func(rows int) chan error { return inferAsync(s, rows) }
		wait := func(what string, done chan error) {
			t.Helper()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("lazy %v: %s not answered in 10 s: its batch waits out the 30 s delay", lazy, what)
			}
		}
		busy := send(4) // a preferred size: executes at once
		time.Sleep(50 * time.Millisecond)
		var ones []chan error
		for range 5 { // queued behind it: four make a preferred size, one is left
			ones = append(ones, send(1))
			time.Sleep(20 * time.Millisecond)
		}
		wait("the first batch", busy)
		for i, done := range ones[:4] {
			wait(fmt.Sprintf("one-row request %d", i+1), done)
		}
		wait("the fifth and a three-row request (a preferred 4 together)", send(3))
		wait("the fifth one-row request", ones[4])
		var sizes []int
		for _, st := range s.Stats().Batches {
			for range st.ComputeInfer.Count {
				sizes = append(sizes, st.BatchSize)
			}
		}
		if !slices.Equal(sizes, []int{4, 4, 4}) {
			t.Errorf("lazy %v: batches of %v rows, want [4 4 4]", lazy, sizes)
		}
		s.Close(context.Background())
	}
}

// inferAsync sends a request of rows rows to s and returns where its
// error (nil when it was answered with a response) will arrive.
func inferAsync(s *Scheduler, rows int) chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := s.Infer(context.Background(), rowsRequest(rows, 1))
		if err == nil {
			err = resp.Err
		}
		done <- err
	}()
	return done
}
