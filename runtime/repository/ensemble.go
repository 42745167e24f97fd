package repository

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// Ensembles (platform "ensemble"): a DAG of steps, each a request to
// another model through Manager.Infer, so every step is scheduled, batched
// and counted by its own model's scheduler. The ensemble itself is served
// by an internal backend whose instances run the DAG; its scheduler gives
// it validation, statistics and both frontends like any model.

// ensemblePlatform is Triton's platform name for ensembles.
const ensemblePlatform = "ensemble"

// ensembleInstances is how many requests of one ensemble run at a time;
// each waits on its steps, whose own schedulers bound the work.
const ensembleInstances = 64

// ensembleStep is one validated step.
type ensembleStep struct {
	model   string
	version int64             // -1: the highest ready version
	inputs  map[string]string // model input -> ensemble tensor
	outputs map[string]string // model output -> ensemble tensor
}

// ensembleBackend runs the ensemble of one manager.
type ensembleBackend struct {
	m     *Manager
	name  string
	steps []ensembleStep
	outs  []string // the ensemble's outputs, in config order
	// batching is the ensemble's max_batch_size > 0; outDims are its
	// outputs' dims, optional its optional inputs.
	batching bool
	outDims  map[string][]int64
	optional map[string]bool
}

func (b *ensembleBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b *ensembleBackend) Close() error { return nil }

// Execute runs each request's DAG; requests of one batch run concurrently.
func (b *ensembleBackend) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	out := make([]*backend.Response, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.run(ctx, r)
		}()
	}
	wg.Wait()
	return out, nil
}

// run executes the steps of one request as their inputs become available,
// independent steps concurrently. Tensors are passed on without copies.
func (b *ensembleBackend) run(ctx context.Context, r *backend.Request) *backend.Response {
	name := b.name
	if r.Ctx != nil {
		// The steps run under the client's context, so that its
		// cancellation or deadline reaches them (a python step's
		// is_cancelled(), a step still queued), as well as under the
		// ensemble's own, which ends at unload.
		cctx, cancel := context.WithCancel(r.Ctx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		ctx = cctx
	}
	// As in Triton's EnsembleContext, each tensor keeps the batch size of
	// the request that made it (0: made without batching), so that a
	// tensor can pass between models that batch and models that do not
	// (reshapeTensorDims); an optional ensemble input the client left out,
	// and a step output the model did not produce, are present as absent
	// tensors, which a step's request leaves out.
	tensors := make(map[string]backend.Tensor, len(r.Inputs))
	batches := make(map[string]int64, len(r.Inputs))
	absent := map[string]bool{}
	var reqBatch int64
	for _, t := range r.Inputs {
		tensors[t.Name] = t
		if b.batching && len(t.Shape) > 0 {
			reqBatch = t.Shape[0]
		}
	}
	for _, t := range r.Inputs {
		batches[t.Name] = reqBatch
	}
	for name := range b.optional {
		if _, ok := tensors[name]; !ok {
			absent[name] = true
		}
	}
	done := make([]bool, len(b.steps))
	for left := len(b.steps); left > 0; {
		var wave []int
		for i, st := range b.steps {
			if done[i] {
				continue
			}
			ready := true
			for _, src := range st.inputs {
				if _, ok := tensors[src]; !ok && !absent[src] {
					ready = false
				}
			}
			if ready {
				wave = append(wave, i)
			}
		}
		if len(wave) == 0 {
			// Validated at load (absent tensors count as present): not reached.
			return &backend.Response{Err: backend.Errorf(backend.InvalidArg, "in ensemble '%s', the inputs of the remaining steps are not available", name)}
		}
		results := make([]*backend.Response, len(wave))
		outBatch := make([]int64, len(wave))
		errs := make([]error, len(wave))
		var wg sync.WaitGroup
		for k, i := range wave {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[k], outBatch[k], errs[k] = b.step(ctx, &b.steps[i], r, tensors, batches)
			}()
		}
		wg.Wait()
		for k, i := range wave {
			if errs[k] != nil {
				return &backend.Response{Err: stepError(name, errs[k])}
			}
			st := &b.steps[i]
			for _, t := range results[k].Outputs {
				if dst, ok := st.outputs[t.Name]; ok {
					t.Name = dst
					tensors[dst] = t
					batches[dst] = outBatch[k]
				}
			}
			for _, dst := range st.outputs {
				if _, ok := tensors[dst]; !ok {
					absent[dst] = true
				}
			}
			done[i] = true
			left--
		}
	}
	resp := &backend.Response{}
	want := r.Outputs
	if len(want) == 0 {
		want = b.outs
	}
	for _, o := range want {
		if t, ok := tensors[o]; ok {
			t.Shape = reshapeTensorDims(b.outDims[o], b.batching && reqBatch != 0, batches[o], t.Shape)
			resp.Outputs = append(resp.Outputs, t)
		}
	}
	return resp
}

// reshapeTensorDims is Triton's EnsembleContext::ReshapeTensorDims: the
// shape, dims, of a tensor made with batch size batch (0: without
// batching) as a model (or the ensemble's output) whose config declares
// config dims expects it. A tensor made without batching for one that
// batches gets a batch dimension of 1 when its shape is the config's; a
// batch of 1 for one that does not batch loses its batch dimension when
// the shape with it does not fit the config. Otherwise the shape stays.
func reshapeTensorDims(config []int64, batching bool, batch int64, dims []int64) []int64 {
	if batching == (batch != 0) {
		return dims
	}
	if batching {
		if dimsMatch(config, dims) {
			return append([]int64{1}, dims...)
		}
	} else if !dimsMatch(config, dims) && batch == 1 && len(dims) > 0 {
		return dims[1:]
	}
	return dims
}

// dimsMatch is Triton's CompareDimsWithWildcard: the same rank, and each
// dimension equal or -1 on either side.
func dimsMatch(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && a[i] != -1 && b[i] != -1 {
			return false
		}
	}
	return true
}

// step runs one step of request r and returns its response and the batch
// size of its outputs (0 when the step's model does not batch).
func (b *ensembleBackend) step(ctx context.Context, st *ensembleStep, r *backend.Request, tensors map[string]backend.Tensor, batches map[string]int64) (*backend.Response, int64, error) {
	mod, err := b.m.Get(st.model, st.version)
	if err != nil {
		return nil, 0, err
	}
	batching := mod.Spec.MaxBatchSize > 0
	// As Triton's EnsembleContext::InitStep: the step's request has the
	// ensemble request's id, parameters, correlation, priority and timeout.
	req := &backend.Request{ID: r.ID, Parameters: r.Parameters, Sequence: r.Sequence, Priority: r.Priority, Timeout: r.Timeout}
	var batch int64
	for dst, src := range st.inputs {
		t, ok := tensors[src]
		if !ok {
			continue // absent: the model's input is optional, or it refuses the request
		}
		t.Name = dst
		if spec, ok := mod.Input(dst); ok {
			t.Shape = reshapeTensorDims(spec.Dims, batching, batches[src], t.Shape)
		}
		if batching && len(t.Shape) > 0 {
			batch = t.Shape[0]
		}
		req.Inputs = append(req.Inputs, t)
	}
	for o := range st.outputs {
		req.Outputs = append(req.Outputs, o)
	}
	slices.Sort(req.Outputs)
	_, resp, err := b.m.Infer(ctx, mod, st.version, req, time.Now())
	return resp, batch, err
}

// stepError prefixes a step's error as Triton does, keeping its code.
func stepError(ensemble string, err error) error {
	code := backend.Internal
	var be *backend.Error
	if errors.As(err, &be) {
		code = be.Code
	}
	return &backend.Error{Code: code, Msg: fmt.Sprintf("in ensemble '%s', %s", ensemble, err.Error()), Err: err}
}

// stepUnavailableError refuses an ensemble whose step model has no ready
// version. Polling retries such an ensemble once its models are back
// (modelEntry.awaitsSteps), as Triton's repository manager retries a model
// with missing upstreams.
type stepUnavailableError struct {
	ensemble, step string
	err            error
}

func (e *stepUnavailableError) Error() string {
	return fmt.Sprintf("ensemble '%s' depends on '%s' which is not available: %v", e.ensemble, e.step, e.err)
}

func (e *stepUnavailableError) Unwrap() error { return e.err }

// stepsReady reports whether every step model of the ensemble called name,
// as its config on disk names them, has a ready version.
func (m *Manager) stepsReady(name string) bool {
	steps := m.diskConfig(name).GetEnsembleScheduling().GetStep()
	for _, s := range steps {
		v := s.GetModelVersion()
		if v == 0 {
			v = -1
		}
		if _, err := m.Get(s.GetModelName(), v); err != nil {
			return false
		}
	}
	return len(steps) > 0
}

// graphTensor is an ensemble tensor in Triton's static graph of an
// ensemble (BuildEnsembleGraph): prev are the tensors the step writing it
// reads, next the tensors written by the steps reading it.
type graphTensor struct {
	name       string
	written    bool // in some step's output_map
	ready      bool // computable from the ensemble's inputs
	prev, next []*graphTensor
}

// checkEnsembleScheduling validates the configuration of an ensemble on its
// own, before any composing model is looked at, as Triton's
// ValidateModelConfig and ValidateEnsembleSchedulingConfig do, with their
// texts: ensemble_scheduling present; no instance_group, optimization or
// model_warmup; at least one step, each
// with a model_name, an input_map and an output_map; a tensor in one
// output_map only; every ensemble input read by a step; every ensemble
// output written by steps whose inputs come from the ensemble's inputs;
// every other tensor so written and also read.
func checkEnsembleScheduling(cfg *modelconfig.ModelConfig) error {
	name := cfg.GetName()
	if cfg.GetEnsembleScheduling() == nil {
		return fmt.Errorf("ensemble scheduling must be set for ensemble %s whose platform is %s", name, ensemblePlatform)
	}
	if len(cfg.GetInstanceGroup()) != 0 {
		return fmt.Errorf("instance group should not be specified for ensemble '%s'", name)
	}
	if cfg.GetOptimization() != nil {
		return fmt.Errorf("optimization should not be specified for ensemble '%s'", name)
	}
	if len(cfg.GetModelWarmup()) != 0 {
		return fmt.Errorf("model_warmup can not be specified for ensemble '%s'", name)
	}
	steps := cfg.GetEnsembleScheduling().GetStep()
	if len(steps) == 0 {
		return fmt.Errorf("must specify 'step' for ensemble '%s'", name)
	}
	tensors := map[string]*graphTensor{}
	tensor := func(n string) *graphTensor {
		t := tensors[n]
		if t == nil {
			t = &graphTensor{name: n}
			tensors[n] = t
		}
		return t
	}
	// Maps are walked in key order, so that of several faults the same
	// one is reported every time.
	for i, s := range steps {
		switch {
		case s.GetModelName() == "":
			return fmt.Errorf("must specify 'model_name' in step %d of ensemble '%s'", i, name)
		case len(s.GetInputMap()) == 0:
			return fmt.Errorf("must specify 'input_map' in step %d of ensemble '%s'", i, name)
		case len(s.GetOutputMap()) == 0:
			return fmt.Errorf("must specify 'output_map' in step %d of ensemble '%s'", i, name)
		}
		var outs []*graphTensor
		for _, k := range slices.Sorted(maps.Keys(s.GetOutputMap())) {
			t := tensor(s.GetOutputMap()[k])
			if t.written {
				return fmt.Errorf("ensemble tensor '%s' can appear in an output map only once for ensemble '%s' step %d", t.name, name, i)
			}
			t.written = true
			outs = append(outs, t)
		}
		for _, k := range slices.Sorted(maps.Keys(s.GetInputMap())) {
			in := tensor(s.GetInputMap()[k])
			for _, o := range outs {
				o.prev = append(o.prev, in)
				in.next = append(in.next, o)
			}
		}
	}
	var queue []*graphTensor
	for _, in := range cfg.GetInput() {
		t := tensors[in.GetName()]
		if t == nil {
			return fmt.Errorf("ensemble input '%s' for ensemble %s' is not used", in.GetName(), name) // Triton's text, its stray quote included
		}
		t.ready = true
		queue = append(queue, t)
	}
	for ; len(queue) > 0; queue = queue[1:] {
		for _, n := range queue[0].next {
			if !n.ready && !slices.ContainsFunc(n.prev, func(p *graphTensor) bool { return !p.ready }) {
				n.ready = true
				queue = append(queue, n)
			}
		}
	}
	outputs := map[string]bool{}
	for _, out := range cfg.GetOutput() {
		t := tensors[out.GetName()]
		if t == nil {
			return fmt.Errorf("ensemble output '%s' for ensemble %s' is not used", out.GetName(), name) // Triton's text
		}
		if !t.ready {
			msg := fmt.Sprintf("output '%s' for ensemble '%s' is not written", t.name, name)
			if src := unconnectedSource(t); src != t {
				msg += fmt.Sprintf(": at least one of its depending tensors, '%s', is not connected", src.name)
			}
			return errors.New(msg)
		}
		outputs[t.name] = true
	}
	for _, n := range slices.Sorted(maps.Keys(tensors)) {
		if t := tensors[n]; !outputs[n] && (!t.ready || len(t.next) == 0) {
			return fmt.Errorf("ensemble tensor '%s' is unused in ensemble '%s'", n, name)
		}
	}
	return nil
}

// unconnectedSource follows, from a tensor that cannot be computed, the
// first such tensor among those it is made from, and so on, and returns
// the last one reached: the tensor Triton names as "not connected" (t
// itself when none is found).
func unconnectedSource(t *graphTensor) *graphTensor {
	last, seen := t, map[string]bool{}
	for prev := t.prev; len(prev) > 0; {
		nodes := prev
		prev = nil
		for _, p := range nodes {
			if !p.ready && !seen[p.name] {
				seen[p.name] = true
				last, prev = p, p.prev
				break
			}
		}
	}
	return last
}

// tensorUse is what one model (the ensemble or a step's) makes of an
// ensemble tensor: its data type, its dims, and its full shape (with a -1
// batch dimension when that model batches).
type tensorUse struct {
	model string
	dt    modelconfig.DataType
	dims  []int64
	full  []int64
}

func newTensorUse(model string, batching bool, dt modelconfig.DataType, dims []int64) tensorUse {
	full := dims
	if batching {
		full = append([]int64{-1}, dims...)
	}
	return tensorUse{model: model, dt: dt, dims: dims, full: full}
}

// useTensor records use u of ensemble tensor name in tensors, checking it
// against the first use recorded as Triton's ValidateTensorConsistency
// does, with its texts: the same data type, and dims that match (-1
// matching any size) either as they are or as full shapes, so that a
// tensor may pass between a model that batches, [d0,...], and one that
// does not, [-1,d0,...].
func useTensor(ensemble, name string, tensors map[string]tensorUse, u tensorUse) error {
	have, ok := tensors[name]
	if !ok {
		tensors[name] = u
		return nil
	}
	prefix := fmt.Sprintf("in ensemble %s, ensemble tensor %s: ", ensemble, name)
	if have.dt != u.dt {
		return fmt.Errorf("%sinconsistent data type: %s is inferred from model %s while %s is inferred from model %s", prefix, have.dt, have.model, u.dt, u.model)
	}
	if !dimsMatch(have.dims, u.dims) && !dimsMatch(have.full, u.full) {
		return fmt.Errorf("%sinconsistent shape: %s is inferred from model %s while %s is inferred from model %s", prefix, FormatShape(have.full), have.model, FormatShape(u.full), u.model)
	}
	return nil
}

// mapStep checks step s of ensemble against the configuration of its
// loaded model mod as Triton's ValidateTensorMapping does, with its texts:
// every input_map key an input of the model, every input the model
// requires mapped, every output_map key an output of the model, and each
// mapped tensor consistent with its other uses (useTensor).
func mapStep(ensemble string, s *modelconfig.ModelEnsembling_Step, mod *Model, tensors map[string]tensorUse) error {
	cfg := mod.Config
	batching := cfg.GetMaxBatchSize() > 0
	for _, k := range slices.Sorted(maps.Keys(s.GetInputMap())) {
		if _, ok := mod.Input(k); !ok {
			return fmt.Errorf("in ensemble %s, ensemble tensor %s is mapping to non-existing input %s in model %s", ensemble, s.GetInputMap()[k], k, mod.Name)
		}
	}
	for _, in := range cfg.GetInput() {
		t, ok := s.GetInputMap()[in.GetName()]
		if !ok {
			if in.GetOptional() {
				continue
			}
			return fmt.Errorf("in ensemble %s, input %s in model %s is not mapped to any ensemble tensors", ensemble, in.GetName(), mod.Name)
		}
		if err := useTensor(ensemble, t, tensors, newTensorUse(mod.Name, batching, in.GetDataType(), in.GetDims())); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.GetOutputMap())) {
		if _, ok := mod.Output(k); !ok {
			return fmt.Errorf("in ensemble %s, ensemble tensor %s is mapped from non-existing output %s in model %s", ensemble, s.GetOutputMap()[k], k, mod.Name)
		}
	}
	for _, out := range cfg.GetOutput() {
		if t, ok := s.GetOutputMap()[out.GetName()]; ok {
			if err := useTensor(ensemble, t, tensors, newTensorUse(mod.Name, batching, out.GetDataType(), out.GetDims())); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateEnsemble checks cfg, whose graph checkEnsembleScheduling
// validated, against its loaded composing models, as Triton's
// ValidateEnsembleConfig does at load: every step's model available, a
// composing model that batches allowing the ensemble's batch size, and the
// steps' mappings (mapStep), each tensor's data type and shape consistent
// across the ensemble's own inputs and outputs (inputs and outputs, in
// the backend's view: their reshape when they have one) and the steps
// that read or write it. Beyond Triton it refuses a cycle of ensembles,
// decoupled composing models, and a step writing an ensemble input.
func (m *Manager) validateEnsemble(cfg *modelconfig.ModelConfig, inputs, outputs []backend.TensorSpec) (*ensembleBackend, error) {
	name := cfg.GetName()
	steps := cfg.GetEnsembleScheduling().GetStep()
	if path := m.ensembleCycle(name, nil); path != nil {
		return nil, fmt.Errorf("ensemble '%s' contains a cycle of ensembles: %s", name, strings.Join(path, " -> "))
	}
	b := &ensembleBackend{m: m, name: name, batching: cfg.MaxBatchSize > 0, outDims: map[string][]int64{}, optional: map[string]bool{}}
	tensors := map[string]tensorUse{}
	for i, in := range cfg.GetInput() {
		tensors[in.GetName()] = newTensorUse(name, b.batching, in.GetDataType(), inputs[i].Dims)
		if in.GetOptional() {
			b.optional[in.GetName()] = true
		}
	}
	for i, out := range cfg.GetOutput() {
		if _, ok := tensors[out.GetName()]; !ok {
			tensors[out.GetName()] = newTensorUse(name, b.batching, out.GetDataType(), outputs[i].Dims)
		}
	}
	for _, s := range steps {
		v := s.GetModelVersion()
		if v == 0 {
			v = -1
		}
		mod, err := m.Get(s.GetModelName(), v)
		if err != nil {
			return nil, &stepUnavailableError{ensemble: name, step: s.GetModelName(), err: err}
		}
		if mod.Decoupled() {
			return nil, backend.Errorf(backend.Unsupported, "ensemble '%s' step '%s': decoupled models in ensembles are not supported", name, s.GetModelName())
		}
		// A model that does not batch may take part (it sees the batch
		// dimension as its first dimension), as in Triton's
		// ValidateEnsembleConfig, whose text this is.
		if mb := mod.Config.GetMaxBatchSize(); mb != 0 && mb < cfg.MaxBatchSize {
			return nil, fmt.Errorf("ensemble %s allows maximum batch size %d, but it contains model %s which only allows maximum batch size to be %d", name, cfg.MaxBatchSize, mod.Name, mb)
		}
		if err := mapStep(name, s, mod, tensors); err != nil {
			return nil, err
		}
		for _, o := range slices.Sorted(maps.Keys(s.GetOutputMap())) {
			dst := s.GetOutputMap()[o]
			if slices.ContainsFunc(inputs, func(in backend.TensorSpec) bool { return in.Name == dst }) {
				return nil, fmt.Errorf("in ensemble '%s', step '%s' writes ensemble tensor '%s', which is an ensemble input", name, mod.Name, dst)
			}
		}
		b.steps = append(b.steps, ensembleStep{model: s.GetModelName(), version: v, inputs: s.GetInputMap(), outputs: s.GetOutputMap()})
	}
	for _, o := range outputs {
		b.outs = append(b.outs, o.Name)
		b.outDims[o.Name] = o.Dims
	}
	return b, nil
}

// ensembleCycle follows the ensemble steps of the configs on disk from
// name and returns a path back to name, or nil.
func (m *Manager) ensembleCycle(name string, path []string) []string {
	if len(path) > 0 && path[0] == name {
		return append(path, name)
	}
	if slices.Contains(path, name) || len(path) > 64 {
		return nil
	}
	cfg := m.diskConfig(name)
	if cfg.GetPlatform() != ensemblePlatform {
		return nil
	}
	path = append(path, name)
	for _, s := range cfg.GetEnsembleScheduling().GetStep() {
		if p := m.ensembleCycle(s.GetModelName(), path); p != nil {
			return p
		}
	}
	return nil
}

func (m *Manager) configLimit() int64 {
	if m.opts.MaxConfigSize > 0 {
		return m.opts.MaxConfigSize
	}
	return DefaultMaxConfigSize
}

// isEnsemble reports whether the model called name is an ensemble by its
// config on disk, for LoadAll's order.
func (m *Manager) isEnsemble(name string) bool {
	return m.diskConfig(name).GetPlatform() == ensemblePlatform
}

// diskConfig is the config.pbtxt of the model called name, or nil when it
// cannot be found or read (its load reports why).
func (m *Manager) diskConfig(name string) *modelconfig.ModelConfig {
	dir, err := m.find(name)
	if err != nil {
		return nil
	}
	real, err := backend.Confine(dir, dir, ConfigFile, ConfigFile)
	if err != nil {
		return nil
	}
	cfg, err := loadConfigFile(real, filepath.Join(name, ConfigFile), m.configLimit())
	if err != nil {
		return nil
	}
	return cfg
}

// loadComposing loads the composing models of the ensemble called name
// (by configJSON, else its config on disk) that have no ready version,
// the composing models of a composing ensemble first, as Triton loads an
// ensemble's dependencies with it in explicit mode. Their failures are
// left to the ensemble's own load to report ("depends on ... which is not
// available"); path stops cycles, which that load refuses.
func (m *Manager) loadComposing(ctx context.Context, name string, configJSON []byte, path []string) {
	cfg := m.diskConfig(name)
	if configJSON != nil {
		cfg, _ = configOverride(name, configJSON)
	}
	if cfg.GetPlatform() != ensemblePlatform || len(path) > 64 {
		return
	}
	path = append(path, name)
	for _, s := range cfg.GetEnsembleScheduling().GetStep() {
		dep := s.GetModelName()
		if slices.Contains(path, dep) || ctx.Err() != nil {
			continue
		}
		if _, err := m.Get(dep, -1); err == nil {
			continue
		}
		if _, err := m.find(dep); err != nil {
			continue
		}
		m.loadComposing(ctx, dep, nil, path)
		unlock := m.lockModel(dep)
		// Again under its lock: another load may have finished meanwhile.
		if _, err := m.Get(dep, -1); err != nil {
			_ = m.load(ctx, dep, nil, "")
		}
		unlock()
	}
}

// revalidateDependents brings the ensembles built on model name in line
// with it after a load of it, as Triton reloads the ensembles downstream of
// a model it (re)loads: an ensemble that a reload of one of its step
// models made invalid (modelEntry.invalidSteps) and that names this one
// loads again, and every loaded ensemble with a step on it is validated
// against the step models now serving (validateEnsemble). One that no
// longer fits, say a step whose output changed shape, is unloaded with
// the reason in the index, as Triton leaves such an ensemble unavailable,
// rather than left READY to fail every request.
func (m *Manager) revalidateDependents(ctx context.Context, name string) {
	m.mu.RLock()
	var retry []string
	for n, e := range m.models {
		if slices.Contains(e.invalidSteps, name) {
			retry = append(retry, n)
		}
	}
	m.mu.RUnlock()
	slices.Sort(retry)
	for _, ens := range retry {
		m.log.Info("a step model of the ensemble was loaded, loading the ensemble again", "model", ens, "step", name)
		_ = m.loadOne(ctx, ens, nil) // a failure is logged and recorded as its reason
	}
	for _, ens := range m.dependentEnsembles(name) {
		m.revalidate(ctx, ens, name)
	}
}

// revalidate validates the loaded ensemble ens again against its step
// models after a load of step, and unloads it if it no longer fits.
func (m *Manager) revalidate(ctx context.Context, ens, step string) {
	ctx, cancel := context.WithTimeout(ctx, m.unloadTimeout())
	defer cancel()
	unlock := m.lockModel(ens)
	mod, err := m.Get(ens, -1)
	if err != nil || mod.Platform != ensemblePlatform {
		unlock()
		return // unloaded, or reloaded as something else, meanwhile
	}
	if _, err = m.validateEnsemble(mod.Config, mod.Spec.Inputs, mod.Spec.Outputs); err == nil {
		unlock()
		return
	}
	err = fmt.Errorf("model '%s': %w", ens, err)
	m.log.Error("ensemble no longer valid after a load of its step model, unloading it", "model", ens, "step", step, "err", err)
	if uerr := m.unload(ctx, ens); uerr != nil {
		m.log.Warn("unloading an ensemble no longer valid", "model", ens, "err", uerr)
	}
	var steps []string
	for _, s := range mod.Config.GetEnsembleScheduling().GetStep() {
		steps = append(steps, s.GetModelName())
	}
	m.mu.Lock()
	if e := m.models[ens]; e != nil {
		e.reason, e.invalidSteps = err.Error(), steps
	}
	m.mu.Unlock()
	unlock()
	m.unloadDependents(ctx, ens)
}

// ensembleOrder orders ensembles so that one whose steps name another
// comes after it; cycles keep their order and fail at load.
func (m *Manager) ensembleOrder(names []string) []string {
	deps := map[string][]string{}
	for _, n := range names {
		for _, s := range m.diskConfig(n).GetEnsembleScheduling().GetStep() {
			deps[n] = append(deps[n], s.GetModelName())
		}
	}
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string)
	visit = func(n string) {
		if state[n] != 0 {
			return
		}
		state[n] = 1
		for _, d := range deps[n] {
			if _, ok := deps[d]; ok {
				visit(d)
			}
		}
		state[n] = 2
		out = append(out, n)
	}
	for _, n := range names {
		visit(n)
	}
	return out
}
