// Package torchtest prepares the report's simple_linear TorchScript model
// (nn.Linear(10, 5), seed 0, traced) and computes its reference forward
// with the distribution's torch, for the libtorch end-to-end tests of the
// frontends and of the commands (it sits in the module's internal/ so that
// cmd/ tests can import it). It only runs a Python interpreter as a subprocess and never links
// libtorch, so it builds everywhere, with or without cgo.
package torchtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// DefaultPython is the interpreter that has torch on the CI machine (the
// distribution's python3-torch); python3 on PATH may be another one.
const DefaultPython = "/usr/bin/python3"

// MakeModelScript writes simple_linear to sys.argv[1] the way the report's
// make_model.py does. It is the fallback when that script cannot be found.
const MakeModelScript = `
import sys, torch, torch.nn as nn
class SimpleLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 5)
    def forward(self, x):
        return self.linear(x)
torch.manual_seed(0)
torch.jit.trace(SimpleLinear().eval(), torch.randn(1, 10)).save(sys.argv[1])
`

// ReferenceScript prints the flattened forward of the TorchScript module
// sys.argv[1] on the JSON FP32 input sys.argv[2], as a JSON array.
const ReferenceScript = `
import sys, json, torch
m = torch.jit.load(sys.argv[1])
x = torch.tensor(json.loads(sys.argv[2]), dtype=torch.float32)
print(json.dumps(m(x).detach().reshape(-1).tolist()))
`

// Python returns the interpreter to use ($TBTORCH_PYTHON, else
// DefaultPython) after checking that it can import torch.
func Python(ctx context.Context) (string, error) {
	py := os.Getenv("TBTORCH_PYTHON")
	if py == "" {
		py = DefaultPython
	}
	if err := exec.CommandContext(ctx, py, "-c", "import torch").Run(); err != nil {
		return "", fmt.Errorf("%s cannot import torch (install python3-torch or set TBTORCH_PYTHON): %w", py, err)
	}
	return py, nil
}

// FindMakeModel returns the report's make_model.py: under
// $TRITONBUILD_SHARED/examples when that is set, else the copy the
// repository keeps (identical to the report's) in runtime/python/testdata,
// found from the working directory up to the module root. It returns ""
// when there is none, so that callers fall back to MakeModelScript.
func FindMakeModel() string {
	if d := os.Getenv("TRITONBUILD_SHARED"); d != "" {
		return filepath.Join(d, "examples", "make_model.py")
	}
	dir, _ := os.Getwd()
	for dir != "/" && dir != "." {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "runtime", "python", "testdata", "make_model.py")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			return ""
		}
		dir = filepath.Dir(dir)
	}
	return ""
}

// WriteSimpleLinear writes simple_linear's model.pt to path with py,
// preferring the report's own make_model.py over MakeModelScript.
func WriteSimpleLinear(ctx context.Context, py, path string) error {
	cmd := exec.CommandContext(ctx, py, "-c", MakeModelScript, path)
	if script := FindMakeModel(); script != "" {
		cmd = exec.CommandContext(ctx, py, script, path)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("writing %s with %s: %w\n%s", path, py, err, out)
	}
	return nil
}

// Reference returns torch's own forward of the TorchScript module at
// modelPath on rows (one slice per batch row), flattened row-major.
func Reference(ctx context.Context, py, modelPath string, rows [][]float32) ([]float64, error) {
	arg, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("encoding reference input: %w", err)
	}
	out, err := exec.CommandContext(ctx, py, "-c", ReferenceScript, modelPath, string(arg)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("reference forward of %s with %s: %w\n%s", modelPath, py, err, ee.Stderr)
		}
		return nil, fmt.Errorf("reference forward of %s with %s: %w", modelPath, py, err)
	}
	var want []float64
	if err := json.Unmarshal(out, &want); err != nil {
		return nil, fmt.Errorf("reference output %q of %s: %w", out, modelPath, err)
	}
	return want, nil
}

// WriteRepository lays out a model repository at root holding
// simple_linear with the given config.pbtxt text and version 1's model.pt
// written by WriteSimpleLinear, and returns that model.pt's path.
func WriteRepository(ctx context.Context, py, root, config string) (string, error) {
	vdir := filepath.Join(root, "simple_linear", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", fmt.Errorf("creating simple_linear: %w", err)
	}
	modelPath := filepath.Join(vdir, "model.pt")
	if err := WriteSimpleLinear(ctx, py, modelPath); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "simple_linear", "config.pbtxt"), []byte(config), 0o644); err != nil {
		return "", fmt.Errorf("writing simple_linear's config.pbtxt: %w", err)
	}
	return modelPath, nil
}

// Repository is the usual start of an end-to-end test: it finds the
// interpreter with torch (ending the test through testenv when there is
// none) and writes simple_linear with config.pbtxt cfg into a fresh
// repository, failing t otherwise. It returns the interpreter, the
// repository root and the model file.
func Repository(t testing.TB, cfg string) (py, root, modelPath string) {
	t.Helper()
	ctx := context.Background()
	py, err := Python(ctx)
	if err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	root = t.TempDir()
	modelPath, err = WriteRepository(ctx, py, root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return py, root, modelPath
}

// Forward is Reference for tests: torch's forward of modelPath on rows,
// failing t when it cannot be computed.
func Forward(t testing.TB, py, modelPath string, rows [][]float32) []float64 {
	t.Helper()
	want, err := Reference(context.Background(), py, modelPath, rows)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// Tolerance is how far a served output may be from torch's own forward:
// the same kernels on the same inputs, so only float32 rounding.
const Tolerance = 1e-6

// CheckClose fails t unless got matches want (torch's forward) value by
// value within Tolerance; what names the answer in the message.
func CheckClose(t testing.TB, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, torch gives %d (%v vs %v)", what, len(got), len(want), got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > Tolerance {
			t.Fatalf("%s: value %d is %v, torch gives %v (all: %v vs %v)", what, i, got[i], want[i], got, want)
		}
	}
}
