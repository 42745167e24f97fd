package repository

import (
	"context"
	"errors"
	"fmt"
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

// validateEnsemble checks cfg's steps against the loaded models, as
// Triton does at load: every step's model available, every step input an
// ensemble input or another step's output of the same data type, each
// ensemble tensor written once, every ensemble output produced, no cycle,
// and composing models that accept the ensemble's batch size.
func (m *Manager) validateEnsemble(cfg *modelconfig.ModelConfig, inputs, outputs []backend.TensorSpec) (*ensembleBackend, error) {
	name := cfg.GetName()
	steps := cfg.GetEnsembleScheduling().GetStep()
	if len(steps) == 0 {
		return nil, fmt.Errorf("ensemble '%s' must have at least one step in ensemble_scheduling", name)
	}
	if path := m.ensembleCycle(name, nil); path != nil {
		return nil, fmt.Errorf("ensemble '%s' contains a cycle of ensembles: %s", name, strings.Join(path, " -> "))
	}
	types := map[string]backend.DataType{}
	for _, in := range inputs {
		types[in.Name] = in.DataType
	}
	producer := map[string]string{}
	b := &ensembleBackend{m: m, name: name, batching: cfg.MaxBatchSize > 0, outDims: map[string][]int64{}, optional: map[string]bool{}}
	for _, in := range inputs {
		if in.Optional {
			b.optional[in.Name] = true
		}
	}
	mods := make([]*Model, len(steps))
	for i, s := range steps {
		if s.GetModelName() == "" {
			return nil, fmt.Errorf("ensemble '%s' step %d has no model_name", name, i)
		}
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
		mods[i] = mod
		st := ensembleStep{model: s.GetModelName(), version: v, inputs: s.GetInputMap(), outputs: s.GetOutputMap()}
		for in := range st.inputs {
			if _, ok := mod.Input(in); !ok {
				return nil, fmt.Errorf("in ensemble '%s', input '%s' in input_map of step '%s' is not an input of that model", name, in, mod.Name)
			}
		}
		if len(st.outputs) == 0 {
			return nil, fmt.Errorf("in ensemble '%s', step '%s' has an empty output_map", name, mod.Name)
		}
		for o, dst := range st.outputs {
			if _, ok := mod.Output(o); !ok {
				return nil, fmt.Errorf("in ensemble '%s', output '%s' in output_map of step '%s' is not an output of that model", name, o, mod.Name)
			}
			if prev, dup := producer[dst]; dup {
				return nil, fmt.Errorf("in ensemble '%s', ensemble tensor '%s' is written by step '%s' and by step '%s'", name, dst, prev, mod.Name)
			}
			if _, isInput := types[dst]; isInput && producer[dst] == "" {
				return nil, fmt.Errorf("in ensemble '%s', step '%s' writes ensemble tensor '%s', which is an ensemble input", name, mod.Name, dst)
			}
			producer[dst] = mod.Name
		}
		b.steps = append(b.steps, st)
	}
	// Propagate types in data-flow order; steps left over read a tensor
	// nothing produces, or depend on each other in a cycle.
	done := make([]bool, len(b.steps))
	for progress := true; progress; {
		progress = false
		for i, st := range b.steps {
			if done[i] {
				continue
			}
			ready := true
			for _, src := range st.inputs {
				if _, ok := types[src]; !ok {
					ready = false
				}
			}
			if !ready {
				continue
			}
			for in, src := range st.inputs {
				spec, _ := mods[i].Input(in)
				if types[src] != spec.DataType {
					return nil, fmt.Errorf("in ensemble '%s', input '%s' of step '%s' is %s but ensemble tensor '%s' is %s", name, in, st.model, spec.DataType, src, types[src])
				}
			}
			for o, dst := range st.outputs {
				spec, _ := mods[i].Output(o)
				types[dst] = spec.DataType
			}
			done[i], progress = true, true
		}
	}
	for i, st := range b.steps {
		if done[i] {
			continue
		}
		for in, src := range st.inputs {
			if _, ok := types[src]; !ok {
				if _, made := producer[src]; made {
					return nil, fmt.Errorf("in ensemble '%s', the steps form a cycle: input '%s' of step '%s' (ensemble tensor '%s') depends on its own outputs", name, in, st.model, src)
				}
				return nil, fmt.Errorf("in ensemble '%s', input '%s' of step '%s' reads ensemble tensor '%s', which is neither an ensemble input nor any step's output", name, in, st.model, src)
			}
		}
	}
	for _, o := range outputs {
		t, ok := types[o.Name]
		if !ok || producer[o.Name] == "" {
			return nil, fmt.Errorf("in ensemble '%s', ensemble output '%s' is not produced by any step", name, o.Name)
		}
		if t != o.DataType {
			return nil, fmt.Errorf("in ensemble '%s', ensemble output '%s' is %s but step '%s' produces %s", name, o.Name, o.DataType, producer[o.Name], t)
		}
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
