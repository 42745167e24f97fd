package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// buildServer compiles cmd/tritonserver (without libtorch: the python
// backend needs none) into dir.
func buildServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "tritonserver")
	if out, err := exec.Command("go", "build", "-o", bin, "../tritonserver").CombinedOutput(); err != nil {
		t.Fatalf("building tritonserver: %v\n%s", err, out)
	}
	return bin
}

// reportModel lays out the report's simple_linear python model (config,
// model.py, model.pt from make_model.py) as model name in repo, with its
// EXECUTION_ENV_PATH set to envPath.
func reportModel(t *testing.T, repo, name, envPath string) string {
	t.Helper()
	seed := "../../runtime/python/testdata/seed-model-repository/simple_linear"
	dir := filepath.Join(repo, name)
	cfg, err := os.ReadFile(filepath.Join(seed, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	c := strings.Replace(string(cfg), `name: "simple_linear"`, `name: "`+name+`"`, 1)
	c = strings.Replace(c, `"$$TRITON_MODEL_DIRECTORY/venv.tar.gz"`, `"`+envPath+`"`, 1)
	if c == string(cfg) {
		t.Fatal("the report's config.pbtxt changed shape")
	}
	mustWrite(t, filepath.Join(dir, "config.pbtxt"), c)
	py, err := os.ReadFile(filepath.Join(seed, "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "1", "model.py"), string(py))
	pt := filepath.Join(dir, "1", "model.pt")
	if out, err := exec.Command(hostPython, "../../runtime/python/testdata/make_model.py", pt).CombinedOutput(); err != nil {
		t.Fatalf("make_model.py: %v\n%s", err, out)
	}
	return pt
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, dst, string(data))
}

// The report's section 4.4 with tritonbuild: `pyenv pack` twice gives
// byte-identical archives; the report's model serves torch's numbers with
// EXECUTION_ENV_PATH at the archive; and three models sharing it (its own
// copy, a copy from the second pack, one base env in an env root, as the
// report's section 5.3 suggests) cost one extraction in the server's env
// cache.
func TestPyenvPackSharedEnvServes(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the server build and three torch stubs in -short mode")
	}
	testenv.NeedPython(t, hostPython, "torch", "numpy", "venv")
	work := t.TempDir()
	pack := func(out string) string {
		t.Helper()
		stdout, stderr, err := run(t, work, "pyenv", "pack", "--system-site-packages", "--import", "torch", "-o", out)
		if err != nil {
			t.Fatalf("pyenv pack: %v\n%s", err, stderr)
		}
		return stdout
	}
	os.MkdirAll(filepath.Join(work, "one"), 0o755)
	os.MkdirAll(filepath.Join(work, "two"), 0o755)
	report := pack("one/venv.tar.gz")
	pack("two/venv.tar.gz")
	first, second := filepath.Join(work, "one", "venv.tar.gz"), filepath.Join(work, "two", "venv.tar.gz")
	digest := fileSHA(t, first)
	if got := fileSHA(t, second); got != digest {
		t.Fatalf("two pyenv pack runs differ: %s and %s", digest, got)
	}
	if !strings.Contains(report, "sha256 "+digest) || !strings.Contains(report, "numpy, torch") {
		t.Errorf("pack reported:\n%s", report)
	}

	repo := filepath.Join(work, "models")
	envs := filepath.Join(work, "envs")
	pt := reportModel(t, repo, "own_env", "$$TRITON_MODEL_DIRECTORY/venv.tar.gz")
	copyFile(t, first, filepath.Join(repo, "own_env", "venv.tar.gz"))
	reportModel(t, repo, "rebuilt_env", "$$TRITON_MODEL_DIRECTORY/venv.tar.gz")
	copyFile(t, second, filepath.Join(repo, "rebuilt_env", "venv.tar.gz"))
	reportModel(t, repo, "shared_env", filepath.Join(envs, "base.tar.gz"))
	copyFile(t, first, filepath.Join(envs, "base.tar.gz"))

	cache := filepath.Join(work, "env-cache")
	bin := buildServer(t, t.TempDir())
	srv := startServerWith(t, bin, []string{"--backend-config=python,env-cache-dir=" + cache,
		"--backend-config=python,env-roots=" + envs}, repo)
	for name, st := range srv.index(t) {
		if st.State != "READY" {
			t.Fatalf("model %s is %s: %s", name, st.State, st.Reason)
		}
	}
	in := testInput()
	want := torchForward(t, pt, in)
	for _, model := range []string{"own_env", "rebuilt_env", "shared_env"} {
		for row := 0; row < 2; row++ {
			got := infer(t, srv.url, model, in[row*10:row*10+10], false)
			torchtest.CheckClose(t, model, got, want[row*5:row*5+5])
		}
	}
	srv.stop(t)

	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 || dirs[0] != digest {
		t.Errorf("env cache holds %v, want one extraction named %s", dirs, digest)
	}
	logs := srv.logs.String()
	if n := strings.Count(logs, "extracting python env"); n != 1 {
		t.Errorf("%d extractions logged, want 1:\n%s", n, logs)
	}
}
