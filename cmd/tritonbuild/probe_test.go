package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// probeProject writes a recipe x whose probe has a file check and a
// second check that fails on any host (warn or hard, as asked), and an
// installed prefix for it.
func probeProject(t *testing.T, warn bool) (recipes, prefix string) {
	t.Helper()
	recipes, prefix = t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(prefix, "include"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "include", "x.h"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := "false"
	if warn {
		w = "true"
	}
	r := `name: x
versions:
  - version: "1.0"
    source: {url: http://127.0.0.1:1/x-1.0.tar.gz, sha256: ` + strings.Repeat("ab", 32) + `}
build:
  cmake: {}
probe:
  version: {run: echo 1.0}
  checks:
    - {name: header, file: include/x.h, help: install libx-dev}
    - name: fast kernels
      warn: ` + w + `
      run: echo reference
      expect: tuned
      help: install libx-tuned
`
	if err := os.WriteFile(filepath.Join(recipes, "x.yaml"), []byte(r), 0o644); err != nil {
		t.Fatal(err)
	}
	return recipes, prefix
}

// A failing warn check keeps the external and says why on stderr, in
// plan --json and in doctor; the same check without warn rejects it.
func TestProbeWarnCheckWarnsAndKeepsTheExternal(t *testing.T) {
	recipes, prefix := probeProject(t, true)
	want := `warning: external x at ` + prefix + `: check "fast kernels" failed: ` +
		"`echo reference`" + ` printed "reference", want a match of "tuned"; install libx-tuned`
	args := []string{"--recipes", recipes, "--store", t.TempDir(), "--set", "x.external=" + prefix}

	out, stderr, err := run(t, t.TempDir(), append([]string{"plan"}, append(args, "x")...)...)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	if strings.Count(stderr, want) != 1 {
		t.Errorf("plan's stderr:\n%s\nwant once: %s", stderr, want)
	}
	if !strings.Contains(out, "external") {
		t.Errorf("plan: x is not external:\n%s", out)
	}

	out, stderr, err = run(t, t.TempDir(), append([]string{"plan", "--json"}, append(args, "x")...)...)
	if err != nil {
		t.Fatalf("plan --json: %v\n%s", err, stderr)
	}
	var plan struct {
		Nodes []struct {
			Name, Status string
			Warnings     []string
		}
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	if len(plan.Nodes) != 1 || plan.Nodes[0].Status != "external" || len(plan.Nodes[0].Warnings) != 1 ||
		"warning: "+plan.Nodes[0].Warnings[0] != want {
		t.Errorf("plan --json nodes %+v: want x external with the warning", plan.Nodes)
	}

	out, stderr, err = run(t, t.TempDir(), append([]string{"doctor"}, append(args, "x")...)...)
	if err != nil {
		t.Fatalf("doctor: a warning failed it: %v\n%s%s", err, out, stderr)
	}
	if !strings.Contains(out, "[warn] external x: "+strings.TrimPrefix(want, "warning: ")) {
		t.Errorf("doctor's report lacks the warning:\n%s", out)
	}

	recipes, prefix = probeProject(t, false)
	_, stderr, err = run(t, t.TempDir(), "plan", "--recipes", recipes, "--store", t.TempDir(), "--set", "x.external="+prefix, "x")
	if err == nil || !strings.Contains(stderr, `external x at `+prefix+` rejected: check "fast kernels" failed`) {
		t.Errorf("a failing hard check: got %v:\n%s", err, stderr)
	}
}

// The pytorch recipe's BLAS check against the distribution's libtorch: no
// warning on the BLAS the alternatives give (the Makefile installs
// OpenBLAS), and a warning naming the package when the loader is pointed
// at netlib's reference BLAS, as on a fresh machine.
func TestPyTorchExternalWarnsOnTheReferenceBLAS(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu"
	testenv.NeedFiles(t, "the distribution's libtorch (libtorch-dev), the reference BLAS (libblas3) and OpenBLAS (libopenblas0-openmp)",
		lib+"/libtorch_cpu.so", lib+"/blas/libblas.so.3", lib+"/openblas-openmp/libblas.so.3")
	plan := func(env ...string) string {
		t.Helper()
		cmd := exec.Command(tbBin, "plan", "--store", t.TempDir(), "--set", "pytorch.external=/usr", "pytorch")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("plan %v: %v\n%s", env, err, out)
		}
		return string(out)
	}
	const check = `check "libtorch on a tuned BLAS" failed`
	if out := plan(); strings.Contains(out, check) {
		t.Errorf("with the BLAS the alternatives give:\n%s", out)
	}
	out := plan("LD_LIBRARY_PATH=" + lib + "/blas")
	if !strings.Contains(out, "warning: external pytorch at /usr: "+check) || !strings.Contains(out, lib+"/blas/libblas.so.3") ||
		!strings.Contains(out, "install libopenblas0-openmp") {
		t.Errorf("with netlib's BLAS first on the loader's path, want a warning naming it and the package:\n%s", out)
	}
}
