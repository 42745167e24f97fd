package repository

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

const linearCfg = `
backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`

// writeModel creates <root>/<name>/config.pbtxt (unless cfg is "") and the
// given version directories, each with the files in files.
func writeModel(t *testing.T, root, name, cfg string, versions []string, files ...string) {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg != "" {
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, v, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newManager(t *testing.T, be *fake.Backend, strict bool, repos ...string) *Manager {
	t.Helper()
	m, err := New(Options{
		Repositories:      repos,
		Backends:          map[string]backend.Backend{"fake": be, "pytorch": be},
		StrictModelConfig: strict,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// refusal is the config of a model that must fail to load and a part of
// the reason its load gives.
type refusal struct{ cfg, want string }

// wantRefused checks that each model of cases (by name) is in m's index
// as UNAVAILABLE with its reason. It empties cases as it goes.
func wantRefused(t *testing.T, m *Manager, cases map[string]refusal) {
	t.Helper()
	for _, e := range m.Index(false) {
		if c, ok := cases[e.Name]; ok {
			if e.State != Unavailable || !strings.Contains(e.Reason, c.want) {
				t.Errorf("%s: %s %q, want UNAVAILABLE with %q", e.Name, e.State, e.Reason, c.want)
			}
			delete(cases, e.Name)
		}
	}
	if len(cases) != 0 {
		t.Errorf("not in the index: %v", cases)
	}
}

func readyVersions(m *Manager, name string) []int64 {
	vs, _, _ := m.Versions(name)
	var out []int64
	for _, v := range vs {
		if v.State == Ready {
			out = append(out, v.Version)
		}
	}
	return out
}

func TestVersionPolicies(t *testing.T) {
	root := t.TempDir()
	all := []string{"1", "2", "3", "10", "abc", "007"}
	writeModel(t, root, "default", linearCfg, all)
	writeModel(t, root, "latest2", linearCfg+"version_policy { latest { num_versions: 2 } }", all)
	writeModel(t, root, "all", linearCfg+"version_policy { all {} }", all)
	writeModel(t, root, "specific", linearCfg+"version_policy { specific { versions: [1, 3] } }", all)
	writeModel(t, root, "missing", linearCfg+"version_policy { specific { versions: [2, 4] } }", all)
	// A plain file named like a version is not a version directory.
	if err := os.WriteFile(filepath.Join(root, "default", "11"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, fake.New(), true, root)
	// Triton loads the specific versions whose directory exists and logs
	// the others; the model loads.
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{
		"default": {10}, "latest2": {3, 10}, "all": {1, 2, 3, 10}, "specific": {1, 3}, "missing": {2},
	}
	for name, w := range want {
		if got := readyVersions(m, name); !slicesEqual(got, w) {
			t.Errorf("%s: ready versions %v, want %v", name, got, w)
		}
	}
	if vs, _, _ := m.Versions("missing"); len(vs) != 1 || vs[0].Version != 2 {
		t.Errorf("versions of a policy naming a missing one: %+v", vs)
	}
	if _, err := m.Get("missing", 4); err == nil || err.Error() != "Request for unknown model: 'missing' version 4 is not found" {
		t.Errorf("the missing version: %v", err)
	}
	if mod, err := m.Get("all", -1); err != nil || mod.Version != 10 {
		t.Errorf("Get latest: %v %v", mod, err)
	}
	if _, err := m.Get("all", 7); codeOf(err) != backend.NotFound {
		t.Errorf("Get unknown version: %v", err)
	}
	if _, err := m.Get("nope", -1); codeOf(err) != backend.NotFound {
		t.Errorf("Get unknown model: %v", err)
	}

	// latest with num_versions 0 selects no version: Triton's
	// VersionsToLoad takes none, and the load is refused.
	zero := t.TempDir()
	writeModel(t, zero, "latest0", linearCfg+"version_policy { latest { num_versions: 0 } }", all)
	m = newManager(t, fake.New(), true, zero)
	_ = m.LoadAll(context.Background())
	wantRefused(t, m, map[string]refusal{"latest0": {want: "at least one version must be available under the version policy of model 'latest0'"}})
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFailuresAreIsolatedAndReported(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "good", linearCfg, []string{"1"})
	writeModel(t, root, "graph", linearCfg+"optimization { graph { level: 1 } }", []string{"1"})
	writeModel(t, root, "gpu", linearCfg+"instance_group [{ kind: KIND_GPU }]", []string{"1"})
	writeModel(t, root, "ragged", strings.Replace(linearCfg, "dims: [4]", "dims: [4] allow_ragged_batch: true", 1)+`batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT64 source_input: "INPUT__0" }]`, []string{"1"})
	writeModel(t, root, "syntax", "name: \"syntax\"\nbackend: \"fake\"\n  max_batch_size: eight\n", []string{"1"})
	writeModel(t, root, "wrongname", "name: \"other\"\n"+linearCfg, []string{"1"})
	writeModel(t, root, "nobackend", strings.Replace(linearCfg, `backend: "fake"`, `backend: "onnxruntime"`, 1), []string{"1"})
	writeModel(t, root, "noversions", linearCfg, nil)
	writeModel(t, root, "pt", strings.Replace(linearCfg, `backend: "fake"`, `platform: "pytorch_libtorch"`, 1), []string{"1"})
	writeModel(t, root, "loadfail", linearCfg+`parameters { key: "fake_fail" value { string_value: "load" } }`, []string{"1"})

	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err == nil {
		t.Fatal("LoadAll should report the failed models")
	}
	if _, err := m.Get("good", -1); err != nil {
		t.Fatalf("good model should serve despite the others: %v", err)
	}
	if m.Ready() {
		t.Error("strict readiness: server must not be ready with failed models")
	}
	reasons := map[string]string{
		"graph":      "unsupported: optimization.graph.level",
		"gpu":        "instance group gpu_0 of model gpu has kind KIND_GPU but server does not support GPUs",
		"ragged":     "batch input data type must be TYPE_INT32 or TYPE_FP32",
		"syntax":     "model 'syntax': syntax/config.pbtxt:3:19:",
		"wrongname":  "unexpected directory name 'wrongname' for model 'other', directory name must equal model name",
		"nobackend":  "backend 'onnxruntime' is not available",
		"noversions": "at least one version must be available under the version policy of model 'noversions'",
		"pt":         "model.pt",
		"loadfail":   "failed to load as configured",
	}
	idx := m.Index(false)
	for name, want := range reasons {
		found := false
		for _, e := range idx {
			if e.Name == name && e.State == Unavailable && strings.Contains(e.Reason, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("index has no UNAVAILABLE entry for %s with reason containing %q: %+v", name, want, idx)
		}
	}
	// The pytorch platform maps to the pytorch backend, and its default
	// model file is required: once model.pt exists, the model loads.
	writeModel(t, root, "pt", "", []string{"1"}, "model.pt")
	if err := m.Load(context.Background(), "pt"); err != nil {
		t.Fatalf("reload pt: %v", err)
	}
	mod, _ := m.Get("pt", 1)
	if mod.Backend != "pytorch" || mod.Platform != "pytorch_libtorch" || mod.Spec.Filename != "model.pt" {
		t.Errorf("pt model: backend %q platform %q file %q", mod.Backend, mod.Platform, mod.Spec.Filename)
	}
	ready := m.Index(true)
	for _, e := range ready {
		if e.State != Ready {
			t.Errorf("ready-only index lists %+v", e)
		}
	}
}

func TestSpecFromConfig(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg+`
default_model_filename: "net.bin"
parameters { key: "p" value { string_value: "v" } }
model_operations { op_library_filename: ["libops.so", "../shared/libx.so"] }
instance_group [{ kind: KIND_CPU count: 2 }, { count: 1 }]
dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 500 default_queue_policy { max_queue_size: 7 } }
`, []string{"1"}, "net.bin", "libops.so")
	writeModel(t, root, "m", "", []string{"shared"}, "libx.so")
	be := fake.New()
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": be},
		BackendConfig: map[string]map[string]string{"fake": {"k": "v"}}, StrictModelConfig: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	mod, err := m.Get("m", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := mod.Spec
	if s.Filename != "net.bin" || s.Parameters["p"] != "v" || s.BackendConfig["k"] != "v" || s.MaxBatchSize != 8 ||
		s.VersionDir != filepath.Join(root, "m", "1") || s.ModelDir != filepath.Join(root, "m") {
		t.Errorf("spec: %+v", s)
	}
	if len(s.OpLibraries) != 2 || s.OpLibraries[0] != filepath.Join(root, "m", "1", "libops.so") || s.OpLibraries[1] != filepath.Join(root, "m", "shared", "libx.so") {
		t.Errorf("op libraries: %v", s.OpLibraries)
	}
	if be.Instances("m") != 3 {
		t.Errorf("instances = %d, want 3 (2 + 1)", be.Instances("m"))
	}
	sc := mod.Scheduler.Config()
	if sc.Dynamic == nil || len(sc.Dynamic.Levels) != 1 || sc.Dynamic.Levels[0].MaxQueueSize != 7 || sc.Dynamic.MaxQueueDelay.Microseconds() != 500 || len(sc.Dynamic.PreferredBatchSizes) != 2 {
		t.Errorf("scheduler config: %+v %+v", sc, sc.Dynamic)
	}
	if !strings.Contains(string(s.ConfigJSON), `"max_batch_size":8`) || !strings.Contains(string(s.ConfigJSON), `"name":"m"`) {
		t.Errorf("config JSON: %s", s.ConfigJSON)
	}
}

func TestWarmupRunsBeforeReady(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "w", linearCfg+`
instance_group [{ count: 2 }]
model_warmup [
  { name: "zeros" batch_size: 2 inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } },
  { name: "file" batch_size: 1 count: 2 inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] input_data_file: "x.bin" } } }
]`, []string{"1"})
	if err := os.MkdirAll(filepath.Join(root, "w", "warmup"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 16)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	if err := os.WriteFile(filepath.Join(root, "w", "warmup", "x.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	writeModel(t, root, "badwarm", linearCfg+`
model_warmup [{ name: "f" batch_size: 1 inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] input_data_file: "missing.bin" } } }]`, []string{"1"})
	writeModel(t, root, "failwarm", linearCfg+`
model_warmup [{ name: "f" batch_size: 1 inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]
parameters { key: "fake_fail" value { string_value: "execute" } }`, []string{"1"})
	be := fake.New()
	m := newManager(t, be, true, root)
	err := m.LoadAll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "missing.bin") || !strings.Contains(err.Error(), "execute failed") {
		t.Fatalf("want warmup failures of badwarm and failwarm, got %v", err)
	}
	// Two instances, each: one batch of 2, then the file sample twice.
	got := be.Batches("w")
	want := []int{2, 1, 1, 2, 1, 1}
	if len(got) != len(want) {
		t.Fatalf("warmup executions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("warmup executions %v, want %v", got, want)
		}
	}
	if st := mustGet(t, m, "w").Scheduler.Stats(); st.ExecutionCount != 0 {
		t.Errorf("warmup must not count in statistics: %+v", st)
	}
}

func mustGet(t *testing.T, m *Manager, name string) *Model {
	t.Helper()
	mod, err := m.Get(name, -1)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

type completer struct{ *fake.Backend }

func (c completer) AutoComplete(_ context.Context, req backend.AutoCompleteRequest) ([]byte, error) {
	cfg := &modelconfig.ModelConfig{}
	if err := protojson.Unmarshal(req.ConfigJSON, cfg); err != nil {
		return nil, err
	}
	cfg.MaxBatchSize = 4
	cfg.Input = []*modelconfig.ModelInput{{Name: "X", DataType: modelconfig.DataType_TYPE_FP32, Dims: []int64{2}}}
	cfg.Output = []*modelconfig.ModelOutput{{Name: "Y", DataType: modelconfig.DataType_TYPE_FP32, Dims: []int64{2}}}
	return modelconfig.JSON(cfg), nil
}

func TestStrictModelConfig(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "pyauto", "", []string{"1"}, "model.py")
	writeModel(t, root, "ptauto", "", []string{"1"}, "model.pt")
	// A config with only the backend is completed too (Triton's minimal
	// configuration), unless auto-completion is off.
	writeModel(t, root, "pyminimal", `backend: "python"`, []string{"1"}, "model.py")
	for _, strict := range []bool{true, false} {
		m, err := New(Options{Repositories: []string{root}, StrictModelConfig: strict,
			Backends: map[string]backend.Backend{"python": completer{fake.New()}, "pytorch": fake.New()}})
		if err != nil {
			t.Fatal(err)
		}
		err = m.LoadAll(context.Background())
		_, pyErr := m.Get("pyauto", 1)
		_, ptErr := m.Get("ptauto", 1)
		minimal, minErr := m.Get("pyminimal", 1)
		if strict {
			if pyErr == nil || ptErr == nil || !strings.Contains(err.Error(), "strict-model-config") {
				t.Errorf("strict: models without config must fail: %v", err)
			}
			if minErr == nil || !strings.Contains(err.Error(), "at least one input") {
				t.Errorf("strict: a config without inputs must fail: %v", err)
			}
		} else {
			if pyErr != nil {
				t.Errorf("non-strict: auto-completing backend should serve pyauto: %v", err)
			}
			if minErr != nil || minimal.Config.MaxBatchSize != 4 || minimal.Spec.Inputs[0].Name != "X" {
				t.Errorf("non-strict: pyminimal not completed: %v", err)
			}
			if ptErr == nil || !strings.Contains(err.Error(), "cannot auto-complete") {
				t.Errorf("non-strict: pytorch cannot auto-complete here: %v", err)
			}
		}
		_ = m.Close(context.Background())
	}
}

func TestUnloadAndReload(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := m.LoadAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unload(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("m", 1); codeOf(err) != backend.Unavailable {
		t.Errorf("unloaded model: %v", err)
	}
	if !m.Ready() {
		t.Error("an explicitly unloaded model does not make the server unready")
	}
	writeModel(t, root, "m", "", []string{"2"})
	if err := m.Load(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if got := readyVersions(m, "m"); !slicesEqual(got, []int64{2}) {
		t.Errorf("after reload: %v", got)
	}
}

// codeOf is err's backend code, or -1 when err is nil or carries none.
func codeOf(err error) backend.Code {
	var be *backend.Error
	if !errors.As(err, &be) {
		return -1
	}
	return be.Code
}
