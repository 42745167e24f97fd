package main

// End-to-end tests of `tritonbuild all` / `tritonbuild image` with the
// system profile (the distribution's LLVM 15 and libtorch 1.13.1 as
// externals): the real runtime and tritonserver are built once into a
// shared store, assembled into images, checked by independent tools
// (go-containerregistry's validate, skopeo, umoci), run unpacked in a chroot
// and in the Docker engine against the report's model, pushed to a real
// registry, and rebuilt to check reproducibility. They skip in -short mode
// and when a component cannot exist here (no libtorch, not root); under
// TRITONBUILD_REQUIRE_INTEGRATION=1 (CI) a missing component fails them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/tritonbuild/tritonbuild/images/imagestest"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

// hostPython is the distribution interpreter with torch and numpy (the
// `python3` on PATH may be another one).
const hostPython = "/usr/bin/python3"

// examplesDir holds the report's model repositories and make_model.py.
func examplesDir(t *testing.T) string {
	t.Helper()
	for _, d := range []string{os.Getenv("TRITONBUILD_EXAMPLES"), "../../../shared/examples", "/work/shared/examples"} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "make_model.py")); err == nil {
			abs, _ := filepath.Abs(d)
			return abs
		}
	}
	testenv.Unavailable(t, "the report's examples (shared/examples/make_model.py) are not beside the checkout; set TRITONBUILD_EXAMPLES")
	return ""
}

// systemBuild is the state shared by the tests: one system-profile build
// of the project in a temporary copy, its images and the report's model.
type systemBuild struct {
	proj  string // temporary copy of the project, build.yaml pointing at store
	store string
	// layout and tarball are what `tritonbuild all` wrote (build.yaml's
	// image section: no python).
	layout, tarball string
	// pyLayout and pyTarball are the --python image.
	pyLayout, pyTarball, pyTag string
	model                      string // model.pt written by make_model.py
	allLog                     string
	err                        error
	// pyErr is the --python image's failure: only the tests of that image
	// fail with it (systemPythonImage).
	pyErr error
}

var (
	sysOnce  sync.Once
	sysBuild systemBuild
)

// systemImages builds the stack once per test binary (runtime and
// tritonserver, then both images) and returns it; a failure fails every
// test that needs it.
func systemImages(t *testing.T) *systemBuild {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the system-profile build in -short mode")
	}
	testenv.NeedRoot(t, "unpacking and chrooting into images")
	testenv.NeedTools(t, "git", "go", "skopeo", "umoci")
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so", "/usr/lib/llvm-15/bin/clang", hostPython} {
		if _, err := os.Stat(p); err != nil {
			testenv.Unavailable(t, "the system profile needs %s (libtorch-dev, clang-15, python3-torch): %v", p, err)
		}
	}
	examples := examplesDir(t)
	sysOnce.Do(func() { sysBuild.err = buildSystem(&sysBuild, examples) })
	if sysBuild.err != nil {
		t.Fatalf("system-profile build: %v\n%s", sysBuild.err, sysBuild.allLog)
	}
	return &sysBuild
}

// systemPythonImage is systemImages for the tests of the --python image.
func systemPythonImage(t *testing.T) *systemBuild {
	t.Helper()
	b := systemImages(t)
	if b.pyErr != nil {
		t.Fatalf("%v\n%s", b.pyErr, b.allLog)
	}
	return b
}

// buildSystem copies the project (tracked and untracked-but-not-ignored
// files, as a checkout has them) next to the test binary, so TestMain's
// cleanup removes it, and runs `tritonbuild all --profile system` there.
func buildSystem(b *systemBuild, examples string) error {
	root := filepath.Join(filepath.Dir(tbBin), "system")
	b.proj = filepath.Join(root, "project")
	b.store = filepath.Join(root, "store")
	if err := copyProject("../..", b.proj); err != nil {
		return err
	}
	cfgFile := filepath.Join(b.proj, "build.yaml")
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		return err
	}
	if bytes.Contains(cfg, []byte("\nstore:")) {
		return errors.New("build.yaml sets store: already; the test cannot redirect it")
	}
	cfg = append(cfg, []byte("\nstore: "+b.store+"\n")...)
	if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
		return err
	}
	cmd := exec.Command(tbBin, "all", "--profile", "system")
	cmd.Dir = b.proj
	out, err := cmd.CombinedOutput()
	b.allLog = string(out)
	if err != nil {
		return fmt.Errorf("tritonbuild all --profile system: %w", err)
	}
	b.layout = filepath.Join(b.proj, "out", "tritonserver-oci")
	b.tarball = filepath.Join(b.proj, "out", "tritonserver-image.tar")
	b.pyLayout = filepath.Join(root, "py-oci")
	b.pyTarball = filepath.Join(root, "py.tar")
	b.pyTag = fmt.Sprintf("tritonbuild-test/tritonserver-python:%d", time.Now().UnixNano())
	cmd = exec.Command(tbBin, "image", "--profile", "system", "--python",
		"--oci-layout", b.pyLayout, "--tarball", b.pyTarball, "--tag", b.pyTag)
	cmd.Dir = b.proj
	out, err = cmd.CombinedOutput()
	b.allLog += string(out)
	if err != nil {
		b.pyErr = fmt.Errorf("tritonbuild image --python: %w", err)
	}
	b.model = filepath.Join(root, "model.pt")
	if out, err := exec.Command(hostPython, filepath.Join(examples, "make_model.py"), b.model).CombinedOutput(); err != nil {
		return fmt.Errorf("make_model.py: %w\n%s", err, out)
	}
	return nil
}

// copyProject copies the files git would commit (tracked, plus untracked
// ones not ignored) from src to dst.
func copyProject(src, dst string) error {
	out, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("listing the project's files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		st, err := os.Lstat(filepath.Join(src, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		to := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(src, f))
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			continue
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, data, st.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// modelRepository lays out the report's model for serving under dir:
// simple_linear is the report's python-backend repository as written (its
// config and model.py unchanged, model.pt from make_model.py and the packed
// venv its EXECUTION_ENV_PATH names), simple_linear_pt the same TorchScript
// model on the pytorch backend, batched like the report's tuned variant.
// withPython=false leaves the python model out.
func modelRepository(t *testing.T, b *systemBuild, dir string, withPython bool) {
	t.Helper()
	model, err := os.ReadFile(b.model)
	if err != nil {
		t.Fatal(err)
	}
	pt := filepath.Join(dir, "simple_linear_pt")
	mustWrite(t, filepath.Join(pt, "config.pbtxt"), `name: "simple_linear_pt"
backend: "pytorch"
max_batch_size: 32
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 5 ]
  }
]
instance_group [{ kind: KIND_CPU }]
`)
	mustWrite(t, filepath.Join(pt, "1", "model.pt"), string(model))
	if !withPython {
		return
	}
	seed := filepath.Join(examplesDir(t), "seed-model-repository", "simple_linear")
	py := filepath.Join(dir, "simple_linear")
	for _, f := range []string{"config.pbtxt", "1/model.py"} {
		data, err := os.ReadFile(filepath.Join(seed, f))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(py, f), string(data))
	}
	mustWrite(t, filepath.Join(py, "1", "model.pt"), string(model))
	// The report's env: a venv over the distribution interpreter (which
	// the --python image carries at the same path), made and packed by
	// pyenv pack.
	if _, stderr, err := run(t, t.TempDir(), "pyenv", "pack", "--system-site-packages", "--import", "torch",
		"-o", filepath.Join(py, "venv.tar.gz")); err != nil {
		t.Fatalf("pyenv pack: %v\n%s", err, stderr)
	}
	if err := chmodTree(dir); err != nil {
		t.Fatal(err)
	}
}

// chmodTree makes dir readable by the image's unprivileged user.
func chmodTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		if d.Type().IsRegular() {
			return os.Chmod(p, 0o644)
		}
		return nil
	})
}

func mustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testInput is a batch of two rows of the model's 10 features.
func testInput() []float32 {
	in := make([]float32, 20)
	for i := range in {
		in[i] = float32(i)/7 - 1.25
	}
	return in
}

// torchForward computes the model's outputs for rows of 10 features with
// the host's torch, the reference the served answers must match.
func torchForward(t *testing.T, model string, in []float32) []float64 {
	t.Helper()
	var rows [][]float32
	for i := 0; i+10 <= len(in); i += 10 {
		rows = append(rows, in[i:i+10])
	}
	return torchtest.Forward(t, hostPython, model, rows)
}

// inferRequest is Triton's HTTP/JSON inference request.
type inferRequest struct {
	Inputs []inferTensor `json:"inputs"`
}

type inferTensor struct {
	Name     string    `json:"name"`
	Shape    []int     `json:"shape"`
	Datatype string    `json:"datatype"`
	Data     []float64 `json:"data"`
}

// infer sends one request for model with the rows of in (shape [rows,10],
// or [10] when batched is false and there is one row) and returns
// OUTPUT__0's data after checking its shape.
func infer(t *testing.T, base, model string, in []float32, batched bool) []float64 {
	t.Helper()
	rows := len(in) / 10
	shape := []int{rows, 10}
	if !batched {
		shape = []int{10}
	}
	req := inferRequest{Inputs: []inferTensor{{Name: "INPUT__0", Shape: shape, Datatype: "FP32"}}}
	for _, v := range in {
		req.Inputs[0].Data = append(req.Inputs[0].Data, float64(v))
	}
	body, _ := json.Marshal(req)
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Post(base+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("infer %s: %v", model, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("infer %s: %s\n%s", model, resp.Status, data)
	}
	var res struct {
		Outputs []inferTensor `json:"outputs"`
	}
	if err := json.Unmarshal(data, &res); err != nil || len(res.Outputs) != 1 {
		t.Fatalf("infer %s: answer %s (%v)", model, data, err)
	}
	o := res.Outputs[0]
	wantShape := []int{rows, 5}
	if !batched {
		wantShape = []int{5}
	}
	if o.Name != "OUTPUT__0" || o.Datatype != "FP32" || fmt.Sprint(o.Shape) != fmt.Sprint(wantShape) {
		t.Fatalf("infer %s: output %s %s %v, want OUTPUT__0 FP32 %v", model, o.Name, o.Datatype, o.Shape, wantShape)
	}
	return o.Data
}

// waitReady polls /v2/health/ready until the server answers 200, the
// process exits or the deadline passes.
func waitReady(t *testing.T, base string, exited <-chan error, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	client := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("tritonserver exited before it was ready: %v\n%s", err, logs())
		default:
		}
		resp, err := client.Get(base + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("tritonserver at %s not ready after 3 minutes\n%s", base, logs())
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// syncBuffer is a bytes.Buffer safe for a process's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// layoutImage opens the single image of an OCI layout.
func layoutImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("opening OCI layout %s: %v", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("OCI layout %s: index %v (%v)", dir, m, err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func layoutDigest(t *testing.T, dir string) v1.Hash {
	t.Helper()
	d, err := layoutImage(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkLayout validates the layout with go-containerregistry and skopeo
// and unpacks it with umoci, returning the rootfs and the image config.
func checkLayout(t *testing.T, dir, tag string) (string, *v1.ConfigFile) {
	t.Helper()
	img := layoutImage(t, dir)
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image(%s): %v", dir, err)
	}
	d, _ := img.Digest()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	info := imagestest.SkopeoInspect(t, "oci:"+dir+":"+tag)
	if info["Digest"] != d.String() {
		t.Errorf("skopeo sees digest %v, the layout's index %s", info["Digest"], d)
	}
	labels, _ := info["Labels"].(map[string]any)
	for _, l := range []string{"dev.tritonbuild.recipe.tritonserver", "dev.tritonbuild.recipe.runtime", "org.opencontainers.image.title"} {
		if labels[l] == nil {
			t.Errorf("skopeo: label %s missing: %v", l, labels)
		}
	}
	return imagestest.UmociUnpack(t, dir, tag), cfg
}

func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

// serveChroot runs the image's tritonserver from rootfs with the image's
// own environment (no host LD_LIBRARY_PATH) on free ports with the
// repository at /models inside, and returns the HTTP base URL.
func serveChroot(t *testing.T, rootfs string, cfg *v1.ConfigFile) string {
	t.Helper()
	imagestest.PrepareRootfs(t, rootfs)
	ports := freePorts(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	argv := append(append([]string{}, cfg.Config.Entrypoint...),
		"--model-repository=/models",
		fmt.Sprintf("--http-port=%d", ports[0]), fmt.Sprintf("--grpc-port=%d", ports[1]), fmt.Sprintf("--metrics-port=%d", ports[2]),
		"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1")
	cmd := imagestest.ChrootCommand(ctx, t, rootfs, cfg.Config.Env, argv...)
	// The report's model.py loads 'model.pt' relative to its version
	// directory; the server starts stubs there itself.
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("tritonserver log:\n%s", logs.String())
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	waitReady(t, base, exited, logs.String)
	return base
}

// The image `tritonbuild all` writes is valid for go-containerregistry,
// skopeo and umoci, and its own tritonserver, chrooted with only the
// image's libraries, serves the report's model on the pytorch backend
// with torch's numbers.
func TestIntegrationImageServesPytorchInChroot(t *testing.T) {
	b := systemImages(t)
	rootfs, cfg := checkLayout(t, b.layout, "latest")
	for _, e := range cfg.Config.Env {
		if strings.HasPrefix(e, "LD_LIBRARY_PATH=") && strings.Contains(e, b.store) {
			t.Errorf("image environment names the build store: %s", e)
		}
	}
	if _, err := os.Stat(filepath.Join(rootfs, "usr", "bin", "python3")); err == nil {
		t.Error("the image without --python carries /usr/bin/python3")
	}
	modelRepository(t, b, filepath.Join(rootfs, "models"), false)
	base := serveChroot(t, rootfs, cfg)
	in := testInput()
	torchtest.CheckClose(t, "pytorch backend in chroot", infer(t, base, "simple_linear_pt", in, true), torchForward(t, b.model, in))
}

// The --python image also serves the report's python-backend repository
// (its packed venv over /usr/bin/python3) with torch inside the image.
func TestIntegrationPythonImageServesReportModelInChroot(t *testing.T) {
	b := systemPythonImage(t)
	rootfs, cfg := checkLayout(t, b.pyLayout, tagOf(b.pyTag))
	modelRepository(t, b, filepath.Join(rootfs, "models"), true)
	base := serveChroot(t, rootfs, cfg)
	in := testInput()
	want := torchForward(t, b.model, in)
	torchtest.CheckClose(t, "pytorch backend in chroot", infer(t, base, "simple_linear_pt", in, true), want)
	for row := 0; row < 2; row++ {
		got := infer(t, base, "simple_linear", in[row*10:row*10+10], false)
		torchtest.CheckClose(t, fmt.Sprintf("python backend in chroot, row %d", row), got, want[row*5:row*5+5])
	}
	// The image ships the module for unit tests of a model.py at the
	// documented path (docs/python.md): the report's test_backend.py runs
	// with the image's interpreter against it.
	script, err := os.ReadFile(reportTestBackend)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(rootfs, "tmp", "test_backend.py"), string(script))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := append(append([]string{}, cfg.Config.Env...), "PYTHONPATH=/opt/tritonserver/backends/python", "PYTHONDONTWRITEBYTECODE=1")
	out, err := imagestest.ChrootCommand(ctx, t, rootfs, env, "/usr/bin/python3", "/tmp/test_backend.py").CombinedOutput()
	if err != nil || string(out) != reportTestBackendOutput {
		t.Errorf("test_backend.py in the image: %v\n%s", err, out)
	}
}

// In the real Docker engine: docker load, docker run with the report's
// repository mounted read-only and port 8000 published on loopback, one
// inference per backend through the published port; docker inspect shows
// the unprivileged user, the ports and the labels.
func TestIntegrationDockerRunServesReportModel(t *testing.T) {
	b := systemPythonImage(t)
	d := imagestest.NewDocker(t)
	tb, err := tarball.ImageFromPath(b.pyTarball, nil)
	if err != nil {
		t.Fatalf("reading the tarball: %v", err)
	}
	if err := validate.Image(tb); err != nil {
		t.Fatalf("validate.Image(tarball): %v", err)
	}
	tbCfg, _ := tb.ConfigName()
	if layoutCfg, _ := layoutImage(t, b.pyLayout).ConfigName(); tbCfg != layoutCfg {
		t.Errorf("tarball config %s, layout config %s: not the same image", tbCfg, layoutCfg)
	}
	loaded := d.Load(b.pyTarball)
	if loaded != b.pyTag {
		t.Errorf("docker loaded %q, want %q", loaded, b.pyTag)
	}
	ins := d.Inspect(b.pyTag)
	if ins.Config.User != "1000:1000" {
		t.Errorf("user %q, want 1000:1000", ins.Config.User)
	}
	for _, p := range []string{"8000/tcp", "8001/tcp", "8002/tcp"} {
		if _, ok := ins.Config.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, ins.Config.ExposedPorts)
		}
	}
	if v := ins.Config.Labels["dev.tritonbuild.recipe.tritonserver"]; !regexp.MustCompile(`^0\.1\.0@[0-9a-f]{64}$`).MatchString(v) {
		t.Errorf("label dev.tritonbuild.recipe.tritonserver = %q", v)
	}
	if ins.Config.Labels["org.opencontainers.image.title"] != "tritonserver" {
		t.Errorf("labels %v", ins.Config.Labels)
	}
	img := layoutImage(t, b.pyLayout)
	if cfgName, _ := img.ConfigName(); ins.ID != cfgName.String() {
		t.Errorf("docker image id %s, the layout's config %s", ins.ID, cfgName)
	}

	repo := filepath.Join(t.TempDir(), "models")
	modelRepository(t, b, repo, true)
	if err := os.Chmod(filepath.Dir(repo), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePorts(t, 1)[0]
	name := fmt.Sprintf("tritonbuild-test-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := imagestest.Run(ctx, "docker", "run", "-d", "--name", name,
		"-p", fmt.Sprintf("127.0.0.1:%d:8000", port),
		"-v", repo+":/models:ro", b.pyTag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := exec.CommandContext(ctx, "docker", "logs", name).CombinedOutput()
			t.Logf("container log:\n%s", logs)
		}
		if _, err := imagestest.Run(ctx, "docker", "rm", "-f", name); err != nil {
			t.Errorf("removing container %s: %v", name, err)
		}
	})
	exited := make(chan error) // docker run -d returned; the state is polled below
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitReady(t, base, exited, func() string {
		out, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return string(out)
	})
	in := testInput()
	want := torchForward(t, b.model, in)
	torchtest.CheckClose(t, "pytorch backend in docker", infer(t, base, "simple_linear_pt", in, true), want)
	torchtest.CheckClose(t, "python backend in docker", infer(t, base, "simple_linear", in[:10], false), want[:5])
}

// `tritonbuild image --push` uploads to a real registry; pulled back by
// digest the image is the same one, and valid.
func TestIntegrationImagePushPullByDigest(t *testing.T) {
	b := systemImages(t)
	reg := imagestest.StartRegistry(t)
	ref := reg.Ref("tritonbuild/tritonserver:e2e")
	_, stderr, err := run(t, b.proj, "image", "--profile", "system", "--push", ref, "--insecure")
	if err != nil {
		t.Fatalf("push: %v\n%s", err, stderr)
	}
	want := layoutDigest(t, b.layout)
	m := regexp.MustCompile(`pushed (\S+@sha256:[0-9a-f]{64})`).FindStringSubmatch(stderr)
	if m == nil || !strings.HasSuffix(m[1], "@"+want.String()) {
		t.Fatalf("push output does not name %s:\n%s", want, stderr)
	}
	r, err := name.ParseReference(reg.Ref("tritonbuild/tritonserver@"+want.String()), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r)
	if err != nil {
		t.Fatalf("pulling %s: %v", r, err)
	}
	if d, _ := got.Digest(); d != want {
		t.Fatalf("pulled %s, pushed %s", d, want)
	}
	if err := validate.Image(got); err != nil {
		t.Fatalf("pulled image invalid: %v", err)
	}
}

// Two assemblies of unchanged trees give the same digest; another
// SOURCE_DATE_EPOCH gives another; rebuilding runtime and tritonserver in
// fresh stores and work directories gives identical trees.
func TestIntegrationImageReproducible(t *testing.T) {
	b := systemImages(t)
	want := layoutDigest(t, b.layout)
	other := filepath.Join(t.TempDir(), "again-oci")
	if _, stderr, err := run(t, b.proj, "image", "--profile", "system", "--oci-layout", other); err != nil {
		t.Fatalf("second image: %v\n%s", err, stderr)
	}
	if got := layoutDigest(t, other); got != want {
		t.Fatalf("second assembly of the same trees: %s, first %s", got, want)
	}
	epoch := filepath.Join(t.TempDir(), "epoch-oci")
	if _, stderr, err := run(t, b.proj, "image", "--profile", "system", "--oci-layout", epoch, "--source-date-epoch", "1700000000"); err != nil {
		t.Fatalf("image with --source-date-epoch: %v\n%s", err, stderr)
	}
	img := layoutImage(t, epoch)
	if d, _ := img.Digest(); d == want {
		t.Fatalf("--source-date-epoch 1700000000 kept the digest %s", d)
	}
	cfg, err := img.ConfigFile()
	if err != nil || cfg.Created.Unix() != 1700000000 {
		t.Fatalf("created %v (%v), want 1700000000", cfg.Created, err)
	}

	for _, node := range []string{"runtime", "tritonserver"} {
		out, stderr, err := run(t, b.proj, "verify", "--profile", "system", node)
		if err != nil || !strings.Contains(out, node+": rebuilt tree is identical") {
			t.Errorf("verify %s: %v\n%s\n%s", node, err, out, stderr)
		}
	}
}

// A second checkout in another directory, built into another store, gives
// the same tree digests (no build path leaks into the trees).
func TestIntegrationTreesIndependentOfWorkDir(t *testing.T) {
	b := systemImages(t)
	// Copy the fixture's checkout, not the live one: the same sources
	// must give the same trees (its build.yaml names the fixture's store,
	// which --store overrides).
	proj := filepath.Join(t.TempDir(), "elsewhere", "checkout")
	if err := copyDir(b.proj, proj, "out"); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "store2")
	if _, stderr, err := run(t, proj, "build", "--profile", "system", "--store", store, "tritonserver"); err != nil {
		t.Fatalf("second build: %v\n%s", err, stderr)
	}
	first, second := treeDigests(t, b.store), treeDigests(t, store)
	for _, node := range []string{"runtime", "tritonserver"} {
		if first[node] == "" || first[node] != second[node] {
			t.Errorf("%s: node hash and tree digest %q in %s, %q in %s", node, first[node], b.store, second[node], store)
		}
	}
}

// copyDir copies the regular files, symlinks and directories of src to
// dst, leaving out the top-level entries named in skip.
func copyDir(src, dst string, skip ...string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		for _, s := range skip {
			if rel == s {
				return filepath.SkipDir
			}
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, data, info.Mode().Perm())
		}
		return nil
	})
}

// treeDigests reads name -> "hash tree-digest" from a store's node
// manifests.
func treeDigests(t *testing.T, store string) map[string]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(store, "nodes", "*", "manifest.json"))
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Name, Hash, Digest string }
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if m.Hash == "" || m.Digest == "" {
			t.Fatalf("%s: no hash or digest", f)
		}
		out[m.Name] = m.Hash + " " + m.Digest
	}
	return out
}

// Bad inputs end with an error naming what is wrong and leave no
// half-written output behind.
func TestIntegrationImageBadInputs(t *testing.T) {
	b := systemImages(t)
	t.Run("unreadable base", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "oci")
		_, stderr, err := run(t, b.proj, "image", "--profile", "system", "--base", "/nonexistent", "--oci-layout", out)
		if err == nil || !strings.Contains(stderr, "/nonexistent") {
			t.Fatalf("want an error naming /nonexistent, got %v:\n%s", err, stderr)
		}
		assertEmptyDir(t, dir)
	})
	t.Run("registry refuses the push", func(t *testing.T) {
		reg := imagestest.StartRegistryWith(t, imagestest.RegistryOptions{ReadOnly: true})
		ref := reg.Ref("tritonbuild/tritonserver:refused")
		_, stderr, err := run(t, b.proj, "image", "--profile", "system", "--push", ref, "--insecure")
		if err == nil || !strings.Contains(stderr, "pushing "+ref) {
			t.Fatalf("want a push error naming %s, got %v:\n%s", ref, err, stderr)
		}
		r, _ := name.ParseReference(ref, name.Insecure)
		if _, err := remote.Head(r); err == nil {
			t.Fatal("the refusing registry holds the image")
		}
	})
	t.Run("full disk", func(t *testing.T) {
		testenv.NeedTools(t, "mount", "umount")
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := imagestest.Run(ctx, "mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir); err != nil {
			testenv.Unavailable(t, "cannot mount a tmpfs: %v", err)
		}
		t.Cleanup(func() {
			if _, err := imagestest.Run(context.Background(), "umount", dir); err != nil {
				t.Errorf("unmounting %s: %v", dir, err)
			}
		})
		_, stderr, err := run(t, b.proj, "image", "--profile", "system", "--oci-layout", filepath.Join(dir, "oci"))
		if err == nil || !strings.Contains(stderr, "no space left on device") || !strings.Contains(stderr, filepath.Join(dir, "oci")) {
			t.Fatalf("want a no-space error naming the layout, got %v:\n%s", err, stderr)
		}
		assertEmptyDir(t, dir)
		_, stderr, err = run(t, b.proj, "image", "--profile", "system", "--tarball", filepath.Join(dir, "image.tar"))
		if err == nil || !strings.Contains(stderr, "no space left on device") {
			t.Fatalf("want a no-space error for the tarball, got %v:\n%s", err, stderr)
		}
		assertEmptyDir(t, dir)
	})
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Fatalf("%s holds leftovers: %v", dir, names)
	}
}
