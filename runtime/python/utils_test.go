package python

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPbUtils runs the Python unit tests of the shipped
// triton_python_backend_utils module.
func TestPbUtils(t *testing.T) {
	requirePython(t)
	stubDir, _ := filepath.Abs("stub")
	cmd := exec.Command(systemPython, "-m", "unittest", "-v", "test_pb_utils")
	cmd.Dir = "testdata"
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+stubDir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// reportTestBackendOutput is what the report's test_backend.py (its
// section 3.3, testdata/test_backend.py) prints when the module works.
const reportTestBackendOutput = "Triton Python Backend utilities imported successfully.\n" +
	"Tensor created: INPUT, shape: (3,)\n"

// TestReportTestBackendScript runs the report's script, as written (only
// the blog's typographic quotes are ASCII), in a plain interpreter with the
// module's directory on PYTHONPATH: outside any server. The install tree's
// copy is the same file (recipes/python-backend-utils.yaml); cmd/tritonbuild
// runs the script against that copy and the wheel.
func TestReportTestBackendScript(t *testing.T) {
	requirePython(t)
	stubDir, _ := filepath.Abs("stub")
	script, _ := filepath.Abs("testdata/test_backend.py")
	cmd := exec.Command(systemPython, script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+stubDir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("test_backend.py: %v\n%s%s", err, out, stderr)
	}
	if string(out) != reportTestBackendOutput {
		t.Errorf("test_backend.py printed\n%s\nwant\n%s", out, reportTestBackendOutput)
	}
	if strings.Contains(string(out), "Traceback") {
		t.Errorf("traceback in output")
	}
}
