package python

import (
	"os/exec"
	"path/filepath"
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
