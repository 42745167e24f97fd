package repository

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func ensembleCfg(in, out string, steps ...string) string {
	return `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: ` + in + ` dims: [4] }]
output [{ name: "OUT" data_type: ` + out + ` dims: [3] }]
ensemble_scheduling { step [` + strings.Join(steps, ", ") + `] }
`
}

func step(model, in, out string) string {
	return `{ model_name: "` + model + `" model_version: -1 input_map { key: "INPUT__0" value: "` + in + `" } output_map { key: "OUTPUT__0" value: "` + out + `" } }`
}

// TestEnsembleLoadRefusals: ensembles that Triton refuses fail to load
// with its texts (ValidateModelConfig and ValidateEnsembleSchedulingConfig
// on the configuration alone; ValidateEnsembleConfig against the composing
// models: the mappings, each tensor's data type and shape consistent
// across the ensemble and its steps), besides ours (a cycle of ensembles,
// a missing model); a valid one (listed before its model, so LoadAll must
// order them) loads, and its served configuration has neither instance
// groups nor optimization, as Triton's.
func TestEnsembleLoadRefusals(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	writeModel(t, root, "small", strings.Replace(linearCfg, "max_batch_size: 8", "max_batch_size: 2", 1), []string{"1"})
	writeModel(t, root, "two", `backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`+identityParam, []string{"1"})
	fp32 := func(steps ...string) string { return ensembleCfg("TYPE_FP32", "TYPE_FP32", steps...) }
	ok := fp32(step("lin", "IN", "OUT"))
	cases := map[string]refusal{
		"aok":      {ok, ""},
		"missing":  {fp32(step("nosuch", "IN", "OUT")), "ensemble 'missing' depends on 'nosuch' which is not available"},
		"types":    {ensembleCfg("TYPE_INT32", "TYPE_FP32", step("lin", "IN", "OUT")), "in ensemble types, ensemble tensor IN: inconsistent data type: TYPE_INT32 is inferred from model types while TYPE_FP32 is inferred from model lin"},
		"outtype":  {ensembleCfg("TYPE_FP32", "TYPE_INT64", step("lin", "IN", "OUT")), "in ensemble outtype, ensemble tensor OUT: inconsistent data type: TYPE_INT64 is inferred from model outtype while TYPE_FP32 is inferred from model lin"},
		"inshape":  {strings.Replace(ok, "dims: [4]", "dims: [5]", 1), "in ensemble inshape, ensemble tensor IN: inconsistent shape: [-1,5] is inferred from model inshape while [-1,4] is inferred from model lin"},
		"outshape": {strings.Replace(ok, "dims: [3]", "dims: [2]", 1), "in ensemble outshape, ensemble tensor OUT: inconsistent shape: [-1,2] is inferred from model outshape while [-1,3] is inferred from model lin"},
		// lin makes MID [3]; the next lin reads it as its [4] input.
		"midshape": {fp32(step("lin", "IN", "MID"), step("lin", "MID", "OUT")), "in ensemble midshape, ensemble tensor MID: inconsistent shape: [-1,3] is inferred from model lin while [-1,4] is inferred from model lin"},
		// An ensemble that does not batch: its [5] is neither lin's [4]
		// nor, as a full shape, lin's [-1,4] (its [4,4] would be).
		"nbshape":  {strings.NewReplacer("max_batch_size: 8", "max_batch_size: 0", "dims: [4]", "dims: [5]").Replace(ok), "in ensemble nbshape, ensemble tensor IN: inconsistent shape: [5] is inferred from model nbshape while [-1,4] is inferred from model lin"},
		"flowloop": {fp32(step("lin", "B", "A"), step("lin", "A", "B"), step("lin", "IN", "OUT")), "ensemble tensor 'A' is unused in ensemble 'flowloop'"},
		"unread":   {fp32(step("lin", "IN", "OUT"), step("lin", "IN", "X")), "ensemble tensor 'X' is unused in ensemble 'unread'"},
		"unmade":   {fp32(step("lin", "IN", "X")), "ensemble output 'OUT' for ensemble unmade' is not used"},
		"unusedin": {fp32(step("lin", "Q", "OUT")), "ensemble input 'IN' for ensemble unusedin' is not used"},
		"nosource": {fp32(step("lin", "IN", "X"), step("lin", "Q", "OUT")), "output 'OUT' for ensemble 'nosource' is not written: at least one of its depending tensors, 'Q', is not connected"},
		"twice":    {fp32(step("lin", "IN", "OUT"), step("lin", "IN", "OUT")), "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'twice' step 1"},
		"unmapped": {fp32(step("two", "IN", "OUT")), "in ensemble unmapped, input INPUT__1 in model two is not mapped to any ensemble tensors"},
		"badin":    {fp32(`{ model_name: "lin" input_map { key: "NOPE" value: "IN" } output_map { key: "OUTPUT__0" value: "OUT" } }`), "in ensemble badin, ensemble tensor IN is mapping to non-existing input NOPE in model lin"},
		"badout":   {fp32(`{ model_name: "lin" input_map { key: "INPUT__0" value: "IN" } output_map { key: "NOPE" value: "OUT" } }`), "in ensemble badout, ensemble tensor OUT is mapped from non-existing output NOPE in model lin"},
		"noname":   {fp32(`{ input_map { key: "INPUT__0" value: "IN" } output_map { key: "OUTPUT__0" value: "OUT" } }`), "must specify 'model_name' in step 0 of ensemble 'noname'"},
		"noin":     {fp32(step("lin", "IN", "OUT"), `{ model_name: "lin" output_map { key: "OUTPUT__0" value: "X" } }`), "must specify 'input_map' in step 1 of ensemble 'noin'"},
		"noout":    {fp32(`{ model_name: "lin" input_map { key: "INPUT__0" value: "IN" } }`), "must specify 'output_map' in step 0 of ensemble 'noout'"},
		"nosteps":  {fp32(), "must specify 'step' for ensemble 'nosteps'"},
		"nosched":  {strings.Replace(ok, "ensemble_scheduling", "# ensemble_scheduling", 1), "ensemble scheduling must be set for ensemble nosched whose platform is ensemble"},
		"groups":   {ok + "instance_group [{ count: 2 }]\n", "instance group should not be specified for ensemble 'groups'"},
		"optim":    {ok + "optimization { input_pinned_memory { enable: true } }\n", "optimization should not be specified for ensemble 'optim'"},
		"warm":     {ok + `model_warmup [{ name: "w" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]` + "\n", "model_warmup can not be specified for ensemble 'warm'"},
		"withbe":   {ok + `backend: "fake"` + "\n", "Ensemble model 'withbe' must have platform type 'ensemble' and empty backend type"},
		"notens":   {linearCfg + "ensemble_scheduling { step [" + step("lin", "INPUT__0", "OUTPUT__0") + "] }\n", "ensemble scheduling cannot be set for model 'notens' whose platform is not ensemble"},
		"batch":    {fp32(step("small", "IN", "OUT")), "ensemble batch allows maximum batch size 8, but it contains model small which only allows maximum batch size to be 2"},
		"cyc1":     {fp32(step("cyc2", "IN", "OUT")), "ensemble 'cyc1' contains a cycle of ensembles: cyc1 -> cyc2 -> cyc1"},
		"cyc2":     {fp32(step("cyc1", "IN", "OUT")), "ensemble 'cyc2' contains a cycle of ensembles: cyc2 -> cyc1 -> cyc2"},
	}
	for name, c := range cases {
		writeModel(t, root, name, c.cfg, []string{"1"})
	}
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	aok, err := m.Get("aok", -1)
	if err != nil {
		t.Fatalf("a valid ensemble should load after its model: %v", err)
	}
	if aok.Config.GetInstanceGroup() != nil || aok.Config.GetOptimization() != nil {
		t.Errorf("the ensemble's served config has instance groups %v, optimization %v; Triton's has neither", aok.Config.GetInstanceGroup(), aok.Config.GetOptimization())
	}
	delete(cases, "aok")
	wantRefused(t, m, cases)
}

// ctxBackend serves the fake backend's models, except that an instance of
// the model "watch" reports each Execute on entered and then waits for
// its first request's context to end, reporting that on ended.
type ctxBackend struct {
	*fake.Backend
	entered chan struct{}
	ended   chan error
}

func (b *ctxBackend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	in, err := b.Backend.NewInstance(ctx, spec, idx)
	if err != nil || spec.Name != "watch" {
		return in, err
	}
	return &ctxInstance{Instance: in, b: b}, nil
}

type ctxInstance struct {
	backend.Instance
	b *ctxBackend
}

func (in *ctxInstance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	in.b.entered <- struct{}{}
	rctx := reqs[0].Ctx
	if rctx == nil {
		in.b.ended <- errors.New("the step's request has no context")
		return nil, errors.New("no context")
	}
	select {
	case <-rctx.Done():
		in.b.ended <- nil
		return nil, rctx.Err()
	case <-time.After(30 * time.Second):
		in.b.ended <- errors.New("the client's cancellation never reached the step")
		return nil, errors.New("not cancelled")
	}
}

// TestEnsembleStepsSeeTheClientsContext: a client that gives up on an
// ensemble request cancels the step its request is running.
func TestEnsembleStepsSeeTheClientsContext(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "watch", linearCfg, []string{"1"})
	writeModel(t, root, "ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("watch", "IN", "OUT")), []string{"1"})
	be := &ctxBackend{Backend: fake.New(), entered: make(chan struct{}, 1), ended: make(chan error, 1)}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": be}, StrictModelConfig: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	mod, err := m.Get("ens", -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req := &backend.Request{Inputs: []backend.Tensor{{Name: "IN", DataType: backend.FP32, Shape: []int64{1, 4}, Data: make([]byte, 16)}}}
		_, _, err := m.Infer(ctx, mod, -1, req, time.Now())
		done <- err
	}()
	select {
	case <-be.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never executed")
	}
	cancel()
	if err := <-be.ended; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the cancelled ensemble request succeeded")
	}
}

// TestEnsembleLoadsAndUnloadsWithItsModels: loading an ensemble (as the
// explicit mode's load request does) loads its composing models, those of
// a composing ensemble included; unloading a composing model unloads the
// ensembles built on it instead of leaving them READY.
func TestEnsembleLoadsAndUnloadsWithItsModels(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "a", linearCfg, []string{"1"})
	writeModel(t, root, "ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("a", "IN", "OUT")), []string{"1"})
	// ens2 wraps ens: its own input and output are ens's, by name.
	ens2 := ensembleCfg("TYPE_FP32", "TYPE_FP32", `{ model_name: "ens" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } }`)
	writeModel(t, root, "ens2", ens2, []string{"1"})
	writeModel(t, root, "other", linearCfg, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := m.Load(ctx, "ens2"); err != nil {
		t.Fatalf("loading the outer ensemble: %v", err)
	}
	for _, n := range []string{"a", "ens", "ens2"} {
		if _, err := m.Get(n, -1); err != nil {
			t.Fatalf("%s should be loaded with ens2: %v", n, err)
		}
	}
	if _, err := m.Get("other", -1); err == nil {
		t.Fatal("a model no ensemble uses was loaded")
	}
	if err := m.Unload(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "ens", "ens2"} {
		if _, err := m.Get(n, -1); err == nil {
			t.Errorf("%s still serves after its composing model was unloaded", n)
		}
		if m.ModelReady(n, "") {
			t.Errorf("%s still ready", n)
		}
	}
	// Loading the ensemble again brings its model back.
	if err := m.Load(ctx, "ens"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("a", -1); err != nil {
		t.Fatalf("a not reloaded with ens: %v", err)
	}
}

// TestPollLoadsEnsemblesAfterTheirModels: in poll mode an ensemble whose
// name sorts before its composing model's still loads on the first poll.
func TestPollLoadsEnsemblesAfterTheirModels(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "a_ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("z_lin", "IN", "OUT")), []string{"1"})
	writeModel(t, root, "z_lin", linearCfg, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("a_ens", -1); err != nil {
		t.Fatalf("the ensemble did not load on the first poll: %v", err)
	}
}

// TestUnloadModelWithDependents: unload_dependents unloads the composing
// models of an ensemble that no other loaded ensemble uses.
func TestUnloadModelWithDependents(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "shared", linearCfg, []string{"1"})
	writeModel(t, root, "own", linearCfg, []string{"1"})
	// ens1's second output, A, comes from shared (Triton refuses a tensor no step reads and no output is).
	ens1 := strings.Replace(ensembleCfg("TYPE_FP32", "TYPE_FP32", step("shared", "IN", "A"), step("own", "IN", "OUT")), `dims: [3] }]`, `dims: [3] }, { name: "A" data_type: TYPE_FP32 dims: [3] }]`, 1)
	writeModel(t, root, "ens1", ens1, []string{"1"})
	writeModel(t, root, "ens2", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("shared", "IN", "OUT")), []string{"1"})
	m := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := m.LoadAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.UnloadModel(ctx, "ens1", true); err != nil {
		t.Fatal(err)
	}
	for n, loaded := range map[string]bool{"ens1": false, "own": false, "shared": true, "ens2": true} {
		if _, err := m.Get(n, -1); (err == nil) != loaded {
			t.Errorf("%s: loaded %v, want %v", n, err == nil, loaded)
		}
	}
}

// TestPollReloadsEnsembleWhenItsModelReturns: in poll mode, removing a
// composing model unloads the ensemble built on it; when the model comes
// back, the next poll loads the ensemble again, its directory unchanged.
// An ensemble refused for a step model that was never there loads the
// same way once the model appears.
func TestPollReloadsEnsembleWhenItsModelReturns(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "IN", "OUT")), []string{"1"})
	writeModel(t, root, "late_ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("late", "IN", "OUT")), []string{"1"})
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := m.Poll(ctx); err == nil || !strings.Contains(err.Error(), "ensemble 'late_ens' depends on 'late' which is not available") {
		t.Fatalf("first poll: want late_ens refused for its missing model, got %v", err)
	}
	loaded := func(name string) bool { _, err := m.Get(name, -1); return err == nil }
	if !loaded("ens") || !loaded("lin") || loaded("late_ens") {
		t.Fatalf("after the first poll: ens %v lin %v late_ens %v", loaded("ens"), loaded("lin"), loaded("late_ens"))
	}
	// The model leaves: it and its ensemble are unloaded.
	aside := filepath.Join(t.TempDir(), "lin")
	if err := os.Rename(filepath.Join(root, "lin"), aside); err != nil {
		t.Fatal(err)
	}
	if err := m.Poll(ctx); err != nil && !strings.Contains(err.Error(), "late_ens") {
		t.Fatal(err)
	}
	if loaded("ens") || loaded("lin") {
		t.Fatalf("with lin removed: ens %v lin %v, want both unloaded", loaded("ens"), loaded("lin"))
	}
	// A poll with the model still away leaves the ensemble unloaded.
	_ = m.Poll(ctx)
	if loaded("ens") {
		t.Fatal("ens loaded while lin is away")
	}
	// The models come back: the next poll loads both ensembles.
	if err := os.Rename(aside, filepath.Join(root, "lin")); err != nil {
		t.Fatal(err)
	}
	writeModel(t, root, "late", linearCfg, []string{"1"})
	if err := m.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"lin", "ens", "late", "late_ens"} {
		if !loaded(n) {
			t.Errorf("%s not loaded after its models came back", n)
		}
	}
	// Loaded again, nothing changes on later polls.
	if err := m.Poll(ctx); err != nil || !loaded("ens") {
		t.Fatalf("a later poll: %v, ens loaded %v", err, loaded("ens"))
	}
}

// TestEnsembleWithNonBatchingStep: a batching ensemble may contain a model
// with max_batch_size 0 (Triton's ValidateEnsembleConfig checks only
// composing models that batch: "batchable ensemble can include
// non-batchable models as long as the expanded shapes are consistent");
// that model sees the ensemble tensor with its batch dimension.
func TestEnsembleWithNonBatchingStep(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "nb", `backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [-1, 4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [-1, 4] }]
`+identityParam, []string{"1"})
	writeModel(t, root, "ens", `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step [`+step("nb", "IN", "OUT")+`] }
`, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	mod := mustGet(t, m, "ens")
	_, resp, err := m.Infer(context.Background(), mod, -1, &backend.Request{Inputs: []backend.Tensor{f32("IN", 3, 4)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatShape(resp.Outputs[0].Shape); got != "[3,4]" {
		t.Errorf("output shape %s, want [3,4]", got)
	}
}

// seenBackend records the priority and timeout of the requests its
// instances execute.
type seenBackend struct {
	*fake.Backend
	seen chan *backend.Request
}

func (b *seenBackend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	in, err := b.Backend.NewInstance(ctx, spec, idx)
	if err != nil {
		return in, err
	}
	return &seenInstance{Instance: in, b: b}, nil
}

type seenInstance struct {
	backend.Instance
	b *seenBackend
}

func (in *seenInstance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	for _, r := range reqs {
		in.b.seen <- r
	}
	return in.Instance.Execute(ctx, reqs)
}

// TestEnsembleStepsGetPriorityAndTimeout: the steps of an ensemble request
// carry its priority and timeout, as Triton's EnsembleContext::InitStep
// sets them on each composing request (SetPriority, SetTimeoutMicroseconds).
func TestEnsembleStepsGetPriorityAndTimeout(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "lin", linearCfg+`dynamic_batching {
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { allow_timeout_override: true default_timeout_microseconds: 60000000 }
}
`, []string{"1"})
	writeModel(t, root, "ens", ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "IN", "OUT")), []string{"1"})
	be := &seenBackend{Backend: fake.New(), seen: make(chan *backend.Request, 16)}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": be}, StrictModelConfig: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := &backend.Request{Inputs: []backend.Tensor{f32("IN", 1, 4)}, Priority: 1, Timeout: 5 * time.Second}
	if _, _, err := m.Infer(context.Background(), mustGet(t, m, "ens"), -1, req, time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-be.seen:
		if r.Priority != 1 || r.Timeout != 5*time.Second {
			t.Errorf("the step ran with priority %d, timeout %v; want 1, 5s", r.Priority, r.Timeout)
		}
	default:
		t.Fatal("the step never executed")
	}
}

// TestEnsembleBatchingConversions: as Triton's ReshapeTensorDims, a batch
// of one reaching a model that does not batch loses its batch dimension
// when the model's dims do not take it, and what such a model returns
// gets the batch dimension back as an output of a batching ensemble.
func TestEnsembleBatchingConversions(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "nb", `backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] }]
`+identityParam, []string{"1"})
	writeModel(t, root, "ens", `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step [`+step("nb", "IN", "OUT")+`] }
`, []string{"1"})
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	writeModel(t, root, "unbatched", strings.Replace(ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "IN", "OUT")), "max_batch_size: 8", "max_batch_size: 0", 1), []string{"1"})
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, StrictInputShapes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, resp, err := m.Infer(context.Background(), mustGet(t, m, "ens"), -1, &backend.Request{Inputs: []backend.Tensor{f32("IN", 1, 4)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatShape(resp.Outputs[0].Shape); got != "[1,4]" {
		t.Errorf("output shape %s, want [1,4]", got)
	}
	// The other way: an ensemble that does not batch, a step that does.
	_, resp, err = m.Infer(context.Background(), mustGet(t, m, "unbatched"), -1, &backend.Request{Inputs: []backend.Tensor{f32("IN", 4)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatShape(resp.Outputs[0].Shape); got != "[3]" {
		t.Errorf("unbatched ensemble: output shape %s, want [3]", got)
	}
}

// TestEnsembleOptionalInputLeftOut: an optional ensemble input the client
// leaves out is left out of the steps that read it (their model's input
// being optional too), as Triton's ensembles do.
func TestEnsembleOptionalInputLeftOut(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "opt", `backend: "fake"
max_batch_size: 8
input [{ name: "A" data_type: TYPE_FP32 dims: [4] }, { name: "B" data_type: TYPE_FP32 dims: [4] optional: true }]
output [{ name: "OA" data_type: TYPE_FP32 dims: [4] }]
`+identityParam, []string{"1"})
	writeModel(t, root, "ens", `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }, { name: "IN2" data_type: TYPE_FP32 dims: [4] optional: true }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step [{ model_name: "opt" model_version: -1 input_map { key: "A" value: "IN" } input_map { key: "B" value: "IN2" } output_map { key: "OA" value: "OUT" } }] }
`, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, resp, err := m.Infer(context.Background(), mustGet(t, m, "ens"), -1, &backend.Request{Inputs: []backend.Tensor{f32("IN", 2, 4)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || FormatShape(resp.Outputs[0].Shape) != "[2,4]" {
		t.Errorf("outputs %v, want OUT [2,4]", resp.Outputs)
	}
}
