package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// reportTestBackend is the report's test_backend.py (its section 3.3) and
// what it prints when the module works.
const (
	reportTestBackend       = "../../runtime/python/testdata/test_backend.py"
	reportTestBackendOutput = "Triton Python Backend utilities imported successfully.\n" +
		"Tensor created: INPUT, shape: (3,)\n"
)

// runPython runs py with the environment additions in a fresh directory
// (so nothing of the source tree is importable) and returns stdout.
func runPython(t *testing.T, py string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(py, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), append([]string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", py, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// The install tree of python-backend-utils (which tritonserver depends on,
// so every prefix and image has it) holds the module at backends/python/
// and a wheel beside it. The report's test_backend.py runs as written with
// /usr/bin/python3 against the installed copy, through PYTHONPATH, and
// against the wheel pip-installed offline into a venv.
func TestPythonBackendUtilsInstallTree(t *testing.T) {
	testenv.NeedPython(t, hostPython, "numpy", "pip", "venv")
	script, err := filepath.Abs(reportTestBackend)
	if err != nil {
		t.Fatal(err)
	}
	dir := installUtils(t)
	wheel := filepath.Join(dir, "triton_python_backend_utils-0.1.0-py3-none-any.whl")
	for _, f := range []string{filepath.Join(dir, "triton_python_backend_utils.py"), wheel} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("install tree: %s: %v %v", f, st, err)
		}
	}
	src, _ := os.ReadFile("../../runtime/python/stub/triton_python_backend_utils.py")
	if got, _ := os.ReadFile(filepath.Join(dir, "triton_python_backend_utils.py")); string(got) != string(src) {
		t.Errorf("the installed module differs from the one the server embeds")
	}

	where := "import triton_python_backend_utils as m; print(m.__file__)"
	pp := "PYTHONPATH=" + dir
	if got := runPython(t, hostPython, []string{pp}, "-c", where); strings.TrimSpace(got) != filepath.Join(dir, "triton_python_backend_utils.py") {
		t.Fatalf("PYTHONPATH=%s imports the module from %s", dir, got)
	}
	if got := runPython(t, hostPython, []string{pp}, script); got != reportTestBackendOutput {
		t.Errorf("test_backend.py against the install tree printed\n%s\nwant\n%s", got, reportTestBackendOutput)
	}

	// The report's step: pip install the package into an env. Offline:
	// numpy comes from the system site packages.
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(hostPython, "-m", "venv", "--system-site-packages", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	vpy := filepath.Join(venv, "bin", "python3")
	if out, err := exec.Command(hostPython, "-m", "pip", "--isolated", "--python", vpy, "install", "--no-index",
		"--no-compile", "--disable-pip-version-check", wheel).CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v\n%s", wheel, err, out)
	}
	if got := strings.TrimSpace(runPython(t, vpy, nil, "-c", where)); !strings.HasPrefix(got, filepath.Join(venv, "lib")) {
		t.Fatalf("the venv imports the module from %s, not its site-packages", got)
	}
	if got := runPython(t, vpy, nil, script); got != reportTestBackendOutput {
		t.Errorf("test_backend.py in a venv with the wheel printed\n%s\nwant\n%s", got, reportTestBackendOutput)
	}
}

// installUtils builds python-backend-utils in a fresh store, installs it
// into a fresh prefix and returns the prefix's backends/python.
func installUtils(t *testing.T) string {
	t.Helper()
	store, prefix := t.TempDir(), filepath.Join(t.TempDir(), "prefix")
	if _, stderr, err := run(t, "../..", "build", "--store", store, "python-backend-utils"); err != nil {
		t.Fatalf("build: %v\n%s", err, stderr)
	}
	if _, stderr, err := run(t, "../..", "install", "--store", store, "--prefix", prefix, "python-backend-utils"); err != nil {
		t.Fatalf("install: %v\n%s", err, stderr)
	}
	return filepath.Join(prefix, "backends", "python")
}

// The unit test docs/python.md shows for the report's model.py runs, as
// written there, against the installed module: a model.py is testable
// outside the server with the shipped package.
func TestModelUnitTestFromDocs(t *testing.T) {
	testenv.NeedPython(t, hostPython, "numpy", "torch")
	doc, err := os.ReadFile("../../docs/python.md")
	if err != nil {
		t.Fatal(err)
	}
	const start = "```python\n# tests/test_simple_linear.py\n"
	i := strings.Index(string(doc), start)
	if i < 0 {
		t.Fatal("docs/python.md has no tests/test_simple_linear.py block")
	}
	body := string(doc)[i+len("```python\n"):]
	body = body[:strings.Index(body, "\n```")+1]
	dir := installUtils(t)

	work := t.TempDir()
	mustWrite(t, filepath.Join(work, "tests", "test_simple_linear.py"), body)
	version := filepath.Join(work, "model_repository", "simple_linear", "1")
	seed, err := os.ReadFile("../../runtime/python/testdata/seed-model-repository/simple_linear/1/model.py")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(version, "model.py"), string(seed))
	if out, err := exec.Command(hostPython, "../../runtime/python/testdata/make_model.py", filepath.Join(version, "model.pt")).CombinedOutput(); err != nil {
		t.Fatalf("make_model.py: %v\n%s", err, out)
	}
	cmd := exec.Command(hostPython, "-m", "unittest", "-v", "test_simple_linear")
	cmd.Dir = filepath.Join(work, "tests")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Ran 2 tests") || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("the documented unit test: %v\n%s", err, out)
	}
}
