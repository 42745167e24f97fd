package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/scaffold"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// The custom-operator workflow on real components: `tritonbuild new op`
// output built unchanged with the system profile (the distribution's LLVM 15
// and libtorch as externals), a TorchScript model scripted with the op by
// the distribution's Python, served by the tritonserver of the same build;
// load failures of bad op libraries; and a one-line op change rebuilding one
// node and one image layer. It needs cmake, ninja, clang-15, libtorch-dev,
// python3-torch and go (.ci/run installs them); about 3-5 minutes.
func TestCustomOpEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the custom-op build, serve and image test (minutes)")
	}
	requireCustomOpTools(t)
	tmp := t.TempDir()
	src := snapshotSource(t, filepath.Join(tmp, "tritonbuild"))
	proj := filepath.Join(tmp, "proj")
	store := filepath.Join(tmp, "store")
	tb := func(args ...string) string {
		t.Helper()
		start := time.Now()
		out, stderr, err := run(t, proj, append(args, "--store", store)...)
		if err != nil {
			t.Fatalf("tritonbuild %s: %v\n%s\n%s", strings.Join(args, " "), err, out, stderr)
		}
		t.Logf("tritonbuild %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return out + stderr
	}

	if out, stderr, err := run(t, tmp, "new", "op", "myops", "--dir", proj, "--source", src); err != nil {
		t.Fatalf("new op: %v\n%s%s", err, out, stderr)
	}
	if got := buildNodes(t, tb("plan", "--profile", "system", "--json")); strings.Join(got, " ") != "runtime python-backend-utils tritonserver myops" {
		t.Fatalf("fresh plan builds %v, want runtime python-backend-utils tritonserver myops", got)
	}
	tb("all", "--profile", "system", "--no-image")
	prefix := filepath.Join(proj, "opt", "tritonserver")
	opLib := filepath.Join(prefix, "lib", "libmyops.so")
	if _, err := os.Stat(opLib); err != nil {
		t.Fatalf("the op library is not in the install prefix: %v", err)
	}
	python(t, proj, filepath.Join(proj, "scripts", "make_model.py"))
	modelPT := filepath.Join(proj, "models", "myops_scaled_add", "1", "model.pt")

	// A second repository with models that name bad op libraries: one
	// missing, one compiled from the same source with the other C++ ABI
	// (in its model directory, so that the server tries it), and one
	// outside both the model directory and the server's lib/ (refused
	// before anything is loaded: issue 17's confinement).
	bad := filepath.Join(tmp, "bad-models")
	missing := filepath.Join(tmp, "nowhere", "libmyops.so")
	abi0 := buildABI0(t, filepath.Join(proj, "op"), filepath.Join(tmp, "abi0"))
	badModel(t, bad, "missing_op", modelPT, missing)
	badModel(t, bad, "abi0_op", modelPT, "libmyops_abi0.so")
	copyFile(t, abi0, filepath.Join(bad, "abi0_op", "1", "libmyops_abi0.so"))
	badModel(t, bad, "outside_op", modelPT, abi0)

	srv := startServer(t, filepath.Join(prefix, "bin", "tritonserver"), filepath.Join(proj, "models"), bad)

	t.Run("serves the op", func(t *testing.T) {
		a := []float32{1, -2.5, 3, 1e3, 0}
		b := []float32{10, 4, -6, 0.5, 7}
		checkScaledAdd(t, srv, a, b)
	})

	t.Run("bad op libraries fail their model only", func(t *testing.T) {
		idx := srv.index(t)
		if s := idx["myops_scaled_add"]; s.State != "READY" {
			t.Errorf("myops_scaled_add: %+v, want READY", s)
		}
		for name, want := range map[string][]string{
			"missing_op": {"op_library_filename", "libmyops.so' not found"},
			"abi0_op":    {"libmyops_abi0.so", "undefined symbol"},
			"outside_op": {"resolves outside the model directory and the server's library directory"},
		} {
			s := idx[name]
			t.Logf("%s: %s: %s", name, s.State, s.Reason)
			if s.State != "UNAVAILABLE" {
				t.Errorf("%s: state %q, want UNAVAILABLE", name, s.State)
			}
			for _, w := range want {
				if !strings.Contains(s.Reason, w) {
					t.Errorf("%s: reason %q lacks %q", name, s.Reason, w)
				}
			}
		}
		// The server survived both and the good model still computes.
		checkScaledAdd(t, srv, []float32{2, 4}, []float32{8, -8})
		if resp, err := http.Get(srv.url + "/v2/health/live"); err != nil || resp.StatusCode != 200 {
			t.Errorf("live after failed loads: %v %v", resp, err)
		}
	})
	srv.stop(t)

	t.Run("op change rebuilds one node and one layer", func(t *testing.T) {
		layout1 := filepath.Join(tmp, "oci-1")
		tb("image", "--profile", "system", "--oci-layout", layout1)
		cpp := filepath.Join(proj, "op", "src", "myops.cpp")
		data, err := os.ReadFile(cpp)
		if err != nil {
			t.Fatal(err)
		}
		// A change that alters the compiled library (a message string).
		changed := bytes.Replace(data, []byte(`" but b has shape "`), []byte(`" while b has shape "`), 1)
		if bytes.Equal(changed, data) {
			t.Fatalf("%s lacks the line the test edits", cpp)
		}
		if err := os.WriteFile(cpp, changed, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := buildNodes(t, tb("plan", "--profile", "system", "--json")); strings.Join(got, " ") != "myops" {
			t.Fatalf("after the op change the plan builds %v, want exactly [myops]", got)
		}
		tb("build", "--profile", "system", "myops")
		if got := buildNodes(t, tb("plan", "--profile", "system", "--json")); len(got) != 0 {
			t.Fatalf("after the rebuild the plan still builds %v", got)
		}
		layout2 := filepath.Join(tmp, "oci-2")
		tb("image", "--profile", "system", "--oci-layout", layout2)
		l1, l2 := readLayers(t, layout1), readLayers(t, layout2)
		if len(l1) != len(l2) {
			t.Fatalf("layer counts differ: %d then %d", len(l1), len(l2))
		}
		for i := range l1 {
			a, b := l1[i], l2[i]
			if a.name != b.name {
				t.Fatalf("layer %d: %q then %q", i, a.name, b.name)
			}
			switch a.name {
			case "myops":
				if a.digest == b.digest {
					t.Errorf("the op's layer did not change (%s)", a.digest)
				}
				if !layerHas(t, layout2, b.digest, "opt/tritonserver/lib/libmyops.so") {
					t.Errorf("the op's layer lacks opt/tritonserver/lib/libmyops.so")
				}
			case "sbom":
				// It lists every tree's hash, the op's included.
			default:
				if a.digest != b.digest {
					t.Errorf("layer %s changed: %s then %s", a.name, a.digest, b.digest)
				}
			}
		}
		if l1[len(l1)-1].name != "models" {
			t.Errorf("the image lacks the model repository layer: %+v", l1)
		}
	})
}

// `new op` through the binary: the scaffold lands in --dir, names are
// checked before anything is written, and a second run refuses to
// overwrite.
func TestNewOpCommand(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "proj")
	out, stderr, err := run(t, tmp, "new", "op", "myops", "--dir", dir, "--source", "../..")
	if err == nil {
		t.Fatalf("--source relative to the temp dir should not be a tritonbuild tree: %s", out)
	}
	if !strings.Contains(stderr, "not a tritonbuild source tree") {
		t.Errorf("bad --source: %s", stderr)
	}
	root, _ := filepath.Abs("../..")
	out, stderr, err = run(t, tmp, "new", "op", "myops", "--dir", dir, "--source", root)
	if err != nil {
		t.Fatalf("new op: %v\n%s", err, stderr)
	}
	for _, f := range []string{"build.yaml", "recipes/myops.yaml", "op/src/myops.cpp", "models/myops_scaled_add/config.pbtxt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !strings.Contains(out, filepath.Join(dir, f)) {
			t.Errorf("output does not list %s:\n%s", f, out)
		}
	}
	if _, stderr, err = run(t, tmp, "new", "op", "myops", "--dir", dir, "--source", root); err == nil || !strings.Contains(stderr, "refusing to overwrite") {
		t.Errorf("second run: %v %s", err, stderr)
	}
	// Without --source the tree around the working directory is used.
	if _, stderr, err = run(t, ".", "new", "op", "Bad-Name", "--dir", filepath.Join(tmp, "x")); err == nil || !strings.Contains(stderr, `invalid op name "Bad-Name"`) {
		t.Errorf("bad name: %v %s", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(tmp, "x")); err == nil {
		t.Errorf("a bad name still created its directory")
	}
	auto := filepath.Join(tmp, "auto")
	if _, stderr, err = run(t, ".", "new", "op", "other", "--dir", auto); err != nil {
		t.Fatalf("new op without --source inside the tree: %v %s", err, stderr)
	}
	if data, _ := os.ReadFile(filepath.Join(auto, "recipes", "tritonserver.yaml")); !strings.Contains(string(data), "local: "+root+"\n") {
		t.Errorf("the server recipe does not point at %s:\n%s", root, data)
	}
}

// requireCustomOpTools ends the test through testenv (skip here, fail in
// CI), saying why, when a component the test builds with is missing.
func requireCustomOpTools(t *testing.T) {
	t.Helper()
	testenv.NeedTools(t, "cmake", "ninja", "go")
	testenv.NeedFiles(t, "install clang-15 llvm-15-dev libtorch-dev python3-torch (.ci/run does)",
		"/usr/lib/llvm-15/bin/clang++", "/usr/lib/llvm-15/bin/llvm-config",
		"/usr/include/torch/csrc/api/include/torch/version.h", "/usr/bin/python3")
	testenv.NeedPython(t, "/usr/bin/python3", "torch")
}

// snapshotSource copies the committed tritonbuild tree to dir, which the
// scaffold's server recipe then builds from. A snapshot keeps the server's
// hash fixed while the working tree changes under the test.
func snapshotSource(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", "HEAD")
	extract := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	var errb bytes.Buffer
	archive.Stderr, extract.Stderr = &errb, &errb
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	aerr := archive.Run()
	xerr := extract.Wait()
	if aerr != nil || xerr != nil {
		t.Fatalf("snapshot of %s (git archive HEAD | tar -x): %v %v\n%s", root, aerr, xerr, errb.String())
	}
	if !scaffold.IsSource(dir) {
		t.Fatalf("snapshot %s is not a tritonbuild tree", dir)
	}
	return dir
}

// buildNodes lists the plan's nodes with status build, in plan order.
func buildNodes(t *testing.T, planJSON string) []string {
	t.Helper()
	start := strings.Index(planJSON, "{")
	if start < 0 {
		t.Fatalf("no JSON plan in:\n%s", planJSON)
	}
	var plan struct {
		Nodes []struct{ Name, Status string }
	}
	if err := json.NewDecoder(strings.NewReader(planJSON[start:])).Decode(&plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, planJSON)
	}
	var out []string
	for _, n := range plan.Nodes {
		if n.Status == "build" {
			out = append(out, n.Name)
		}
	}
	return out
}

func python(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// buildABI0 compiles the op's CMake project by hand with
// TORCH_CXX11_ABI=0, the opposite of the distribution's libtorch, and
// returns the library.
func buildABI0(t *testing.T, srcDir, buildDir string) string {
	t.Helper()
	env := append(os.Environ(), "TORCH_CXX11_ABI=0", "TORCH_CXX_STANDARD=14",
		"CC=/usr/lib/llvm-15/bin/clang", "CXX=/usr/lib/llvm-15/bin/clang++", "CMAKE_PREFIX_PATH=/usr")
	for _, args := range [][]string{
		{"-S", srcDir, "-B", buildDir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"},
		{"--build", buildDir},
	} {
		cmd := exec.Command("cmake", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cmake %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "-S" && !strings.Contains(string(out), "will not load") {
			t.Errorf("configuring with the wrong ABI printed no warning:\n%s", out)
		}
	}
	return filepath.Join(buildDir, "libmyops.so")
}

// badModel writes a copy of the scripted model whose config names lib.
func badModel(t *testing.T, repo, name, modelPT, lib string) {
	t.Helper()
	dir := filepath.Join(repo, name)
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(modelPT)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "model.pt"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`name: %q
backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
model_operations { op_library_filename: %q }
`, name, lib)
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// server is a running tritonserver process.
type server struct {
	cmd  *exec.Cmd
	url  string
	logs *bytes.Buffer
	done chan error
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer runs bin on free ports and waits until every model of the
// repositories has settled (loaded or failed).
func startServer(t *testing.T, bin string, repos ...string) *server {
	t.Helper()
	return startServerWith(t, bin, nil, repos...)
}

// startServerWith is startServer with more flags.
func startServerWith(t *testing.T, bin string, flags []string, repos ...string) *server {
	t.Helper()
	httpPort := freePort(t)
	args := []string{"--http-port", fmt.Sprint(httpPort), "--grpc-port", fmt.Sprint(freePort(t)),
		"--metrics-port", fmt.Sprint(freePort(t)), "--exit-on-error=false", "--strict-readiness=false"}
	args = append(args, flags...)
	for _, r := range repos {
		args = append(args, "--model-repository", r)
	}
	s := &server{cmd: exec.Command(bin, args...), url: fmt.Sprintf("http://127.0.0.1:%d", httpPort), logs: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			t.Fatalf("tritonserver exited during startup: %v\n%s", err, s.logs.String())
		default:
		}
		if idx, err := s.tryIndex(); err == nil && len(idx) > 0 {
			settled := true
			for _, m := range idx {
				if m.State != "READY" && m.State != "UNAVAILABLE" {
					settled = false
				}
			}
			if settled {
				return s
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("tritonserver did not settle its models in 2 minutes\n%s", s.logs.String())
	return nil
}

// stop ends the server with SIGTERM, as an orchestrator would, and checks
// that it exits cleanly.
func (s *server) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("tritonserver exited with %v after SIGTERM\n%s", err, s.logs.String())
		}
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("tritonserver ignored SIGTERM for a minute")
	}
}

type modelStatus struct{ Name, Version, State, Reason string }

func (s *server) tryIndex() (map[string]modelStatus, error) {
	resp, err := http.Post(s.url+"/v2/repository/index", "application/json", strings.NewReader("{}"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list []modelStatus
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	out := map[string]modelStatus{}
	for _, m := range list {
		out[m.Name] = m
	}
	return out, nil
}

func (s *server) index(t *testing.T) map[string]modelStatus {
	t.Helper()
	idx, err := s.tryIndex()
	if err != nil {
		t.Fatalf("repository index: %v", err)
	}
	return idx
}

// checkScaledAdd infers myops_scaled_add over HTTP and compares with
// a + 0.5*b computed here.
func checkScaledAdd(t *testing.T, s *server, a, b []float32) {
	t.Helper()
	type tensor struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float32 `json:"data"`
	}
	body, _ := json.Marshal(map[string]any{"inputs": []tensor{
		{"INPUT__0", "FP32", []int{len(a)}, a}, {"INPUT__1", "FP32", []int{len(b)}, b}}})
	resp, err := http.Post(s.url+"/v2/models/myops_scaled_add/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("infer: %s: %s\n%s", resp.Status, raw, s.logs.String())
	}
	var out struct{ Outputs []tensor }
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Outputs) != 1 {
		t.Fatalf("infer response %s: %v", raw, err)
	}
	got := out.Outputs[0]
	if got.Name != "OUTPUT__0" || len(got.Data) != len(a) {
		t.Fatalf("infer output %+v", got)
	}
	scale, _ := json.Number(scaffold.Scale).Float64()
	for i := range a {
		want := a[i] + float32(scale)*b[i]
		if math.Abs(float64(got.Data[i]-want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
			t.Errorf("OUTPUT__0[%d] = %v, want %v + %v*%v = %v", i, got.Data[i], a[i], scale, b[i], want)
		}
	}
}

type layer struct{ name, digest string }

// readLayers lists the image's layers in an OCI layout, named after the
// config history entry that made each ("install NAME ..." gives NAME).
func readLayers(t *testing.T, layout string) []layer {
	t.Helper()
	blob := func(digest string) []byte {
		data, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	var index struct{ Manifests []struct{ Digest string } }
	data, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, data)
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		History []struct {
			CreatedBy  string `json:"created_by"`
			EmptyLayer bool   `json:"empty_layer"`
		}
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range config.History {
		if h.EmptyLayer {
			continue
		}
		name := h.CreatedBy
		switch f := strings.Fields(h.CreatedBy); {
		case len(f) >= 3 && f[1] == "install":
			name = f[2]
		case strings.Contains(h.CreatedBy, "SBOM"):
			name = "sbom"
		case strings.Contains(h.CreatedBy, "model repository"):
			name = "models"
		}
		names = append(names, name)
	}
	if len(names) != len(manifest.Layers) {
		t.Fatalf("%d history entries with layers, %d layers", len(names), len(manifest.Layers))
	}
	out := make([]layer, len(names))
	for i := range names {
		out[i] = layer{names[i], manifest.Layers[i].Digest}
	}
	return out
}

// layerHas reports whether the gzipped layer blob holds path.
func layerHas(t *testing.T, layout, digest, path string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == path {
			return true
		}
	}
}
