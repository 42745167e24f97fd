// Package fake is a pure-Go backend.Backend for tests and benchmarks of the
// serving core. It computes real outputs (so that tests can check every
// client gets its own rows back) without libtorch or python.
//
// Behaviour is chosen per model through config.pbtxt parameters:
//
//	fake_mode      "linear" (default): OUTPUT = INPUT x W + b on FP32 rows,
//	               with the fixed W and b of Linear; "identity": output i is
//	               a copy of input i (any data type, BYTES included);
//	               "repeat" (for model_transaction_policy { decoupled:
//	               true }): the first input holds INT32 elements, and for
//	               each element the request gets one response whose first
//	               output is that element (INT32, shape [1]), sent from a
//	               goroutine after Execute returned, then the final flag
//	               alone; an element equal to FailValue is sent as an
//	               error response instead.
//	               "accumulate" (for sequence_batching): a stateful
//	               model; the first input holds one INT32 element, the
//	               first output (INT32, the input's shape) is the sum of
//	               the inputs of the sequence so far. It reads the control
//	               inputs named START, READY and END (any data type, non-zero
//	               is true) and CORRID (UINT64 or BYTES): the state is kept
//	               per correlation id when CORRID is fed, else per batch row
//	               (the direct strategy's slot); START resets it, END drops
//	               it, and a row with READY false is left alone.
//	               "statesum" (for sequence_batching with implicit
//	               state): a model that keeps nothing itself; the first
//	               output (INT32, shape of the first input) and the output
//	               STATE_OUT are the sum of the first input's elements and
//	               of the input STATE_IN's, the state the server carries.
//	fake_delay_us  sleep this long per Execute call (simulated compute).
//	fake_load_delay_us  sleep this long in NewInstance (a slow load); the
//	               load's context ends the wait.
//	fake_fail      "load": NewInstance fails; "execute": every Execute fails;
//	               "hang": every Execute blocks, ignoring its context, until
//	               Backend.Release (a forward that never returns).
//	fake_fail_version  NewInstance fails for this version only (a load
//	               that loads some versions of a model and not others).
//
// In linear mode a request whose first input element is -999 gets its own
// error response, leaving the rest of its batch intact.
package fake

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// FailValue as the first element of a linear request makes that request fail.
const FailValue = -999

// Backend is the fake backend. The zero value is not usable; call New.
type Backend struct {
	hang    chan struct{} // closed by Release
	release sync.Once
	mu      sync.Mutex
	batches map[string][]int // model name -> batch sizes executed, in order
	rows    map[string][]int // model name -> rows with READY true per execution (accumulate mode)
	loads   map[string]int   // model name -> instances created
	// running Execute calls of every model now, and the most at once.
	running, peak int
}

// New returns an empty fake backend.
func New() *Backend {
	return &Backend{batches: map[string][]int{}, rows: map[string][]int{}, loads: map[string]int{}, hang: make(chan struct{})}
}

// ReadyRows returns, per execution of an accumulate model so far, how
// many of its rows had READY true.
func (b *Backend) ReadyRows(model string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.rows[model]...)
}

// Release lets every hanging Execute (fake_fail "hang") return.
func (b *Backend) Release() { b.release.Do(func() { close(b.hang) }) }

// Batches returns the batch sizes (rows summed over requests) that instances
// of model executed so far, in order.
func (b *Backend) Batches(model string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.batches[model]...)
}

// PeakExecutions returns the most Execute calls, of all models of the
// backend, that ran at the same time so far.
func (b *Backend) PeakExecutions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// Instances returns how many instances of model were created.
func (b *Backend) Instances(model string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loads[model]
}

// SupportsDecoupled implements backend.DecoupledSupporter: the repeat
// mode serves decoupled models.
func (b *Backend) SupportsDecoupled() bool { return true }

// NewInstance implements backend.Backend.
func (b *Backend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inst := &instance{be: b, spec: spec, mode: spec.Parameters["fake_mode"]}
	if inst.mode == "" {
		inst.mode = "linear"
	}
	switch inst.mode {
	case "linear":
		if len(spec.Inputs) != 1 || len(spec.Outputs) != 1 || spec.Inputs[0].DataType != backend.FP32 ||
			spec.Outputs[0].DataType != backend.FP32 || len(spec.Inputs[0].Dims) == 0 || len(spec.Outputs[0].Dims) == 0 {
			return nil, backend.Errorf(backend.InvalidArg, "fake linear model %q needs one FP32 input and one FP32 output", spec.Name)
		}
		inst.k = int(spec.Inputs[0].Dims[len(spec.Inputs[0].Dims)-1])
		inst.n = int(spec.Outputs[0].Dims[len(spec.Outputs[0].Dims)-1])
		if inst.k <= 0 || inst.n <= 0 {
			return nil, backend.Errorf(backend.InvalidArg, "fake linear model %q needs fixed last dimensions", spec.Name)
		}
	case "repeat":
		if len(spec.Inputs) < 1 || len(spec.Outputs) < 1 || spec.Inputs[0].DataType != backend.Int32 || spec.Outputs[0].DataType != backend.Int32 {
			return nil, backend.Errorf(backend.InvalidArg, "fake repeat model %q needs an INT32 first input and an INT32 first output", spec.Name)
		}
	case "accumulate":
		if len(spec.Inputs) < 1 || len(spec.Outputs) < 1 || spec.Inputs[0].DataType != backend.Int32 || spec.Outputs[0].DataType != backend.Int32 {
			return nil, backend.Errorf(backend.InvalidArg, "fake accumulate model %q needs an INT32 first input and an INT32 first output", spec.Name)
		}
		inst.state = map[string]int32{}
	case "statesum":
		if len(spec.Inputs) < 1 || len(spec.Outputs) < 1 || spec.Inputs[0].DataType != backend.Int32 || spec.Outputs[0].DataType != backend.Int32 {
			return nil, backend.Errorf(backend.InvalidArg, "fake statesum model %q needs an INT32 first input and an INT32 first output", spec.Name)
		}
	case "identity":
		if len(spec.Outputs) > len(spec.Inputs) {
			return nil, backend.Errorf(backend.InvalidArg, "fake identity model %q has more outputs than inputs", spec.Name)
		}
	default:
		return nil, backend.Errorf(backend.InvalidArg, "fake model %q: unknown fake_mode %q", spec.Name, inst.mode)
	}
	if d := spec.Parameters["fake_delay_us"]; d != "" {
		us, err := strconv.Atoi(d)
		if err != nil || us < 0 {
			return nil, backend.Errorf(backend.InvalidArg, "fake model %q: bad fake_delay_us %q", spec.Name, d)
		}
		inst.delay = time.Duration(us) * time.Microsecond
	}
	if d := spec.Parameters["fake_load_delay_us"]; d != "" {
		us, err := strconv.Atoi(d)
		if err != nil || us < 0 {
			return nil, backend.Errorf(backend.InvalidArg, "fake model %q: bad fake_load_delay_us %q", spec.Name, d)
		}
		t := time.NewTimer(time.Duration(us) * time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if v := spec.Parameters["fake_fail_version"]; v != "" && v == strconv.FormatInt(spec.Version, 10) {
		return nil, backend.Errorf(backend.Internal, "fake model %q: version %s failed to load as configured", spec.Name, v)
	}
	switch spec.Parameters["fake_fail"] {
	case "load":
		return nil, backend.Errorf(backend.Internal, "fake model %q: instance %d failed to load as configured", spec.Name, idx)
	case "execute":
		inst.failExec = true
	case "hang":
		inst.hang = true
	}
	b.mu.Lock()
	b.loads[spec.Name]++
	b.mu.Unlock()
	return inst, nil
}

type instance struct {
	be       *Backend
	spec     *backend.ModelSpec
	mode     string
	k, n     int
	delay    time.Duration
	failExec bool
	hang     bool
	state    map[string]int32 // accumulate mode: sum per correlation id or row
}

func (in *instance) Close() error { return nil }

func (in *instance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	rows := 0
	for _, r := range reqs {
		if len(r.Inputs) > 0 && len(r.Inputs[0].Shape) > 0 && in.spec.MaxBatchSize > 0 {
			rows += int(r.Inputs[0].Shape[0])
		} else {
			rows++
		}
	}
	in.be.mu.Lock()
	in.be.batches[in.spec.Name] = append(in.be.batches[in.spec.Name], rows)
	in.be.running++
	in.be.peak = max(in.be.peak, in.be.running)
	in.be.mu.Unlock()
	defer func() {
		in.be.mu.Lock()
		in.be.running--
		in.be.mu.Unlock()
	}()
	if in.delay > 0 {
		t := time.NewTimer(in.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if in.hang {
		<-in.be.hang
		return nil, backend.Errorf(backend.Internal, "fake model %q: released from a hang", in.spec.Name)
	}
	if in.failExec {
		return nil, backend.Errorf(backend.Internal, "fake model %q: execute failed as configured", in.spec.Name)
	}
	if in.mode == "repeat" {
		for _, r := range reqs {
			if r.Sender == nil {
				return nil, backend.Errorf(backend.Internal, "fake repeat model %q is not decoupled (no sender)", in.spec.Name)
			}
			go in.repeat(r)
		}
		return nil, nil
	}
	out := make([]*backend.Response, len(reqs))
	if in.mode == "accumulate" {
		ready := 0
		for i, r := range reqs {
			var ok bool
			out[i], ok = in.accumulate(i, r)
			if ok {
				ready++
			}
		}
		in.be.mu.Lock()
		in.be.rows[in.spec.Name] = append(in.be.rows[in.spec.Name], ready)
		in.be.mu.Unlock()
		return out, nil
	}
	for i, r := range reqs {
		switch in.mode {
		case "linear":
			out[i] = in.linear(r)
		case "statesum":
			out[i] = in.statesum(r)
		default:
			out[i] = in.identity(r)
		}
	}
	return out, nil
}

// statesum serves one request of the statesum mode.
func (in *instance) statesum(r *backend.Request) *backend.Response {
	var sum int32
	state := r.Input("STATE_IN")
	if state == nil || state.DataType != backend.Int32 {
		return &backend.Response{Err: backend.Errorf(backend.InvalidArg, "fake statesum: no INT32 input STATE_IN")}
	}
	for _, t := range []*backend.Tensor{&r.Inputs[0], state} {
		for k := 0; k+4 <= len(t.Data); k += 4 {
			sum += int32(binary.LittleEndian.Uint32(t.Data[k:]))
		}
	}
	shape := append([]int64(nil), r.Inputs[0].Shape...)
	data := binary.LittleEndian.AppendUint32(nil, uint32(sum))
	return &backend.Response{Outputs: []backend.Tensor{
		{Name: in.spec.Outputs[0].Name, DataType: backend.Int32, Shape: shape, Data: data},
		{Name: "STATE_OUT", DataType: backend.Int32, Shape: shape, Data: data},
	}}
}

func (in *instance) linear(r *backend.Request) *backend.Response {
	if len(r.Inputs) != 1 {
		return &backend.Response{Err: backend.Errorf(backend.InvalidArg, "fake linear: want 1 input, got %d", len(r.Inputs))}
	}
	x := r.Inputs[0]
	if len(x.Data)%(4*in.k) != 0 {
		return &backend.Response{Err: backend.Errorf(backend.InvalidArg, "fake linear: %d bytes is not a whole number of rows of %d", len(x.Data), in.k)}
	}
	if len(x.Data) >= 4 && math.Float32frombits(binary.LittleEndian.Uint32(x.Data)) == FailValue {
		return &backend.Response{Err: backend.Errorf(backend.Internal, "fake linear: request asked to fail")}
	}
	rows := len(x.Data) / (4 * in.k)
	xs := make([]float32, rows*in.k)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
	}
	ys := Linear(xs, in.k, in.n)
	data := make([]byte, 4*len(ys))
	for i, v := range ys {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	shape := append([]int64(nil), x.Shape...)
	shape[len(shape)-1] = int64(in.n)
	return &backend.Response{Outputs: []backend.Tensor{{Name: in.spec.Outputs[0].Name, DataType: backend.FP32, Shape: shape, Data: data}}}
}

// repeat answers one request of the decoupled mode. The input data is
// copied first: it belongs to the request only until Execute returns.
func (in *instance) repeat(r *backend.Request) {
	data := append([]byte(nil), r.Inputs[0].Data...)
	name := in.spec.Outputs[0].Name
	for i := 0; i+4 <= len(data); i += 4 {
		v := int32(binary.LittleEndian.Uint32(data[i:]))
		resp := &backend.Response{Outputs: []backend.Tensor{{Name: name, DataType: backend.Int32, Shape: []int64{1}, Data: append([]byte(nil), data[i:i+4]...)}}}
		if v == FailValue {
			resp = &backend.Response{Err: backend.Errorf(backend.Internal, "fake repeat: element %d asked to fail", i/4)}
		}
		if err := r.Sender.Send(resp, false); err != nil {
			return // the client went away
		}
	}
	_ = r.Sender.Send(nil, true)
}

// accumulate serves row i of an accumulate batch; ok is READY.
func (in *instance) accumulate(i int, r *backend.Request) (resp *backend.Response, ok bool) {
	flag := func(name string, absent bool) bool {
		if t := r.Input(name); t != nil {
			return slices.ContainsFunc(t.Data, func(b byte) bool { return b != 0 })
		}
		return absent
	}
	key := "row " + strconv.Itoa(i)
	if t := r.Input("CORRID"); t != nil {
		key = "corrid " + string(t.Data)
	}
	if !flag("READY", true) {
		return &backend.Response{}, false
	}
	x := r.Inputs[0]
	if x.DataType != backend.Int32 || len(x.Data) != 4 {
		return &backend.Response{Err: backend.Errorf(backend.InvalidArg, "fake accumulate: want one INT32 element")}, true
	}
	if flag("START", false) {
		delete(in.state, key)
	}
	sum := in.state[key] + int32(binary.LittleEndian.Uint32(x.Data))
	if flag("END", false) {
		delete(in.state, key)
	} else {
		in.state[key] = sum
	}
	data := binary.LittleEndian.AppendUint32(nil, uint32(sum))
	return &backend.Response{Outputs: []backend.Tensor{{Name: in.spec.Outputs[0].Name, DataType: backend.Int32, Shape: append([]int64(nil), x.Shape...), Data: data}}}, true
}

func (in *instance) identity(r *backend.Request) *backend.Response {
	byName := make(map[string]*backend.Tensor, len(r.Inputs))
	for i := range r.Inputs {
		byName[r.Inputs[i].Name] = &r.Inputs[i]
	}
	var outs []backend.Tensor
	for i, o := range in.spec.Outputs {
		src := byName[in.spec.Inputs[i].Name]
		if src == nil {
			continue // optional input absent: no output either
		}
		outs = append(outs, backend.Tensor{
			Name: o.Name, DataType: src.DataType,
			Shape: append([]int64(nil), src.Shape...), Data: append([]byte(nil), src.Data...),
		})
	}
	return &backend.Response{Outputs: outs}
}

// Weight is W[i][j] of the linear mode; tests use it to compute expectations.
func Weight(i, j int) float32 { return float32((i+1)*(j+2)%7-3) / 8 }

// Bias is b[j] of the linear mode.
func Bias(j int) float32 { return float32(j) / 4 }

// Linear computes y = x W + b for rows of length k, giving rows of length n.
func Linear(x []float32, k, n int) []float32 {
	rows := len(x) / k
	y := make([]float32, rows*n)
	for r := 0; r < rows; r++ {
		for j := 0; j < n; j++ {
			s := Bias(j)
			for i := 0; i < k; i++ {
				s += x[r*k+i] * Weight(i, j)
			}
			y[r*n+j] = s
		}
	}
	return y
}
