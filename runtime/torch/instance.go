package torch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Options configure a Backend.
type Options struct {
	// Logger receives warnings that do not fail a load (for example an
	// inter-op thread count that libtorch can no longer change). Nil
	// discards them.
	Logger *slog.Logger
}

// Backend loads TorchScript models. It is safe for concurrent use.
type Backend struct {
	log *slog.Logger
	// mu serializes process-wide changes (op libraries, inter-op threads).
	mu sync.Mutex
	// blas reports libtorch's BLAS once, at the first model loaded.
	blas sync.Once
}

// New returns the libtorch backend. In a build without cgo or the libtorch
// tag it still works as a value, but every NewInstance fails with
// NotBuiltMessage.
func New(opts Options) *Backend {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{log: log}
}

var _ backend.Backend = (*Backend)(nil)

// NewInstance loads op libraries, then the model file, and checks the
// module's forward() signature against the config.
func (b *Backend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	where := fmt.Sprintf("model %q version %d instance %d", spec.Name, spec.Version, idx)
	for _, ts := range spec.Inputs {
		if err := checkSupported(ts.DataType); err != nil {
			return nil, backend.Errorf(backend.Unsupported, "%s: input %q: %w", where, ts.Name, err)
		}
	}
	for _, ts := range spec.SequenceInputs {
		if err := checkSupported(ts.DataType); err != nil {
			return nil, backend.Errorf(backend.Unsupported, "%s: sequence_batching input %q: %w", where, ts.Name, err)
		}
	}
	for _, ts := range append(slices.Clone(spec.Outputs), spec.SequenceOutputs...) {
		if err := checkSupported(ts.DataType); err != nil {
			return nil, backend.Errorf(backend.Unsupported, "%s: output %q: %w", where, ts.Name, err)
		}
	}
	intra, err := threadParam(spec.Parameters, ParamIntraOpThreads)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
	}
	inter, err := threadParam(spec.Parameters, ParamInterOpThreads)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
	}

	noOpt, err := boolParam(spec.Parameters, ParamDisableOptimizedExecution, false)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
	}
	inferenceMode, err := boolParam(spec.Parameters, ParamInferenceMode, true)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
	}
	timeout, err := secondsParam(spec.Parameters, ParamExecuteTimeout)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
	}

	if err := b.prepareProcess(ctx, where, spec, inter); err != nil {
		return nil, err
	}
	opts := ModuleOptions{
		Path:                      modelPath(spec),
		IntraOpThreads:            intra,
		DisableOptimizedExecution: noOpt,
		DisableInferenceMode:      !inferenceMode,
	}
	var (
		mod    *Module
		fwd    forwarder
		placed *placedForwarder
	)
	if policy := spec.InstancePolicy(idx); policy.IsZero() {
		if mod, err = LoadModule(opts); err != nil {
			return nil, wrapErr(where, err)
		}
		fwd = mod
	} else {
		// Loaded on the instance's thread, so that the module's weights
		// come from the policy's NUMA node.
		var loadErr error
		placed, err = placeForwards(policy, func() (forwarder, error) {
			mod, loadErr = LoadModule(opts)
			return mod, loadErr
		})
		switch {
		case loadErr != nil:
			return nil, wrapErr(where, loadErr)
		case err != nil:
			return nil, backend.Errorf(backend.InvalidArg, "%s: %w", where, err)
		}
		fwd = placed
	}
	inst, err := newInstance(spec, fwd, mod.InputNames(), mod.NumRequiredInputs(), mod.NumOutputs())
	if err != nil {
		if placed != nil {
			placed.stop()
		}
		_ = mod.Close()
		return nil, backend.Errorf(backend.InvalidArg, "%s (%s): %w", where, modelPath(spec), err)
	}
	inst.close = mod.Close
	inst.placed = placed
	inst.timeout = timeout
	b.blas.Do(b.reportBLAS)
	return inst, nil
}

// reportBLAS logs the BLAS under libtorch's matrix products, and warns when
// it is not a tuned one: a distribution's libtorch links libblas.so.3,
// which is netlib's reference BLAS unless an optimized one is installed,
// and a Linear layer then runs about ten times slower (docs/performance.md).
func (b *Backend) reportBLAS() {
	name, tuned := BLAS()
	switch {
	case name == "":
	case tuned:
		b.log.Info("libtorch BLAS", "blas", name)
	default:
		b.log.Warn("libtorch BLAS is not a tuned one: matrix products (Linear layers) run several times slower; on Debian or Ubuntu install libopenblas0-openmp", "blas", name)
	}
}

// prepareProcess applies the process-wide settings a model needs: its op
// libraries and the inter-op thread count. The module itself is loaded
// outside the lock, so models load in parallel.
func (b *Backend) prepareProcess(ctx context.Context, where string, spec *backend.ModelSpec, inter int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, lib := range opLibraries(spec) {
		if err := LoadLibrary(ctx, lib); err != nil {
			return wrapErr(where, err)
		}
	}
	if inter > 0 {
		if err := SetInterOpThreads(inter); err != nil {
			var be *backend.Error
			if !asBackendError(err, &be) || be.Code != backend.Unsupported {
				return wrapErr(where, err)
			}
			// Process-wide and already fixed: the model still runs correctly.
			b.log.Warn("inter-op thread count not applied", "model", spec.Name, "version", spec.Version, "err", err)
		}
	}
	return nil
}

func asBackendError(err error, target **backend.Error) bool {
	return errors.As(err, target)
}

// wrapErr prefixes a backend error's message with where, keeping its code
// and the error itself as the cause.
func wrapErr(where string, err error) error {
	var be *backend.Error
	if asBackendError(err, &be) {
		return backend.Errorf(be.Code, "%s: %w", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// forwarder runs one forward() on positional inputs; *Module is the real
// one, tests use a pure-Go stand-in for the batching logic.
type forwarder interface {
	Forward(inputs []backend.Tensor) ([]backend.Tensor, error)
}

// instance is one loaded module plus what the config says about it.
type instance struct {
	name     string
	fwd      forwarder
	close    func() error
	inputs   []backend.TensorSpec
	outputs  []backend.TensorSpec
	inPos    []int // config input -> forward() position
	outPos   []int // config output -> element of forward()'s result
	inIndex  map[string]int
	outIndex map[string]int
	maxBatch int
	// Per forward() position: flat marks a ragged input (allow_ragged_batch),
	// passed as the 1-D concatenation of the batch's elements; derived is
	// the index in batchIns of the batch input filling it, -1 for inputs
	// the requests carry. batchPos lists each batch input's positions.
	flat      []bool
	derived   []int
	batchIns  []backend.BatchInput
	batchPos  [][]int
	batchOuts map[int]*backend.BatchOutput // config output -> its batch_output
	// placeholder holds a batch input's position in a prepared request
	// until its group's forward computes the tensor.
	placeholder backend.Tensor
	// Reused across Execute calls (never concurrent on one instance), so
	// that a one-request Execute allocates little besides its response.
	scratch [][]byte // per forward() position, for concatenated inputs
	args    []backend.Tensor
	prep    []prepared    // one per request of the current Execute
	ok      []*prepared   // the requests that passed validation
	groups  [][]*prepared // the current Execute's forwards
	allOuts []int         // every config output, for requests naming none (read only)
	// timeout bounds one forward (ParamExecuteTimeout; 0: none). stuck is
	// set once a forward outlived it: that forward still holds the module.
	timeout time.Duration
	stuck   atomic.Bool
	// placed is the confined thread the forwards run on under a host
	// policy (fwd then hands them to it); nil: the caller's.
	placed *placedForwarder
}

// errStuck is what a retired instance answers.
func (in *instance) errStuck() error {
	return backend.Errorf(backend.Unavailable, "model %q: an earlier forward() of this instance ran past %s (%s) and still runs; reload the model", in.name, in.timeout, ParamExecuteTimeout)
}

// Healthy reports the instance as unable to serve once a forward outlived
// the execute timeout.
func (in *instance) Healthy() error {
	if in.stuck.Load() {
		return in.errStuck()
	}
	return nil
}

// forward runs one forward(), bounded by the execute timeout when there is
// one. On timeout the forward keeps running on its own goroutine (libtorch
// cannot be interrupted; its inputs stay pinned until it returns) and the
// instance is retired.
func (in *instance) forward(args []backend.Tensor) ([]backend.Tensor, error) {
	if in.timeout <= 0 {
		return in.fwd.Forward(args)
	}
	type result struct {
		res []backend.Tensor
		err error
	}
	done := make(chan result, 1)
	own := slices.Clone(args) // the caller clears args when it returns
	go func() {
		res, err := in.fwd.Forward(own)
		done <- result{res, err}
	}()
	t := time.NewTimer(in.timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-t.C:
		in.stuck.Store(true)
		return nil, backend.Errorf(backend.Unavailable, "model %q: forward() did not return within %s (%s); the instance is retired", in.name, in.timeout, ParamExecuteTimeout)
	}
}

func newInstance(spec *backend.ModelSpec, fwd forwarder, forwardNames []string, required, declaredOutputs int) (*instance, error) {
	// Batch inputs are forward() arguments like the config's inputs, after
	// them (Triton's libtorch backend places them by the same naming rules).
	// The sequence batcher's control and state inputs follow (Triton's
	// libtorch backend counts them among forward()'s arguments too), and
	// the state outputs the config does not list follow its outputs.
	inputs, outputs := spec.Inputs, spec.Outputs
	if len(spec.BatchInputs) > 0 || len(spec.SequenceInputs) > 0 {
		inputs = slices.Clone(spec.Inputs)
		for _, bi := range spec.BatchInputs {
			for _, t := range bi.Targets {
				inputs = append(inputs, backend.TensorSpec{Name: t, DataType: bi.DataType, Dims: []int64{-1}})
			}
		}
		inputs = append(inputs, spec.SequenceInputs...)
	}
	if len(spec.SequenceOutputs) > 0 {
		outputs = append(slices.Clone(spec.Outputs), spec.SequenceOutputs...)
	}
	// Control inputs sit where their `<name>__<index>` says, whatever
	// rule places the others, and must have one: Triton's libtorch
	// backend refuses any other name, with this text.
	var pinned map[int]int
	first := len(inputs) - len(spec.SequenceInputs)
	for k, c := range spec.SequenceInputs[:spec.SequenceControls] {
		idx, ok := controlIndex(c.Name)
		if !ok {
			return nil, backend.Errorf(backend.Internal, "input '%s' does not follow <name>__<index> naming convention.", c.Name)
		}
		if pinned == nil {
			pinned = map[int]int{}
		}
		pinned[first+k] = idx
	}
	inPos, err := inputPositions(inputs, forwardNames, required, pinned)
	if err != nil {
		return nil, err
	}
	outPos, err := outputPositions(outputs, declaredOutputs)
	if err != nil {
		return nil, err
	}
	inst := &instance{
		name:     spec.Name,
		fwd:      fwd,
		inputs:   inputs,
		outputs:  outputs,
		inPos:    inPos,
		outPos:   outPos,
		inIndex:  map[string]int{},
		outIndex: map[string]int{},
		maxBatch: spec.MaxBatchSize,
		scratch:  make([][]byte, len(inputs)),
		args:     make([]backend.Tensor, len(inputs)),
		flat:     make([]bool, len(inputs)),
		derived:  make([]int, len(inputs)),
		batchIns: spec.BatchInputs,
	}
	// The config's inputs and the sequence batcher's come from requests;
	// batch inputs are derived.
	for i, ts := range spec.Inputs {
		inst.inIndex[ts.Name] = i
		inst.flat[inPos[i]] = ts.Ragged
	}
	for k, ts := range spec.SequenceInputs {
		inst.inIndex[ts.Name] = len(inputs) - len(spec.SequenceInputs) + k
	}
	for pos := range inst.derived {
		inst.derived[pos] = -1
	}
	ci := len(spec.Inputs)
	for b, bi := range spec.BatchInputs {
		var ps []int
		for range bi.Targets {
			inst.derived[inPos[ci]] = b
			ps = append(ps, inPos[ci])
			ci++
		}
		inst.batchPos = append(inst.batchPos, ps)
	}
	for b := range spec.BatchOutputs {
		bo := &spec.BatchOutputs[b]
		for _, t := range bo.Targets {
			for j, o := range spec.Outputs {
				if o.Name == t {
					if inst.batchOuts == nil {
						inst.batchOuts = map[int]*backend.BatchOutput{}
					}
					inst.batchOuts[j] = bo
				}
			}
		}
	}
	for i, ts := range outputs {
		inst.outIndex[ts.Name] = i
		inst.allOuts = append(inst.allOuts, i)
	}
	return inst, nil
}

// Close frees the module; calling it again is harmless. A retired
// instance's module is still in use by its forward and is not freed.
func (in *instance) Close() error {
	if in.close == nil {
		return nil
	}
	if in.placed != nil {
		// No forward follows; a stuck one keeps the thread until it
		// returns, and then the thread ends.
		in.placed.stop()
	}
	if in.stuck.Load() {
		in.close = nil
		return fmt.Errorf("model %q: instance left loaded: a forward() past %s still runs", in.name, ParamExecuteTimeout)
	}
	c := in.close
	in.close = nil
	return c()
}

// prepared is a validated request: its tensors in forward() order.
type prepared struct {
	req   int
	r     *backend.Request
	args  []*backend.Tensor // forward() position -> tensor; length = args passed
	batch int64             // dim 0 when batching, else 0
	key   string            // non-batch shapes: requests with equal keys can be concatenated (set by group)
	outs  []int             // config outputs to return (in.allOuts when the request names none)
}

// prepare validates request i into p, reusing p's argument slice.
func (in *instance) prepare(p *prepared, i int, req *backend.Request) error {
	args := p.args
	if cap(args) < len(in.inputs) {
		args = make([]*backend.Tensor, len(in.inputs))
	}
	args = args[:len(in.inputs)]
	clear(args)
	*p = prepared{req: i, r: req, args: args, batch: -1}
	if err := in.fill(p, req); err != nil {
		clear(p.args)
		return err
	}
	return nil
}

func (in *instance) fill(p *prepared, req *backend.Request) error {
	for k := range req.Inputs {
		t := &req.Inputs[k]
		ci, ok := in.inIndex[t.Name]
		if !ok {
			return backend.Errorf(backend.InvalidArg, "unexpected inference input %q for model %q", t.Name, in.name)
		}
		pos := in.inPos[ci]
		if p.args[pos] != nil {
			return backend.Errorf(backend.InvalidArg, "input %q given twice for model %q", t.Name, in.name)
		}
		if err := in.checkInput(&in.inputs[ci], t); err != nil {
			return err
		}
		if in.maxBatch > 0 {
			if p.batch >= 0 && t.Shape[0] != p.batch {
				return backend.Errorf(backend.InvalidArg,
					"model %q: input %q has batch size %d but other inputs have %d", in.name, t.Name, t.Shape[0], p.batch)
			}
			p.batch = t.Shape[0]
		}
		p.args[pos] = t
	}
	for _, ps := range in.batchPos {
		for _, pos := range ps {
			p.args[pos] = &in.placeholder
		}
	}
	// Arguments are positional: only a trailing run of optional inputs may
	// be left out (forward() must then have defaults for them).
	n := len(p.args)
	for n > 0 && p.args[n-1] == nil {
		n--
	}
	for pos := 0; pos < len(p.args); pos++ {
		if p.args[pos] != nil {
			continue
		}
		ci := in.configIndexAt(pos)
		if !in.inputs[ci].Optional {
			return backend.Errorf(backend.InvalidArg, "expected input %q for model %q is missing", in.inputs[ci].Name, in.name)
		}
		if pos < n {
			return backend.Errorf(backend.InvalidArg,
				"model %q: optional input %q may be left out only together with every later forward() argument", in.name, in.inputs[ci].Name)
		}
	}
	p.args = p.args[:n]
	if p.batch < 0 {
		p.batch = 0
	}
	if len(req.Outputs) == 0 {
		p.outs = in.allOuts
	} else {
		p.outs = make([]int, 0, len(req.Outputs))
		for _, name := range req.Outputs {
			j, ok := in.outIndex[name]
			if !ok {
				return backend.Errorf(backend.InvalidArg, "unexpected inference output %q for model %q", name, in.name)
			}
			p.outs = append(p.outs, j)
		}
	}
	return nil
}

// shapeKey is the key of requests whose tensors can be concatenated: the
// argument count and the non-batch dimensions of each argument.
func (in *instance) shapeKey(p *prepared) string {
	var key strings.Builder
	key.WriteString(strconv.Itoa(len(p.args)))
	for pos, t := range p.args {
		key.WriteByte('|')
		if in.flat[pos] || in.derived[pos] >= 0 {
			// Ragged inputs batch whatever their shapes; batch inputs are
			// computed for the group.
			key.WriteByte('r')
			continue
		}
		dims := t.Shape
		if in.maxBatch > 0 {
			dims = dims[1:]
		}
		for _, d := range dims {
			key.WriteString(strconv.FormatInt(d, 10))
			key.WriteByte(',')
		}
	}
	return key.String()
}

func (in *instance) configIndexAt(pos int) int {
	for ci, p := range in.inPos {
		if p == pos {
			return ci
		}
	}
	return -1
}

// checkInput validates one tensor against its config entry.
func (in *instance) checkInput(ts *backend.TensorSpec, t *backend.Tensor) error {
	if t.DataType != ts.DataType {
		return backend.Errorf(backend.InvalidArg, "model %q: input %q has data type %s, expected %s", in.name, t.Name, t.DataType, ts.DataType)
	}
	dims := t.Shape
	if in.maxBatch > 0 {
		if len(dims) == 0 {
			return backend.Errorf(backend.InvalidArg, "model %q: input %q needs a batch dimension (max_batch_size %d)", in.name, t.Name, in.maxBatch)
		}
		if b := dims[0]; b < 1 || b > int64(in.maxBatch) {
			return backend.Errorf(backend.InvalidArg, "model %q: input %q has batch size %d, allowed 1..%d", in.name, t.Name, b, in.maxBatch)
		}
		dims = dims[1:]
	} else if len(dims) == len(ts.Dims)+1 && dims[0] >= 1 {
		// One leading dimension more than a non-batching model declares:
		// the repository lets it through unless --strict-input-shapes (the
		// field report's client sends [2,10] for dims [10]), and forward()
		// takes the tensor as it is.
		dims = dims[1:]
	}
	if !shapeMatches(dims, ts.Dims) {
		want := ts.Dims
		if in.maxBatch > 0 {
			want = append([]int64{-1}, ts.Dims...)
		}
		return backend.Errorf(backend.InvalidArg, "model %q: input %q has shape %v, expected %v", in.name, t.Name, t.Shape, want)
	}
	// BYTES elements were counted by the repository (Triton's string-element
	// check); libtorch's side parses them again into the List[str].
	if need := t.NumElements() * int64(t.DataType.Size()); t.DataType != backend.Bytes && int64(len(t.Data)) != need {
		return backend.Errorf(backend.InvalidArg, "model %q: input %q has %d bytes of data, shape %v of %s needs %d",
			in.name, t.Name, len(t.Data), t.Shape, t.DataType, need)
	}
	return nil
}

func shapeMatches(got, want []int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] < 0 || (want[i] >= 0 && got[i] != want[i]) {
			return false
		}
	}
	return true
}

// Execute validates every request on its own (a bad request fails alone),
// groups the rest into forwards and splits the results back.
func (in *instance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	if in.stuck.Load() {
		return nil, in.errStuck()
	}
	resps := make([]*backend.Response, len(reqs))
	for len(in.prep) < len(reqs) {
		in.prep = append(in.prep, prepared{})
	}
	ok := in.ok[:0]
	for i, r := range reqs {
		p := &in.prep[i]
		if err := in.prepare(p, i, r); err != nil {
			resps[i] = &backend.Response{Err: err}
			continue
		}
		ok = append(ok, p)
	}
	defer func() {
		// Keep no references to request data between calls.
		for i := range reqs {
			clear(in.prep[i].args)
		}
		clear(ok)
		in.ok = ok[:0]
	}()
	for _, g := range in.group(ok) {
		if in.stuck.Load() {
			for _, p := range g {
				resps[p.req] = &backend.Response{Err: in.errStuck()}
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			for _, p := range g {
				resps[p.req] = &backend.Response{Err: backend.Errorf(backend.Unavailable, "model %q: %w", in.name, err)}
			}
			continue
		}
		outs, err := in.run(g)
		for k, p := range g {
			if err != nil {
				resps[p.req] = &backend.Response{Err: err}
			} else {
				resps[p.req] = &backend.Response{Outputs: outs[k]}
			}
		}
	}
	return resps, nil
}

// group partitions requests into forwards: without batching one each; with
// it, requests with equal non-batch shapes, in arrival order, up to
// max_batch_size rows per forward.
//
// The result and its groups are reused by the next call.
func (in *instance) group(ps []*prepared) [][]*prepared {
	groups := in.groups[:0]
	defer func() { in.groups = groups }()
	if in.maxBatch <= 0 || len(ps) <= 1 {
		for i := range ps {
			groups = append(groups, ps[i:i+1:i+1])
		}
		return groups
	}
	open := map[string]int{} // key -> index of the group still accepting rows
	rows := map[int]int64{}
	for _, p := range ps {
		p.key = in.shapeKey(p)
		gi, has := open[p.key]
		if has && rows[gi]+p.batch <= int64(in.maxBatch) {
			groups[gi] = append(groups[gi], p)
			rows[gi] += p.batch
			continue
		}
		groups = append(groups, []*prepared{p})
		open[p.key] = len(groups) - 1
		rows[len(groups)-1] = p.batch
	}
	return groups
}

// run executes one group and returns each request's outputs.
func (in *instance) run(g []*prepared) ([][]backend.Tensor, error) {
	nargs := len(g[0].args)
	args := in.args[:nargs]
	var total int64
	for _, p := range g {
		total += p.batch
	}
	for pos := range args {
		switch {
		case in.derived[pos] >= 0:
			continue // below
		case len(g) == 1:
			// Zero copy: the request's own buffers go to libtorch.
			args[pos] = *g[0].args[pos]
			if in.flat[pos] {
				args[pos].Shape = []int64{args[pos].NumElements()}
			}
		default:
			first := g[0].args[pos]
			size := 0
			for _, p := range g {
				size += len(p.args[pos].Data)
			}
			buf := in.scratch[pos]
			if cap(buf) < size {
				buf = make([]byte, size)
				in.scratch[pos] = buf
			}
			buf = buf[:0]
			for _, p := range g {
				buf = append(buf, p.args[pos].Data...)
			}
			shape := append([]int64{total}, first.Shape[1:]...)
			if in.flat[pos] {
				var n int64
				for _, p := range g {
					n += p.args[pos].NumElements()
				}
				shape = []int64{n}
			}
			args[pos] = backend.Tensor{Name: first.Name, DataType: first.DataType, Shape: shape, Data: buf}
		}
	}
	var reqs []*backend.Request
	if len(in.batchIns) > 0 || len(in.batchOuts) > 0 {
		reqs = make([]*backend.Request, len(g))
		for k, p := range g {
			reqs[k] = p.r
		}
	}
	for b := range in.batchIns {
		t, err := in.batchInput(b, reqs)
		if err != nil {
			return nil, err
		}
		for _, pos := range in.batchPos[b] {
			if pos < len(args) {
				args[pos] = t
				args[pos].Name = in.inputs[in.configIndexAt(pos)].Name
			}
		}
	}
	res, err := in.forward(args)
	for pos := range args {
		args[pos] = backend.Tensor{} // keep no references to request data
	}
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("model %q", in.name), err)
	}
	// One backing array for every request's outputs.
	n := 0
	for _, p := range g {
		n += len(p.outs)
	}
	all := make([]backend.Tensor, 0, n)
	out := make([][]backend.Tensor, len(g))
	for k, p := range g {
		out[k] = all[len(all) : len(all) : len(all)+len(p.outs)]
		all = all[:len(all)+len(p.outs)]
	}
	for j, spec := range in.outputs {
		needed := false
		for _, p := range g {
			for _, o := range p.outs {
				needed = needed || o == j
			}
		}
		if !needed {
			continue
		}
		mi := in.outPos[j]
		if mi >= len(res) {
			return nil, backend.Errorf(backend.Internal, "model %q: output %q is element %d of forward()'s result, which has %d", in.name, spec.Name, mi, len(res))
		}
		t := res[mi]
		if t.DataType != spec.DataType {
			return nil, backend.Errorf(backend.Internal, "model %q: forward() returned %s for output %q, config declares %s", in.name, t.DataType, spec.Name, spec.DataType)
		}
		if bo := in.batchOuts[j]; bo != nil {
			parts, err := bo.Scatter(t, spec.Dims, reqs, in.maxBatch > 0)
			if err != nil {
				return nil, backend.Errorf(backend.Internal, "model %q: %w", in.name, err)
			}
			for k, p := range g {
				if wants(p.outs, j) {
					parts[k].Name = spec.Name
					out[k] = append(out[k], parts[k])
				}
			}
			continue
		}
		if in.maxBatch <= 0 {
			t.Name = spec.Name
			for k, p := range g {
				if wants(p.outs, j) {
					out[k] = append(out[k], t)
				}
			}
			continue
		}
		if len(t.Shape) == 0 || t.Shape[0] != total {
			return nil, backend.Errorf(backend.Internal, "model %q: output %q has shape %v, expected batch dimension %d", in.name, spec.Name, t.Shape, total)
		}
		if t.DataType == backend.Bytes && len(g) > 1 {
			t.Name = spec.Name
			// A List[str] output has one string per batch row (Triton's
			// libtorch backend answers each request with shape [rows]).
			if err := splitBytes(t, g, j, out); err != nil {
				return nil, backend.Errorf(backend.Internal, "model %q: %w", in.name, err)
			}
			continue
		}
		if len(g) == 1 {
			// The whole output is the one request's: no split.
			t.Name = spec.Name
			if wants(g[0].outs, j) {
				out[0] = append(out[0], t)
			}
			continue
		}
		rowBytes := int64(len(t.Data)) / total
		var off int64
		for k, p := range g {
			n := p.batch * rowBytes
			if wants(p.outs, j) {
				shape := append([]int64{p.batch}, t.Shape[1:]...)
				out[k] = append(out[k], backend.Tensor{Name: spec.Name, DataType: t.DataType, Shape: shape, Data: t.Data[off : off+n : off+n]})
			}
			off += n
		}
	}
	// Return outputs in the order each request asked for them.
	for k, p := range g {
		out[k] = orderOutputs(out[k], p.outs, in.outputs)
	}
	return out, nil
}

// splitBytes hands each request of g its rows of t, a 1-D BYTES output with
// one element per row of the group, when it asked for output j.
func splitBytes(t backend.Tensor, g []*prepared, j int, out [][]backend.Tensor) error {
	data := t.Data
	for k, p := range g {
		n := 0
		for range p.batch {
			if len(data)-n < 4 {
				return fmt.Errorf("output %q: BYTES data ends inside an element", t.Name)
			}
			l := int(binary.LittleEndian.Uint32(data[n:]))
			if l > len(data)-n-4 {
				return fmt.Errorf("output %q: BYTES element longer than the data", t.Name)
			}
			n += 4 + l
		}
		if wants(p.outs, j) {
			out[k] = append(out[k], backend.Tensor{Name: t.Name, DataType: backend.Bytes, Shape: []int64{p.batch}, Data: data[:n:n]})
		}
		data = data[n:]
	}
	return nil
}

// batchInput computes batch input b for a group's requests: the
// concatenation of their pieces along the first dimension.
func (in *instance) batchInput(b int, reqs []*backend.Request) (backend.Tensor, error) {
	bi := &in.batchIns[b]
	pieces, err := bi.Pieces(reqs, in.maxBatch > 0)
	if err != nil {
		return backend.Tensor{}, backend.Errorf(backend.InvalidArg, "model %q: %w", in.name, err)
	}
	var rows int64
	size := 0
	for _, p := range pieces {
		rows += p.Shape[0]
		size += len(p.Data)
	}
	data := make([]byte, 0, size)
	for _, p := range pieces {
		data = append(data, p.Data...)
	}
	shape := append([]int64{rows}, pieces[0].Shape[1:]...)
	return backend.Tensor{DataType: bi.DataType, Shape: shape, Data: data}, nil
}

func wants(outs []int, j int) bool {
	for _, o := range outs {
		if o == j {
			return true
		}
	}
	return false
}

// orderOutputs arranges ts (in config order) in the order of outs.
func orderOutputs(ts []backend.Tensor, outs []int, specs []backend.TensorSpec) []backend.Tensor {
	if len(ts) <= 1 {
		return ts
	}
	ordered := make([]backend.Tensor, 0, len(outs))
	for _, j := range outs {
		for _, t := range ts {
			if t.Name == specs[j].Name {
				ordered = append(ordered, t)
				break
			}
		}
	}
	return ordered
}
