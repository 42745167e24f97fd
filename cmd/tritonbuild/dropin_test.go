package main

// The image as a drop-in for Triton's (issue 20): it starts under the
// command forms Triton's guides and KServe's stock Triton ServingRuntime
// use, as the unprivileged user, with /models and /mnt/models, in the real
// Docker engine.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/images"
	"github.com/tritonbuild/tritonbuild/images/imagestest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// kserveArgs are the container args of KServe's stock Triton
// ServingRuntime (kserve-tritonserver); docs/kserve.md's manifest uses
// them unchanged.
var kserveArgs = []string{"tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080", "--allow-grpc=true", "--allow-http=true"}

// dropInImage builds tritonserver without libtorch (a static binary: no
// cgo) into an install tree, assembles the image with its defaults
// (entrypoint tritonserver, cmd --model-repository=/models, user
// 1000:1000) and loads it into Docker.
func dropInImage(t *testing.T, d *imagestest.Docker) string {
	t.Helper()
	tree := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(tree, "bin", "tritonserver"), "./cmd/tritonserver")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tritonserver: %v\n%s", err, out)
	}
	ctx := context.Background()
	asm, err := images.Assemble(ctx, images.Options{
		Trees:   []images.Tree{{Name: "tritonserver", Version: "0.0.0-test", Hash: "test", Dir: tree, License: "Apache-2.0"}},
		Name:    "tritonserver",
		Version: "0.0.0-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("tritonbuild-test/dropin:%d", time.Now().UnixNano())
	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := images.WriteTarball(ctx, asm.Image, tb, tag, images.OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	return d.Load(tb)
}

// container runs image detached with the docker options and the
// container args, and removes it when the test ends (printing its log if
// the test failed).
func container(t *testing.T, image string, opts []string, args ...string) string {
	t.Helper()
	name := fmt.Sprintf("tritonbuild-test-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"run", "-d", "--name", name}, opts...)
	argv = append(append(argv, image), args...)
	if out, err := imagestest.Run(ctx, "docker", argv...); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := exec.CommandContext(ctx, "docker", "logs", name).CombinedOutput()
			t.Logf("log of %s:\n%s", name, logs)
		}
		if _, err := imagestest.Run(ctx, "docker", "rm", "-f", name); err != nil {
			t.Errorf("removing container %s: %v", name, err)
		}
	})
	return name
}

// containerUser is the user the container's process runs as.
func containerUser(t *testing.T, name string) string {
	t.Helper()
	out := imagestest.MustRun(t, "docker", "inspect", "--format", "{{.State.Status}} {{.Config.User}}", name)
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "running" {
		t.Fatalf("container %s: %q", name, out)
	}
	return f[1]
}

func logsOf(name string) func() string {
	return func() string {
		out, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return string(out)
	}
}

// getJSON fetches url and decodes the 200 answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// grpcReady checks ServerReady over the KServe gRPC port and returns the
// client for further calls.
func grpcReady(t *testing.T, addr string) pb.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pb.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
	if err != nil || !r.Ready {
		t.Fatalf("gRPC ServerReady at %s: %v %v", addr, r, err)
	}
	return c
}

// TestIntegrationDockerDropInCommandForms: the image starts with no
// arguments (its cmd), with Triton's `tritonserver --model-repository=...`
// form, with the full path of the binary, and with KServe's exact args
// (also with the --model-control-mode=explicit KServe appends when no
// storage URI is given), as user 1000:1000, and answers health, metadata
// and gRPC on the ports those args choose.
func TestIntegrationDockerDropInCommandForms(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	d := imagestest.NewDocker(t)
	image := dropInImage(t, d)
	if ins := d.Inspect(image); ins.Config.User != "1000:1000" || len(ins.Config.Entrypoint) != 1 || strings.Join(ins.Config.Cmd, " ") != "--model-repository=/models" {
		t.Fatalf("image config: user %q, entrypoint %v, cmd %v", ins.Config.User, ins.Config.Entrypoint, ins.Config.Cmd)
	}
	repo := t.TempDir()
	if err := os.Chmod(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		mount string // where the repository is mounted
		args  []string
		http  int // container ports
		grpc  int
	}{
		{"the image's cmd", "/models", nil, 8000, 8001},
		{"Triton's guides", "/models", []string{"tritonserver", "--model-repository=/models"}, 8000, 8001},
		{"the binary's path", "/models", []string{"/opt/tritonserver/bin/tritonserver", "--model-repository=/models"}, 8000, 8001},
		{"KServe's runtime", "/mnt/models", kserveArgs, 8080, 9000},
		{"KServe's runtime without a storage URI", "/mnt/models", append(append([]string{}, kserveArgs...), "--model-control-mode=explicit"), 8080, 9000},
	} {
		t.Run(c.name, func(t *testing.T) {
			ports := freePorts(t, 2)
			name := container(t, image, []string{
				"-p", fmt.Sprintf("127.0.0.1:%d:%d", ports[0], c.http),
				"-p", fmt.Sprintf("127.0.0.1:%d:%d", ports[1], c.grpc),
				"-v", repo + ":" + c.mount + ":ro",
			}, c.args...)
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
			waitReady(t, base, nil, logsOf(name))
			if u := containerUser(t, name); u != "1000:1000" {
				t.Errorf("runs as %q", u)
			}
			var meta struct {
				Name       string   `json:"name"`
				Extensions []string `json:"extensions"`
			}
			getJSON(t, base+"/v2", &meta)
			if meta.Name != "triton" || len(meta.Extensions) == 0 {
				t.Errorf("server metadata %+v", meta)
			}
			grpcReady(t, fmt.Sprintf("127.0.0.1:%d", ports[1]))
		})
	}
	// A leading word other than the program's name is refused, naming it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := d.Run(ctx, image, "bash"); err == nil || !strings.Contains(out, `unexpected argument "bash"`) {
		t.Errorf("docker run IMAGE bash: %v\n%s", err, out)
	}
}

// cifarModel writes KServe's TorchScript CIFAR-10 sample layout, recreated
// with a random-weight model: <repo>/cifar10/config.pbtxt and
// 1/model.pt, and returns an input and torch's output for it.
func cifarModel(t *testing.T, repo string) (in, want []float64) {
	t.Helper()
	dir := filepath.Join(repo, "cifar10")
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `name: "cifar10"
platform: "pytorch_libtorch"
max_batch_size: 1
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]
`
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys, torch
torch.manual_seed(20)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 5)
        self.pool = torch.nn.MaxPool2d(2, 2)
        self.fc = torch.nn.Linear(6 * 14 * 14, 10)
    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))
m = torch.jit.script(Net().eval())
m.save(sys.argv[1])
x = torch.linspace(-1, 1, 3 * 32 * 32).reshape(1, 3, 32, 32)
with torch.no_grad():
    y = m(x)
json.dump({"in": x.flatten().tolist(), "out": y.flatten().tolist()}, sys.stdout)
`
	// TorchScript reads the class's source, so the script is a file.
	py := filepath.Join(t.TempDir(), "make_cifar10.py")
	if err := os.WriteFile(py, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(hostPython, py, filepath.Join(dir, "1", "model.pt"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("making the CIFAR-10 model: %v\n%s", err, stderr.Bytes())
	}
	var ref struct{ In, Out []float64 }
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	return ref.In, ref.Out
}

// TestIntegrationDockerKServeCIFAR10 runs the system-profile image (the
// pytorch backend) exactly as KServe's stock Triton runtime does, with its
// TorchScript CIFAR-10 sample's layout mounted at /mnt/models, and makes
// the v2 health, metadata and inference calls KServe's sample makes, over
// HTTP on 8080 and gRPC on 9000.
func TestIntegrationDockerKServeCIFAR10(t *testing.T) {
	b := systemImages(t)
	d := imagestest.NewDocker(t)
	image := d.Load(b.tarball)
	repo := filepath.Join(t.TempDir(), "models")
	in, want := cifarModel(t, repo)
	if err := os.Chmod(filepath.Dir(repo), 0o755); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	name := container(t, image, []string{
		"-p", fmt.Sprintf("127.0.0.1:%d:8080", ports[0]),
		"-p", fmt.Sprintf("127.0.0.1:%d:9000", ports[1]),
		"-v", repo + ":/mnt/models:ro",
	}, kserveArgs...)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	waitReady(t, base, nil, logsOf(name))
	if u := containerUser(t, name); u != "1000:1000" {
		t.Errorf("runs as %q", u)
	}
	for _, p := range []string{"/v2/health/live", "/v2/models/cifar10/ready"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	var meta struct {
		Name     string   `json:"name"`
		Versions []string `json:"versions"`
		Platform string   `json:"platform"`
		Inputs   []struct {
			Name     string  `json:"name"`
			Datatype string  `json:"datatype"`
			Shape    []int64 `json:"shape"`
		} `json:"inputs"`
	}
	getJSON(t, base+"/v2/models/cifar10", &meta)
	if meta.Platform != "pytorch_libtorch" || len(meta.Inputs) != 1 || meta.Inputs[0].Name != "INPUT__0" || fmt.Sprint(meta.Inputs[0].Shape) != "[-1 3 32 32]" {
		t.Errorf("model metadata %+v", meta)
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "INPUT__0", "shape": []int{1, 3, 32, 32}, "datatype": "FP32", "data": in}}})
	resp, err := (&http.Client{Timeout: time.Minute}).Post(base+"/v2/models/cifar10/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var res struct {
		Outputs []struct {
			Name  string    `json:"name"`
			Shape []int64   `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(data, &res); err != nil || resp.StatusCode != 200 || len(res.Outputs) != 1 || len(res.Outputs[0].Data) != 10 {
		t.Fatalf("infer: %s %s", resp.Status, data)
	}
	for i, w := range want {
		if g := res.Outputs[0].Data[i]; math.Abs(g-w) > 1e-4*(1+math.Abs(w)) {
			t.Errorf("output %d = %v, torch gives %v", i, g, w)
		}
	}
	c := grpcReady(t, fmt.Sprintf("127.0.0.1:%d", ports[1]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "cifar10"}); err != nil || m.Platform != "pytorch_libtorch" {
		t.Errorf("gRPC ModelMetadata: %v %v", m, err)
	}
}

// TestKServeDocMatchesTheTests keeps docs/kserve.md true: its
// ServingRuntime passes exactly the args the Docker tests run the image
// with, as user 1000, with KServe's protocol versions.
func TestKServeDocMatchesTheTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/kserve.md")
	if err != nil {
		t.Fatal(err)
	}
	type manifest struct {
		Kind string `yaml:"kind"`
		Spec struct {
			ProtocolVersions []string `yaml:"protocolVersions"`
			Containers       []struct {
				Args            []string `yaml:"args"`
				SecurityContext struct {
					RunAsUser    int  `yaml:"runAsUser"`
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
				} `yaml:"securityContext"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	}
	var runtime *manifest
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		r := &manifest{}
		if err := yaml.Unmarshal([]byte(block), r); err != nil {
			t.Fatalf("a YAML block of docs/kserve.md does not parse: %v", err)
		}
		if r.Kind == "ServingRuntime" {
			runtime = r
		}
	}
	if runtime == nil || len(runtime.Spec.Containers) != 1 {
		t.Fatal("docs/kserve.md has no ServingRuntime with one container")
	}
	c := runtime.Spec.Containers[0]
	if strings.Join(c.Args, " ") != strings.Join(kserveArgs, " ") {
		t.Errorf("the manifest's args %q, the tests run %q", c.Args, kserveArgs)
	}
	if c.SecurityContext.RunAsUser != 1000 || !c.SecurityContext.RunAsNonRoot {
		t.Errorf("securityContext %+v, want user 1000, non-root (the image's user)", c.SecurityContext)
	}
	if strings.Join(runtime.Spec.ProtocolVersions, ",") != "v2,grpc-v2" {
		t.Errorf("protocolVersions %v", runtime.Spec.ProtocolVersions)
	}
}
