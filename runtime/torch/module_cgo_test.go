//go:build cgo && libtorch

package torch

// Integration tests against the real libtbtorch.so and libtorch. They need
// /usr/bin/python3 with torch (the distribution's python3-torch) to write
// and check models; TBTORCH_PYTHON overrides the interpreter. The report's
// make_model.py is the repository's copy in runtime/python/testdata.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// fixtures are made once per test process: starting python with torch
// costs about a second each time.
var fixtures struct {
	dir string // removed by TestMain

	pyOnce sync.Once
	py     string
	pyErr  error

	modelOnce sync.Once
	model     string
	modelErr  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tbtorch-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtures.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func torchPython(t *testing.T) string {
	t.Helper()
	fixtures.pyOnce.Do(func() {
		fixtures.py = os.Getenv("TBTORCH_PYTHON")
		if fixtures.py == "" {
			fixtures.py = "/usr/bin/python3"
		}
		if out, err := exec.Command(fixtures.py, "-c", "import torch").CombinedOutput(); err != nil {
			fixtures.pyErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	if fixtures.pyErr != nil {
		testenv.Unavailable(t, "no python with torch at %s (set TBTORCH_PYTHON; Debian: apt-get install python3-torch): %v", fixtures.py, fixtures.pyErr)
	}
	return fixtures.py
}

// runPython runs a script with the torch interpreter and returns stdout.
// The script goes to a file because torch.jit.script reads source code.
func runPython(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	py := torchPython(t)
	file := filepath.Join(t.TempDir(), "script.py")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, append([]string{file}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	return out
}

// findMakeModel locates the report's make_model.py (torchtest.FindMakeModel:
// the repository's copy, so a clean checkout needs nothing outside itself).
func findMakeModel() (string, error) {
	p := torchtest.FindMakeModel()
	if p == "" {
		return "", errors.New("the report's make_model.py is not in runtime/python/testdata")
	}
	return p, nil
}

func makeModelScript(t *testing.T) string {
	t.Helper()
	p, err := findMakeModel()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// simpleLinear writes the report's model into a fresh repository and
// returns its spec (max_batch_size 32, INPUT__0 [10] -> OUTPUT__0 [5]).
func simpleLinear(t *testing.T) *backend.ModelSpec {
	t.Helper()
	repo := t.TempDir()
	vdir := filepath.Join(repo, "simple_linear", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	py := torchPython(t)
	script := makeModelScript(t)
	fixtures.modelOnce.Do(func() {
		fixtures.model = filepath.Join(fixtures.dir, "simple_linear.pt")
		if out, err := exec.Command(py, script, fixtures.model).CombinedOutput(); err != nil {
			fixtures.modelErr = fmt.Errorf("%s: %w\n%s", script, err, out)
		}
	})
	if fixtures.modelErr != nil {
		t.Fatal(fixtures.modelErr)
	}
	data, err := os.ReadFile(fixtures.model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, "model.pt"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return &backend.ModelSpec{
		Name: "simple_linear", Version: 1, Repository: repo,
		ModelDir: filepath.Join(repo, "simple_linear"), VersionDir: vdir,
		MaxBatchSize: 32,
		Inputs:       []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.FP32, Dims: []int64{10}}},
		Outputs:      []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.FP32, Dims: []int64{5}}},
		Parameters:   map[string]string{ParamIntraOpThreads: "1"},
	}
}

// torchForward runs the saved module in python torch on rows x 10 values
// and returns the flat float32 result.
func torchForward(t *testing.T, model string, x []float32, rows int) []float32 {
	t.Helper()
	in := filepath.Join(t.TempDir(), "x.bin")
	if err := os.WriteFile(in, f32bytes(x), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, `
import sys, numpy, torch
m = torch.jit.load(sys.argv[1])
x = torch.from_numpy(numpy.fromfile(sys.argv[2], dtype=numpy.float32).reshape(int(sys.argv[3]), -1))
with torch.no_grad():
    y = m(x)
sys.stdout.buffer.write(y.contiguous().numpy().astype(numpy.float32).tobytes())
`, model, in, fmtInt(rows))
	return f32s(out)
}

func fmtInt(n int) string { return strconv.Itoa(n) }

func values(n int, seed float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(seed)+float64(i)*0.37)) * 3
	}
	return v
}

func fp32Request(x []float32, rows int) *backend.Request {
	return &backend.Request{Inputs: []backend.Tensor{{
		Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{int64(rows), int64(len(x) / rows)}, Data: f32bytes(x),
	}}}
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, torch says %v", what, i, got[i], want[i])
		}
	}
}

func TestSimpleLinearMatchesTorch(t *testing.T) {
	spec := simpleLinear(t)
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	x := values(20, 1)
	resps, err := inst.Execute(context.Background(), []*backend.Request{fp32Request(x, 2)})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("execute: %v / %v", err, resps[0].Err)
	}
	out := resps[0].Outputs[0]
	if out.Name != "OUTPUT__0" || out.DataType != backend.FP32 || len(out.Shape) != 2 || out.Shape[0] != 2 || out.Shape[1] != 5 {
		t.Fatalf("output %s %s %v", out.Name, out.DataType, out.Shape)
	}
	want := torchForward(t, filepath.Join(spec.VersionDir, "model.pt"), x, 2)
	closeTo(t, "OUTPUT__0", f32s(out.Data), want, 1e-6)
}

func TestBatchOfThreeSplitsBack(t *testing.T) {
	spec := simpleLinear(t)
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	rows := []int{1, 3, 2}
	var all []float32
	var reqs []*backend.Request
	for i, r := range rows {
		x := values(10*r, float32(10*i))
		all = append(all, x...)
		reqs = append(reqs, fp32Request(x, r))
	}
	resps, err := inst.Execute(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := torchForward(t, filepath.Join(spec.VersionDir, "model.pt"), all, 6)
	off := 0
	for i, r := range rows {
		if resps[i].Err != nil {
			t.Fatalf("request %d: %v", i, resps[i].Err)
		}
		out := resps[i].Outputs[0]
		if out.Shape[0] != int64(r) || out.Shape[1] != 5 {
			t.Fatalf("request %d: shape %v, want [%d 5]", i, out.Shape, r)
		}
		closeTo(t, "request "+fmtInt(i), f32s(out.Data), want[off:off+5*r], 1e-6)
		off += 5 * r
	}
}

func TestMisalignedInputIsCopied(t *testing.T) {
	mod := loadSimpleLinear(t)
	x := values(10, 3)
	raw := append([]byte{0}, f32bytes(x)...)[1:] // starts at an odd address
	outs, err := mod.Forward([]backend.Tensor{{DataType: backend.FP32, Shape: []int64{1, 10}, Data: raw}})
	if err != nil {
		t.Fatal(err)
	}
	aligned, err := mod.Forward([]backend.Tensor{{DataType: backend.FP32, Shape: []int64{1, 10}, Data: f32bytes(x)}})
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "misaligned", f32s(outs[0].Data), f32s(aligned[0].Data), 0)
}

// The dtype model: input i of each type comes back doubled (bool: negated,
// since doubling a bool is not a bool).
const dtypeScript = `
import json, sys, torch
from typing import Tuple

class M(torch.nn.Module):
    def forward(self, a, b, c, d, e, f, g, h, i, j):
        return a * 2, b * 2, ~c, d * 2, e * 2, f * 2, g * 2, h * 2, i * 2, j * 2

class Echo(torch.nn.Module):
    def forward(self, x):
        return x

torch.jit.script(M()).save(sys.argv[1])
torch.jit.script(Echo()).save(sys.argv[2])
types = [("INT64", torch.int64), ("FP64", torch.float64), ("BOOL", torch.bool), ("UINT8", torch.uint8),
         ("FP16", torch.float16), ("BF16", torch.bfloat16), ("INT8", torch.int8), ("INT16", torch.int16),
         ("INT32", torch.int32), ("FP32", torch.float32)]
m = torch.jit.load(sys.argv[1])
ins = []
for k, (name, dt) in enumerate(types):
    if dt == torch.bool:
        x = torch.tensor([[True, False, True], [False, False, True]])
    else:
        x = (torch.arange(6).reshape(2, 3) - 2 + k).to(dt)
    ins.append(x)
outs = m(*ins)
def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes().hex()
print(json.dumps([{"dtype": types[k][0], "in": raw(ins[k]), "out": raw(outs[k]), "out_dtype": str(outs[k].dtype)}
                  for k in range(len(types))]))
`

func TestDtypesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	vdir := filepath.Join(dir, "dtypes", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	echo := filepath.Join(dir, "echo.pt")
	var cases []struct {
		DType    string `json:"dtype"`
		In       string `json:"in"`
		Out      string `json:"out"`
		OutDtype string `json:"out_dtype"`
	}
	if err := json.Unmarshal(runPython(t, dtypeScript, filepath.Join(vdir, "model.pt"), echo), &cases); err != nil {
		t.Fatal(err)
	}
	spec := &backend.ModelSpec{Name: "dtypes", Version: 1, ModelDir: filepath.Dir(vdir), VersionDir: vdir}
	req := &backend.Request{}
	for i, c := range cases {
		name := "__" + fmtInt(i)
		dt := backend.DataType(c.DType)
		spec.Inputs = append(spec.Inputs, backend.TensorSpec{Name: "IN" + name, DataType: dt, Dims: []int64{2, 3}})
		spec.Outputs = append(spec.Outputs, backend.TensorSpec{Name: "OUT" + name, DataType: dt, Dims: []int64{2, 3}})
		data, err := hex.DecodeString(c.In)
		if err != nil {
			t.Fatal(err)
		}
		req.Inputs = append(req.Inputs, backend.Tensor{Name: "IN" + name, DataType: dt, Shape: []int64{2, 3}, Data: data})
	}
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	resps, err := inst.Execute(context.Background(), []*backend.Request{req})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("execute: %v / %v", err, resps[0].Err)
	}
	for i, c := range cases {
		out := resps[0].Outputs[i]
		if string(out.DataType) != c.DType || out.Shape[0] != 2 || out.Shape[1] != 3 {
			t.Errorf("%s: output %s %v (torch made %s)", c.DType, out.DataType, out.Shape, c.OutDtype)
		}
		if got := hex.EncodeToString(out.Data); got != c.Out {
			t.Errorf("%s: got %s, torch says %s", c.DType, got, c.Out)
		}
	}

	// An output that is the input itself must still be a copy.
	mod, err := LoadModule(ModuleOptions{Path: echo})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	in := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	// A scalar (no dimensions) on purpose: it exercises the empty-shape path.
	outs, err := mod.Forward([]backend.Tensor{{DataType: backend.Int64, Shape: []int64{}, Data: in}})
	if err != nil {
		t.Fatal(err)
	}
	in[0] = 99
	if len(outs[0].Shape) != 0 || binary.LittleEndian.Uint64(outs[0].Data) != 0x0807060504030201 {
		t.Fatalf("echo output aliases its input: %v", outs[0].Data)
	}
}

func TestUnsupportedDtypeReachesC(t *testing.T) {
	spec := simpleLinear(t)
	mod, err := LoadModule(ModuleOptions{Path: filepath.Join(spec.VersionDir, "model.pt")})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	_, err = mod.Forward([]backend.Tensor{{DataType: backend.Uint32, Shape: []int64{1, 10}, Data: make([]byte, 40)}})
	var be *backend.Error
	if !asBackendError(err, &be) || be.Code != backend.Unsupported || !strings.Contains(be.Msg, "UINT32 is not supported by libtorch 1.13") {
		t.Fatalf("UINT32 forward: %#v", err)
	}
}

func TestBadOpLibrary(t *testing.T) {
	spec := simpleLinear(t)
	missing := filepath.Join(t.TempDir(), "libmissing_ops.so")
	spec.OpLibraries = []string{missing}
	_, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err == nil || strings.Count(err.Error(), missing) != 1 || !strings.Contains(err.Error(), "No such file") {
		t.Fatalf("missing library: %v (want the path named once)", err)
	}

	garbage := filepath.Join(t.TempDir(), "libgarbage_ops.so")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not an ELF file\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.OpLibraries = nil
	spec.BackendConfig = map[string]string{ConfigOpLibraries: garbage}
	_, err = New(Options{}).NewInstance(context.Background(), spec, 0)
	if err == nil || strings.Count(err.Error(), garbage) != 1 || !strings.Contains(err.Error(), "ELF") {
		t.Fatalf("garbage library: %v (want the path named once)", err)
	}
}

func TestCustomOpLibrary(t *testing.T) {
	lib := filepath.Join(filepath.Dir(LibraryPath()), "libtbtorch_testops.so")
	if _, err := os.Stat(lib); err != nil {
		testenv.Unavailable(t, "test op library not built next to %s (cmake -DTBTORCH_TEST_OPS=ON): %v", LibraryPath(), err)
	}
	dir := t.TempDir()
	vdir := filepath.Join(dir, "custom", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	runPython(t, `
import sys, torch
torch.ops.load_library(sys.argv[1])
class M(torch.nn.Module):
    def forward(self, x):
        return torch.ops.tbtest.scale_add(x, 3.0)
torch.jit.script(M()).save(sys.argv[2])
`, lib, filepath.Join(vdir, "model.pt"))
	spec := &backend.ModelSpec{
		Name: "custom", Version: 1, ModelDir: filepath.Dir(vdir), VersionDir: vdir,
		Inputs:  []backend.TensorSpec{{Name: "x", DataType: backend.FP32, Dims: []int64{4}}},
		Outputs: []backend.TensorSpec{{Name: "y", DataType: backend.FP32, Dims: []int64{4}}},
	}
	// Without the library the module cannot be deserialized (checkable only
	// while this process has not loaded it, i.e. not under -count > 1).
	if !slices.Contains(loadedLibraries(), lib) {
		if _, err := New(Options{}).NewInstance(context.Background(), spec, 0); err == nil || !strings.Contains(err.Error(), "scale_add") {
			t.Fatalf("load without op library: %v", err)
		}
	}
	spec.OpLibraries = []string{lib}
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	x := []float32{0, 1, -2, 0.5}
	resps, err := inst.Execute(context.Background(), []*backend.Request{{Inputs: []backend.Tensor{{Name: "x", DataType: backend.FP32, Shape: []int64{4}, Data: f32bytes(x)}}}})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("execute: %v / %v", err, resps[0].Err)
	}
	got := f32s(resps[0].Outputs[0].Data)
	for i := range x {
		if got[i] != x[i]*3+1 {
			t.Fatalf("y = %v, want x*3+1 for x = %v", got, x)
		}
	}

	// A second copy of the library registers the namespace again; libtorch
	// throws from its static initializer and that must come back as an error.
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	clash := filepath.Join(dir, "libtbtest_clash.so")
	if err := os.WriteFile(clash, data, 0o755); err != nil {
		t.Fatal(err)
	}
	err = LoadLibrary(context.Background(), clash)
	if err == nil || !strings.Contains(err.Error(), clash) || !strings.Contains(err.Error(), "tbtest") {
		t.Fatalf("clashing library: %v", err)
	}
	t.Logf("clashing library: %v", err)
	if err := LoadLibrary(context.Background(), lib); err != nil {
		t.Fatalf("loading again after a failed load: %v", err)
	}
}

func TestWrongNumberOfInputs(t *testing.T) {
	spec := simpleLinear(t)
	spec.Inputs = append(spec.Inputs, backend.TensorSpec{Name: "INPUT__1", DataType: backend.FP32, Dims: []int64{10}})
	_, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	var be *backend.Error
	if !asBackendError(err, &be) || be.Code != backend.InvalidArg ||
		!strings.Contains(be.Msg, "config declares 2 inputs but the model's forward() takes 1") {
		t.Fatalf("two inputs for a one-input model: %#v", err)
	}

	// The C side refuses too, when called directly.
	mod, err := LoadModule(ModuleOptions{Path: filepath.Join(spec.VersionDir, "model.pt")})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	x := backend.Tensor{DataType: backend.FP32, Shape: []int64{1, 10}, Data: make([]byte, 40)}
	if _, err := mod.Forward([]backend.Tensor{x, x}); err == nil || !strings.Contains(err.Error(), "forward() takes 1 inputs, got 2") {
		t.Fatalf("forward with 2 inputs: %v", err)
	}
	if _, err := mod.Forward([]backend.Tensor{{DataType: backend.FP32, Shape: []int64{1, 10}, Data: make([]byte, 36)}}); err == nil || !strings.Contains(err.Error(), "36 bytes given") {
		t.Fatalf("short buffer: %v", err)
	}
	// libtorch's own errors come back as errors, not crashes.
	if _, err := mod.Forward([]backend.Tensor{{DataType: backend.FP32, Shape: []int64{1, 7}, Data: make([]byte, 28)}}); err == nil || !strings.Contains(err.Error(), "forward") {
		t.Fatalf("wrong width: %v", err)
	}
}

func TestMissingAndBrokenModelFile(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadModule(ModuleOptions{Path: filepath.Join(dir, "model.pt")})
	var be *backend.Error
	if !asBackendError(err, &be) || be.Code != backend.NotFound || !strings.Contains(be.Msg, filepath.Join(dir, "model.pt")) {
		t.Fatalf("missing model: %#v", err)
	}
	broken := filepath.Join(dir, "broken.pt")
	if err := os.WriteFile(broken, []byte("PK\x03\x04 not really a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModule(ModuleOptions{Path: broken}); err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("broken model: %v", err)
	}
}

func TestInterOpThreadsOncePerProcess(t *testing.T) {
	if err := SetInterOpThreads(1); err != nil {
		t.Fatalf("first set: %v", err)
	}
	if err := SetInterOpThreads(1); err != nil {
		t.Fatalf("same size again: %v", err)
	}
	err := SetInterOpThreads(3)
	var be *backend.Error
	if !asBackendError(err, &be) || be.Code != backend.Unsupported || !strings.Contains(be.Msg, "already fixed at 1") {
		t.Fatalf("another size: %#v", err)
	}
	// A model asking for another size still loads; the backend logs why.
	spec := simpleLinear(t)
	spec.Parameters[ParamInterOpThreads] = "2"
	var logged bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	inst, err := b.NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close()
	if lines := notBLAS(logged.String()); len(lines) != 1 ||
		!strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "model=simple_linear") || !strings.Contains(lines[0], "already fixed at 1") {
		t.Fatalf("logged %q, want one warning naming the model and the reason", logged.String())
	}
}

// notBLAS is the lines logged besides the backend's one report of its BLAS.
func notBLAS(logged string) []string {
	return slices.DeleteFunc(strings.Split(strings.TrimSpace(logged), "\n"), func(l string) bool { return strings.Contains(l, "msg=\"libtorch BLAS") })
}

// TestBLASIsTuned: the libtorch the stack is built and tested with runs its
// matrix products on a tuned BLAS (the Makefile installs OpenBLAS; the
// reference BLAS a distribution's libblas3 is makes a Linear layer about
// ten times slower), and the backend says which one, once, at its first
// model.
func TestBLASIsTuned(t *testing.T) {
	var logged bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	for i := range 2 {
		inst, err := b.NewInstance(context.Background(), simpleLinear(t), i)
		if err != nil {
			t.Fatal(err)
		}
		inst.Close()
	}
	name, tuned := BLAS()
	if name == "" {
		t.Fatal("no BLAS found under libtorch's sgemm_")
	}
	if n := strings.Count(logged.String(), "msg=\"libtorch BLAS"); n != 1 || !strings.Contains(logged.String(), name) {
		t.Errorf("logged %q: want the BLAS (%s) named once", logged.String(), name)
	}
	if !tuned {
		if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "libopenblas0-openmp") {
			t.Errorf("an untuned BLAS (%s) logged %q: want a warning naming the package to install", name, logged.String())
		}
		testenv.Unavailable(t, "libtorch's BLAS is %s, not a tuned one (the Makefile's DEB_PACKAGES install libopenblas0-openmp)", name)
	}
	t.Logf("BLAS: %s", name)
}

// BenchmarkForward times Module.Forward on simple_linear at batch 8 with one
// intra-op thread (bench/torch compares the same against Python).
func BenchmarkForward(b *testing.B) {
	py := os.Getenv("TBTORCH_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	script, err := findMakeModel()
	if err != nil {
		b.Fatal(err)
	}
	testenv.NeedPython(b, py, "torch")
	model := filepath.Join(b.TempDir(), "model.pt")
	if out, err := exec.Command(py, script, model).CombinedOutput(); err != nil {
		b.Fatalf("making simple_linear with %s: %v\n%s", py, err, out)
	}
	mod, err := LoadModule(ModuleOptions{Path: model, IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer mod.Close()
	in := []backend.Tensor{{DataType: backend.FP32, Shape: []int64{8, 10}, Data: f32bytes(values(80, 0))}}
	run := func(b *testing.B, fwd forwarder) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fwd.Forward(in); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("module", func(b *testing.B) { run(b, mod) })
	// Under a host policy each forward crosses to the instance's confined
	// thread and back: one wake-up each way, on the caller's CPU or not.
	for _, cpu := range testenv.AllowedCPUs(b) {
		b.Run("placed-cpu"+strconv.Itoa(cpu), func(b *testing.B) {
			placed, err := placeForwards(backend.HostPolicy{CPUs: []int{cpu}}, opened(mod))
			if err != nil {
				b.Fatal(err)
			}
			defer placed.stop()
			run(b, placed)
		})
	}
}

func TestInferenceModeAndOptimizationParameters(t *testing.T) {
	dir := t.TempDir()
	vdir := filepath.Join(dir, "mode", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Reports whether its input is an inference tensor, which it is exactly
	// when forward runs under c10::InferenceMode.
	runPython(t, `
import sys, torch
class M(torch.nn.Module):
    def forward(self, x):
        if x.is_inference():
            return x * 0 + 1
        return x * 0
torch.jit.script(M()).save(sys.argv[1])
`, filepath.Join(vdir, "model.pt"))
	spec := &backend.ModelSpec{
		Name: "mode", Version: 1, ModelDir: filepath.Dir(vdir), VersionDir: vdir,
		Inputs:  []backend.TensorSpec{{Name: "x", DataType: backend.FP32, Dims: []int64{2}}},
		Outputs: []backend.TensorSpec{{Name: "y", DataType: backend.FP32, Dims: []int64{2}}},
	}
	run := func(params map[string]string) float32 {
		t.Helper()
		spec.Parameters = params
		inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close()
		resps, err := inst.Execute(context.Background(), []*backend.Request{{Inputs: []backend.Tensor{
			{Name: "x", DataType: backend.FP32, Shape: []int64{2}, Data: f32bytes([]float32{5, 6})}}}})
		if err != nil || resps[0].Err != nil {
			t.Fatalf("%v: %v / %v", params, err, resps[0].Err)
		}
		return f32s(resps[0].Outputs[0].Data)[0]
	}
	if got := run(nil); got != 1 {
		t.Fatalf("default: forward did not run under InferenceMode (%v)", got)
	}
	if got := run(map[string]string{ParamInferenceMode: "false", ParamDisableOptimizedExecution: "true"}); got != 0 {
		t.Fatalf("INFERENCE_MODE=false: forward ran under InferenceMode (%v)", got)
	}
	if got := run(map[string]string{ParamInferenceMode: "TRUE", ParamDisableOptimizedExecution: "false"}); got != 1 {
		t.Fatalf("INFERENCE_MODE=TRUE: %v", got)
	}
	spec.Parameters = map[string]string{ParamInferenceMode: "maybe"}
	if _, err := New(Options{}).NewInstance(context.Background(), spec, 0); err == nil || !strings.Contains(err.Error(), "INFERENCE_MODE") {
		t.Fatalf("bad INFERENCE_MODE: %v", err)
	}
}

// Each instance owns its module; instances of one model run in parallel.
func TestInstancesRunConcurrently(t *testing.T) {
	spec := simpleLinear(t)
	b := New(Options{})
	x := values(40, 7)
	var want []float32
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	results := make([][]float32, 3)
	for i := 0; i < 3; i++ {
		inst, err := b.NewInstance(context.Background(), spec, i)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close()
		if i == 0 {
			resps, err := inst.Execute(context.Background(), []*backend.Request{fp32Request(x, 4)})
			if err != nil || resps[0].Err != nil {
				t.Fatalf("execute: %v / %v", err, resps[0].Err)
			}
			want = f32s(resps[0].Outputs[0].Data)
		}
		wg.Add(1)
		go func(i int, inst backend.Instance) {
			defer wg.Done()
			for n := 0; n < 200; n++ {
				resps, err := inst.Execute(context.Background(), []*backend.Request{fp32Request(x, 4)})
				if err == nil {
					err = resps[0].Err
				}
				if err != nil {
					errs <- err
					return
				}
				results[i] = f32s(resps[0].Outputs[0].Data)
			}
		}(i, inst)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, r := range results {
		closeTo(t, "instance "+fmtInt(i), r, want, 0)
	}
}

// TestForwardUnderGC runs forwards on fresh, short-lived input buffers
// while the garbage collector cycles. The C argument array once kept the
// last call's Go pointer after the call; overwriting it during a GC cycle
// handed an already freed buffer to the write barrier, and the runtime
// died with "found pointer to free object".
func TestForwardUnderGC(t *testing.T) {
	mod := loadSimpleLinear(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 100000; i++ {
		// Fresh buffers of several size classes (one row is the 40 bytes
		// of a JSON-decoded request), so a freed one is not at once reused.
		rows := 1 + i%5
		in := []backend.Tensor{{DataType: backend.FP32, Shape: []int64{int64(rows), 10}, Data: f32bytes(values(10*rows, float32(i%7)))}}
		if _, err := mod.Forward(in); err != nil {
			t.Fatal(err)
		}
		if p := mod.heldInputPointer(); p != nil {
			t.Fatalf("after forward %d the C argument array still points at Go memory %p", i, p)
		}
	}
}

// The forward path calls the TorchScript function itself rather than
// Method::operator(); it must still fill in default arguments and check
// the schema, and the module's reused result must not leak one forward's
// outputs into the next, for small outputs (kept until the next forward)
// and large ones (released at once).
func TestForwardDefaultsAndReusedResult(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.pt")
	runPython(t, `
import sys, torch
from typing import Optional
class M(torch.nn.Module):
    def forward(self, x, y: Optional[torch.Tensor] = None):
        if y is None:
            return x + 1
        return x + y
torch.jit.script(M()).save(sys.argv[1])
`, model)
	mod, err := LoadModule(ModuleOptions{Path: model, IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	if mod.NumRequiredInputs() != 1 || len(mod.InputNames()) != 2 {
		t.Fatalf("inputs %v, required %d", mod.InputNames(), mod.NumRequiredInputs())
	}
	small := backend.Tensor{DataType: backend.FP32, Shape: []int64{3}, Data: f32bytes([]float32{1, 2, 3})}
	outs, err := mod.Forward([]backend.Tensor{small})
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "default y", f32s(outs[0].Data), []float32{2, 3, 4}, 0)
	outs2, err := mod.Forward([]backend.Tensor{small, small})
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "given y", f32s(outs2[0].Data), []float32{2, 4, 6}, 0)
	closeTo(t, "earlier output after the next forward", f32s(outs[0].Data), []float32{2, 3, 4}, 0)
	// A wrong type for y is refused by the schema check, not a crash.
	if _, err := mod.Forward([]backend.Tensor{small, {DataType: backend.FP32, Shape: []int64{2}, Data: make([]byte, 8)}}); err == nil {
		t.Fatal("mismatched shapes: no error")
	}
	n := releaseOutputsAbove/4 + 16 // output larger than what is kept between forwards
	big := make([]float32, n)
	for i := range big {
		big[i] = float32(i % 1000)
	}
	for round := 0; round < 3; round++ {
		outs, err := mod.Forward([]backend.Tensor{{DataType: backend.FP32, Shape: []int64{int64(n)}, Data: f32bytes(big)}})
		if err != nil {
			t.Fatal(err)
		}
		got := f32s(outs[0].Data)
		if len(got) != n || got[0] != 1 || got[n-1] != big[n-1]+1 {
			t.Fatalf("round %d: large output: len %d, first %v, last %v", round, len(got), got[0], got[len(got)-1])
		}
	}
	// And a small forward afterwards still works on the reused result.
	outs, err = mod.Forward([]backend.Tensor{small})
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "after large outputs", f32s(outs[0].Data), []float32{2, 3, 4}, 0)
}

// A one-output forward allocates only what it returns in Go memory: the
// output slice, its shape and its data. Everything else is reused C memory.
func TestForwardAllocations(t *testing.T) {
	mod := loadSimpleLinear(t)
	in := []backend.Tensor{{DataType: backend.FP32, Shape: []int64{8, 10}, Data: f32bytes(values(80, 0))}}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := mod.Forward(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("Forward allocates %.1f Go objects per call, want at most 3 (outputs, shape, data)", allocs)
	}
}

// A one-request Execute allocates the response and its outputs and nothing
// else: the validated request, its forward group and the argument arrays
// are reused instance memory.
func TestExecuteAllocations(t *testing.T) {
	spec := simpleLinear(t)
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	reqs := []*backend.Request{fp32Request(values(10, 1), 1)}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := inst.Execute(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
	})
	// resps, the Response, the outputs' backing array and the per-request
	// slice of it, plus Forward's three.
	if allocs > 7 {
		t.Fatalf("Execute of one request allocates %.1f Go objects, want at most 7", allocs)
	}
}

// loadSimpleLinear loads the report's model as a Module with one intra-op
// thread, closed when the test ends.
func loadSimpleLinear(t *testing.T) *Module {
	t.Helper()
	spec := simpleLinear(t)
	mod, err := LoadModule(ModuleOptions{Path: filepath.Join(spec.VersionDir, "model.pt"), IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Close() })
	return mod
}

// stringsScript saves a module taking a List[str] and a tensor and
// returning both transformed, as a model served with TYPE_STRING tensors
// by Triton's libtorch backend is written.
const stringsScript = `import sys, torch
from typing import List, Tuple
class M(torch.nn.Module):
    def forward(self, names: List[str], x: torch.Tensor) -> Tuple[List[str], torch.Tensor]:
        out: List[str] = []
        for n in names:
            out.append(n.upper() + "!")
        return out, x * 2
torch.jit.script(M()).save(sys.argv[1])
`

func bytesData(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// TestBytesAsListOfStrings: BYTES inputs reach forward() as a List[str] of
// the batch's elements and a List[str] output comes back split per
// request, one string per row, with shape [rows].
func TestBytesAsListOfStrings(t *testing.T) {
	dir := t.TempDir()
	vdir := filepath.Join(dir, "strings", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	runPython(t, stringsScript, filepath.Join(vdir, "model.pt"))
	spec := &backend.ModelSpec{
		Name: "strings", Version: 1, ModelDir: filepath.Dir(vdir), VersionDir: vdir, MaxBatchSize: 4,
		Inputs: []backend.TensorSpec{
			{Name: "INPUT__0", DataType: backend.Bytes, Dims: []int64{1}},
			{Name: "INPUT__1", DataType: backend.FP32, Dims: []int64{1}},
		},
		Outputs: []backend.TensorSpec{
			{Name: "OUTPUT__0", DataType: backend.Bytes, Dims: []int64{1}},
			{Name: "OUTPUT__1", DataType: backend.FP32, Dims: []int64{1}},
		},
	}
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	req := func(x []float32, names ...string) *backend.Request {
		rows := int64(len(names))
		return &backend.Request{Inputs: []backend.Tensor{
			{Name: "INPUT__0", DataType: backend.Bytes, Shape: []int64{rows, 1}, Data: bytesData(names...)},
			{Name: "INPUT__1", DataType: backend.FP32, Shape: []int64{rows, 1}, Data: f32bytes(x)},
		}}
	}
	reqs := []*backend.Request{req([]float32{1}, "ab"), req([]float32{2, 3}, "cd", "")}
	for _, batch := range [][]*backend.Request{reqs, reqs[1:]} {
		resps, err := inst.Execute(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		want := [][]string{{"AB!"}, {"CD!", "!"}}[len(reqs)-len(batch):]
		for i, r := range resps {
			if r.Err != nil {
				t.Fatalf("request %d: %v", i, r.Err)
			}
			s := r.Outputs[0]
			if s.DataType != backend.Bytes || len(s.Shape) != 1 || s.Shape[0] != int64(len(want[i])) || string(s.Data) != string(bytesData(want[i]...)) {
				t.Errorf("batch of %d, request %d: OUTPUT__0 %s %v %q, want %q", len(batch), i, s.DataType, s.Shape, s.Data, want[i])
			}
		}
	}
	// A malformed BYTES input fails alone, with the element named.
	bad := req([]float32{1}, "ab")
	bad.Inputs[0].Data = bad.Inputs[0].Data[:5]
	resps, err := inst.Execute(context.Background(), []*backend.Request{bad})
	if err != nil || resps[0].Err == nil || !strings.Contains(resps[0].Err.Error(), "BYTES element 0 claims 2 bytes") {
		t.Fatalf("malformed BYTES: %v / %v", err, resps[0].Err)
	}
}

// raggedScript saves the ragged-batching guide's kind of module: a ragged
// INPUT flattened to 1-D, INDEX its accumulated element counts; it returns
// the input doubled (scattered back by a batch output) and each request's
// sum.
const raggedScript = `import sys, torch
from typing import List, Tuple
class M(torch.nn.Module):
    def forward(self, INPUT: torch.Tensor, INDEX: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        sums: List[torch.Tensor] = []
        start = 0
        for i in range(INDEX.size(0)):
            end = int(INDEX[i])
            sums.append(INPUT[start:end].sum())
            start = end
        return INPUT * 2, torch.stack(sums).reshape(-1, 1)
torch.jit.script(M()).save(sys.argv[1])
`

// TestRaggedBatchThroughLibtorch: three requests of 3, 4 and 5 elements
// run as one forward of a [12] INPUT with INDEX [3, 7, 12] passed as the
// forward() argument of that name, and come back in their own shapes.
func TestRaggedBatchThroughLibtorch(t *testing.T) {
	dir := t.TempDir()
	vdir := filepath.Join(dir, "ragged", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	runPython(t, raggedScript, filepath.Join(vdir, "model.pt"))
	spec := &backend.ModelSpec{
		Name: "ragged", Version: 1, ModelDir: filepath.Dir(vdir), VersionDir: vdir, MaxBatchSize: 8,
		Inputs: []backend.TensorSpec{{Name: "INPUT", DataType: backend.FP32, Dims: []int64{-1}, Ragged: true}},
		Outputs: []backend.TensorSpec{
			{Name: "DOUBLED", DataType: backend.FP32, Dims: []int64{-1}},
			{Name: "SUM", DataType: backend.FP32, Dims: []int64{1}},
		},
		BatchInputs:  []backend.BatchInput{{Kind: backend.BatchAccumulatedElementCount, Targets: []string{"INDEX"}, DataType: backend.Int32, Source: "INPUT"}},
		BatchOutputs: []backend.BatchOutput{{Targets: []string{"DOUBLED"}, Source: "INPUT"}},
	}
	inst, err := New(Options{}).NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	var reqs []*backend.Request
	for _, n := range []int{3, 4, 5} {
		x := values(n, float32(n))
		reqs = append(reqs, &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT", DataType: backend.FP32, Shape: []int64{1, int64(n)}, Data: f32bytes(x)}}})
	}
	resps, err := inst.Execute(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resps {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
		in := f32s(reqs[i].Inputs[0].Data)
		d, s := r.Outputs[0], r.Outputs[1]
		if fmt.Sprint(d.Shape) != fmt.Sprint(reqs[i].Inputs[0].Shape) || fmt.Sprint(s.Shape) != "[1 1]" {
			t.Fatalf("request %d: shapes %v %v, want %v [1 1]", i, d.Shape, s.Shape, reqs[i].Inputs[0].Shape)
		}
		var sum float64
		for j, v := range f32s(d.Data) {
			if v != 2*in[j] {
				t.Fatalf("request %d DOUBLED[%d] = %v, want %v", i, j, v, 2*in[j])
			}
			sum += float64(in[j])
		}
		if got := f32s(s.Data)[0]; math.Abs(float64(got)-sum) > 1e-4 {
			t.Errorf("request %d SUM = %v, want %v (INDEX wrong?)", i, got, sum)
		}
	}
}

// confinedThreads lists this process's threads that may run on cpu alone.
func confinedThreads(t *testing.T, cpu int) []int {
	t.Helper()
	var out []int
	for tid, cpus := range testenv.ThreadCPUs(t, os.Getpid()) {
		if cpus == strconv.Itoa(cpu) {
			out = append(out, tid)
		}
	}
	return out
}

// wideSpec is a pytorch model whose forward is elementwise over 4 x
// 65536 values, which at::parallel_for splits between the two intra-op
// threads it asks for: a forward that starts the calling thread's team.
func wideSpec(t *testing.T) *backend.ModelSpec {
	t.Helper()
	const n = 1 << 16
	repo := t.TempDir()
	vdir := filepath.Join(repo, "wide", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	runPython(t, `
import sys, torch
class Wide(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x * 2.0 + 1.0)
torch.jit.script(Wide()).save(sys.argv[1])
`, filepath.Join(vdir, "model.pt"))
	return &backend.ModelSpec{
		Name: "wide", Version: 1, Repository: repo, ModelDir: filepath.Join(repo, "wide"), VersionDir: vdir,
		MaxBatchSize: 4,
		Inputs:       []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.FP32, Dims: []int64{n}}},
		Outputs:      []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.FP32, Dims: []int64{n}}},
		Parameters:   map[string]string{ParamIntraOpThreads: "2"},
	}
}

// TestHostPolicyConfinesForwards: an instance under a host policy runs its
// forwards on a thread confined to the policy's CPUs, and libtorch's
// intra-op team, which that thread starts at its first parallel forward,
// inherits them (as under Triton, where the policy is set on the
// instance's thread). The forward's result is torch's.
func TestHostPolicyConfinesForwards(t *testing.T) {
	cpu := testenv.ConfinableCPU(t)
	if before := confinedThreads(t, cpu); len(before) > 0 {
		t.Fatalf("threads %v already keep to CPU %d", before, cpu)
	}
	spec := wideSpec(t)
	spec.InstancePolicies = []backend.HostPolicy{{}, {CPUs: []int{cpu}}}
	b := New(Options{})
	if !b.PlacesInstances() {
		t.Fatal("the pytorch backend does not place instances")
	}
	inst, err := b.NewInstance(context.Background(), spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	x := values(4<<16, 3)
	resps, err := inst.Execute(context.Background(), []*backend.Request{fp32Request(x, 4)})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("execute: %v / %v", err, resps[0].Err)
	}
	want := make([]float32, len(x))
	for i, v := range x {
		want[i] = float32(math.Tanh(float64(v*2 + 1)))
	}
	closeTo(t, "OUTPUT__0", f32s(resps[0].Outputs[0].Data), want, 1e-5)
	if confined := confinedThreads(t, cpu); len(confined) < 2 {
		t.Errorf("threads %v keep to CPU %d after a parallel forward: want the instance's thread and its intra-op team", confined, cpu)
	}

	// Instance 0 has no policy: nothing is confined for it.
	free, err := b.NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	if _, ok := free.(*instance).fwd.(*Module); !ok {
		t.Errorf("an instance without a host policy forwards through %T, want the module itself", free.(*instance).fwd)
	}

	spec.InstancePolicies = []backend.HostPolicy{{CPUs: []int{backend.MaxCPU}}}
	if cpu == backend.MaxCPU {
		return
	}
	_, err = b.NewInstance(context.Background(), spec, 0)
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.InvalidArg ||
		!strings.Contains(err.Error(), `model "wide" version 1 instance 0: cannot confine the instance's thread to CPUs 1023 (its host policy's cpu-cores)`) {
		t.Fatalf("an instance under a policy of CPU %d: %v", backend.MaxCPU, err)
	}
}

// TestHostPolicyBindsForwardMemory: an instance under a host policy with
// numa-node runs its forwards on a thread whose memory is bound to the
// node, and the intra-op team that thread starts inherits the binding, as
// under Triton, which binds the instance's thread; the server's other
// threads keep the default policy. A node the kernel refuses fails the
// load naming the setting.
func TestHostPolicyBindsForwardMemory(t *testing.T) {
	node := testenv.MemoryNode(t)
	want := "bind:" + strconv.Itoa(node)
	bound := func() (n int) {
		for _, policy := range testenv.ThreadMemoryPolicies(t, os.Getpid()) {
			if policy == want {
				n++
			}
		}
		return n
	}
	if n := bound(); n > 0 {
		t.Fatalf("%d threads are already bound to node %d", n, node)
	}
	spec := wideSpec(t)
	spec.InstancePolicies = []backend.HostPolicy{{NUMANodes: []int{node}}}
	b := New(Options{})
	inst, err := b.NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	resps, err := inst.Execute(context.Background(), []*backend.Request{fp32Request(values(4<<16, 3), 4)})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("execute: %v / %v", err, resps[0].Err)
	}
	if n := bound(); n < 2 {
		t.Errorf("%d threads bound to node %d after a parallel forward: want the instance's thread and its intra-op team", n, node)
	}

	// A module that fails to load fails the same way under a policy, where
	// it loads on the instance's thread.
	broken := *spec
	broken.Filename = "missing.pt"
	broken.InstancePolicies = nil
	_, plain := b.NewInstance(context.Background(), &broken, 0)
	broken.InstancePolicies = spec.InstancePolicies
	_, placedErr := b.NewInstance(context.Background(), &broken, 0)
	if plain == nil || placedErr == nil || plain.Error() != placedErr.Error() {
		t.Errorf("a missing module: %v under the policy, %v without", placedErr, plain)
	}

	spec.InstancePolicies = []backend.HostPolicy{{NUMANodes: []int{backend.MaxNUMANode}}}
	_, err = b.NewInstance(context.Background(), spec, 0)
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.InvalidArg ||
		!strings.Contains(err.Error(), `model "wide" version 1 instance 0: the instance's thread (its host policy's numa-node): cannot bind memory to NUMA nodes 1023`) {
		t.Fatalf("an instance under a policy of node %d: %v", backend.MaxNUMANode, err)
	}
}
