package python

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// seedRepo copies one of the report's repositories (testdata holds them
// verbatim) and writes model.pt with the report's make_model.py.
func seedRepo(t *testing.T, name string) (repo, modelDir string) {
	t.Helper()
	repo = t.TempDir()
	copyTree(t, filepath.Join("testdata", name), repo)
	modelDir = filepath.Join(repo, "simple_linear")
	makeModel, _ := filepath.Abs("testdata/make_model.py")
	if out, err := exec.Command(systemPython, makeModel, filepath.Join(modelDir, "1", "model.pt")).CombinedOutput(); err != nil {
		t.Fatalf("make_model.py: %v\n%s", err, out)
	}
	return repo, modelDir
}

// seedSpec fills a ModelSpec the way the repository does for the seed's
// config.pbtxt.
func seedSpec(repo, modelDir string, maxBatch int, params map[string]string) *backend.ModelSpec {
	cfg := map[string]any{
		"name":           "simple_linear",
		"backend":        "python",
		"max_batch_size": maxBatch,
		"input":          []any{map[string]any{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": []int{10}}},
		"output":         []any{map[string]any{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": []int{5}}},
		"instance_group": []any{map[string]any{"kind": "KIND_CPU", "count": 1}},
	}
	if len(params) > 0 {
		p := map[string]any{}
		for k, v := range params {
			p[k] = map[string]string{"string_value": v}
		}
		cfg["parameters"] = p
	}
	data, _ := json.Marshal(cfg)
	return &backend.ModelSpec{
		Name:          "simple_linear",
		Version:       1,
		ModelDir:      modelDir,
		VersionDir:    filepath.Join(modelDir, "1"),
		Repository:    repo,
		Filename:      "model.py",
		MaxBatchSize:  maxBatch,
		Inputs:        []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.FP32, Dims: []int64{10}}},
		Outputs:       []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.FP32, Dims: []int64{5}}},
		Parameters:    params,
		BackendConfig: map[string]string{},
		ConfigJSON:    data,
	}
}

// torchReference runs model.pt in /usr/bin/python3 directly, once per
// input (rows of 10), and returns each flattened output.
func torchReference(t *testing.T, modelPT string, xs ...[][]float32) [][]float32 {
	t.Helper()
	in, _ := json.Marshal(xs)
	script := `import json, sys, torch
m = torch.jit.load(sys.argv[1]).eval()
with torch.no_grad():
    print(json.dumps([m(torch.tensor(x, dtype=torch.float32)).flatten().tolist() for x in json.loads(sys.argv[2])]))`
	out, err := exec.Command(systemPython, "-c", script, modelPT, string(in)).Output()
	if err != nil {
		t.Fatalf("torch reference: %v", err)
	}
	var vals [][]float64
	if err := json.Unmarshal(out, &vals); err != nil {
		t.Fatalf("torch reference output %q: %v", out, err)
	}
	res := make([][]float32, len(vals))
	for i, v := range vals {
		for _, f := range v {
			res[i] = append(res[i], float32(f))
		}
	}
	return res
}

func rows(n int, base float32) [][]float32 {
	x := make([][]float32, n)
	for i := range x {
		x[i] = make([]float32, 10)
		for j := range x[i] {
			x[i][j] = base + 0.1*float32(i*10+j) - 0.7
		}
	}
	return x
}

func flat(x [][]float32) []float32 {
	var out []float32
	for _, r := range x {
		out = append(out, r...)
	}
	return out
}

func assertClose(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("value %d: got %v, want %v (tolerance %g)\ngot  %v\nwant %v", i, got[i], want[i], tol, got, want)
		}
	}
}

// TestSeedRepository loads the report's repository as shipped: model.py
// unchanged, a venv packed as venv.tar.gz in the model directory and named
// through $$TRITON_MODEL_DIRECTORY, a [2,10] FP32 request.
func TestSeedRepository(t *testing.T) {
	requireTorch(t)
	repo, modelDir := seedRepo(t, "seed-model-repository")
	// The env as the report built it: a venv over the interpreter that has
	// torch and numpy, packed with tar. (--without-pip only saves time.)
	work := t.TempDir()
	venv := filepath.Join(work, "venv")
	if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("creating venv: %v\n%s", err, out)
	}
	if out, err := exec.Command("tar", "czf", filepath.Join(modelDir, "venv.tar.gz"), "-C", work, "venv").CombinedOutput(); err != nil {
		t.Fatalf("packing venv: %v\n%s", err, out)
	}
	os.RemoveAll(venv) // only the archive may be used

	b, logs := newTestBackend(t, Options{Interpreter: "/nonexistent/python-must-not-be-used"})
	spec := seedSpec(repo, modelDir, 0, map[string]string{"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/venv.tar.gz"})
	inst := load(t, b, spec, 0)
	if !strings.Contains(inst.env.Interpreter, filepath.Join("python-envs")) {
		t.Errorf("interpreter %s is not from the extracted env", inst.env.Interpreter)
	}

	x := rows(2, 0)
	resps := execute(t, inst, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT__0", []int64{2, 10}, flat(x)...)}})
	out := output(t, resps[0], "OUTPUT__0")
	if len(out.Shape) != 2 || out.Shape[0] != 2 || out.Shape[1] != 5 {
		t.Fatalf("output shape %v, want [2 5]", out.Shape)
	}
	assertClose(t, fp32Values(t, out), torchReference(t, filepath.Join(modelDir, "1", "model.pt"), x)[0], 1e-6)

	if err := inst.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, line := range []string{
		`msg="Model initialized successfully on CPU." model=simple_linear version=1 instance=0`,
		`msg="Model finalized." model=simple_linear version=1 instance=0`,
	} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs.String())
		}
	}
}

// TestSeedBatched runs the tuned variant: 4 instances are 4 stub processes,
// and a batch of requests reaches execute() as one list.
func TestSeedBatched(t *testing.T) {
	requireTorch(t)
	repo, modelDir := seedRepo(t, "seed-model-repository-batched")
	b, _ := newTestBackend(t, Options{})
	spec := seedSpec(repo, modelDir, 32, nil)
	before := stubChildren(t)
	// Load the instances concurrently, as the repository does.
	insts := make([]*Instance, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := b.NewInstance(context.Background(), spec, i)
			if err == nil {
				insts[i] = inst.(*Instance)
				t.Cleanup(func() { inst.Close() })
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("NewInstance: %v", err)
		}
	}
	pids := map[int]bool{}
	for _, inst := range insts {
		pids[inst.PID()] = true
	}
	children := stubChildren(t)
	for pid := range before {
		delete(children, pid)
	}
	if len(pids) != 4 || len(children) != 4 {
		t.Fatalf("4 instances: %d distinct stub pids, %d new stub child processes; want 4 and 4", len(pids), len(children))
	}
	for pid := range pids {
		if !children[pid] {
			t.Errorf("instance pid %d is not a running child stub", pid)
		}
	}

	modelPT := filepath.Join(modelDir, "1", "model.pt")
	sizes := []int{1, 3, 2}
	var reqs []*backend.Request
	var xs [][][]float32
	for i, n := range sizes {
		x := rows(n, float32(i))
		xs = append(xs, x)
		reqs = append(reqs, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT__0", []int64{int64(n), 10}, flat(x)...)}})
	}
	want := torchReference(t, modelPT, xs...)
	for _, inst := range insts {
		resps := execute(t, inst, reqs...)
		for i, r := range resps {
			out := output(t, r, "OUTPUT__0")
			if out.Shape[0] != int64(sizes[i]) || out.Shape[1] != 5 {
				t.Fatalf("request %d: shape %v, want [%d 5]", i, out.Shape, sizes[i])
			}
			assertClose(t, fp32Values(t, out), want[i], 1e-6)
		}
	}
	for _, inst := range insts {
		if err := inst.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if left := stubChildren(t); len(left) > len(before) {
		t.Errorf("%d stub processes left after Close", len(left)-len(before))
	}
}
