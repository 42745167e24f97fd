package main

// The reliability suite (issue 17): the server binary in its own process,
// attacked and broken as a client or an unlucky operator would. Its tests
// are named TestReliability*; `make reliability` runs them with short fuzz
// runs of every fuzz target, and `make test` runs both.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// needReliability skips a reliability test in -short runs and checks that
// python with numpy is there (a failure in CI, a skip elsewhere).
func needReliability(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("the reliability suite runs the server binary (not in -short runs)")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
}

// grpcClient dials addr and closes the connection when the test ends.
func grpcClient(t *testing.T, addr string) pb.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

// holdConns opens n TCP connections to addr, sending each hello (if any)
// and reading the answer's headers, and closes them when the test ends.
func holdConns(t *testing.T, addr string, n int, hello string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d to %s: %v", i, addr, err)
		}
		conns = append(conns, c)
		if hello == "" {
			continue
		}
		if _, err := io.WriteString(c, hello); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp.Body.Close()
	}
	return conns
}

// TestReliabilityIdleClientsCannotExhaustDescriptors is issue 17's case 2
// under the open-file limit of the report (1024): idle clients held every
// descriptor, accept4 failed with "too many open files" and new clients
// timed out. 200 kept-alive HTTP clients and 1000 gRPC clients that never
// speak are held; each service is bounded to a quarter of the limit, so a
// new HTTP client and a metrics scrape are answered at once, and a new
// gRPC client as soon as the silent ones go.
func TestReliabilityIdleClientsCannotExhaustDescriptors(t *testing.T) {
	needReliability(t)
	srv := startBinary(t, 1024, "--model-repository", t.TempDir())
	holdConns(t, srv.addrs["HTTPService"], 200, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	silent := holdConns(t, srv.addrs["GRPCInferenceService"], 1000, "")
	time.Sleep(500 * time.Millisecond) // let the server accept what it will
	client := &http.Client{Timeout: 3 * time.Second}
	for _, url := range []string{"http://" + srv.addrs["HTTPService"] + "/v2/health/ready", "http://" + srv.addrs["Metrics Service"] + "/metrics"} {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("a new client while 1200 idle ones are held: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", url, resp.StatusCode)
		}
	}
	for _, c := range silent {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := grpcClient(t, srv.addrs["GRPCInferenceService"]).ServerLive(ctx, &pb.ServerLiveRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Errorf("a new gRPC client once the silent ones left: %v", err)
	}
	if strings.Contains(srv.logs.String(), "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", srv.logs)
	}
}

// floatConfig is a python model of one FP32 value in and out, on one
// instance.
const floatConfig = `
backend: "python"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
`

// confinedModel is a valid python model; foreignModel is one outside the
// model directory that would leave a mark if it were ever imported.
const (
	confinedModel = `import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())]) for r in requests]
`
	foreignModel = `open(%q, "w").write("imported")
`
)

// TestReliabilityLoadAPIConfined is issue 17's case 8 against the binary:
// the explicit-mode load API loaded a foreign model.py through
// "../../../elsewhere" and any .so through op_library_filename, and could
// not be restricted. With --http-restricted-api and
// --grpc-restricted-protocol the load API needs the operator's header;
// with it, every file an override names must still resolve inside the
// model directory, the refusal names no server path, nothing foreign is
// imported and the serving version keeps serving.
func TestReliabilityLoadAPIConfined(t *testing.T) {
	needReliability(t)
	base := t.TempDir()
	root := filepath.Join(base, "repo")
	elsewhere := filepath.Join(base, "elsewhere")
	mark := filepath.Join(base, "imported")
	writeConfig(t, root, "m", floatConfig, "1")
	if err := os.WriteFile(filepath.Join(root, "m", "1", "model.py"), []byte(confinedModel), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.py", "linked.py"} {
		if err := os.WriteFile(filepath.Join(elsewhere, f), []byte(fmt.Sprintf(foreignModel, mark)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(elsewhere, "linked.py"), filepath.Join(root, "m", "1", "linked.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "evil.so"), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startBinary(t, 0, "--model-repository", root, "--model-control-mode=explicit", "--load-model=m",
		"--http-restricted-api=model-repository:admin=s3cret", "--grpc-restricted-protocol=model-repository:admin=s3cret")
	httpBase := "http://" + srv.addrs["HTTPService"]
	load := func(cfg string, header bool) (int, string) {
		t.Helper()
		q, _ := json.Marshal(cfg)
		req, _ := http.NewRequest("POST", httpBase+"/v2/repository/models/m/load", strings.NewReader(`{"parameters":{"config":`+string(q)+`}}`))
		if header {
			req.Header.Set("admin", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	override := func(extra string) string {
		return `{"backend":"python","max_batch_size":0,"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[1]}],"output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[1]}]` + extra + `}`
	}
	if code, body := load(override(""), false); code != 403 || !strings.Contains(body, "This API is restricted, expecting header 'admin'") {
		t.Errorf("load without the operator's header: %d %s", code, body)
	}
	for _, c := range []struct{ name, extra, want string }{
		{"model.py up and out", `,"default_model_filename":"../../../elsewhere/model.py"`, "model file '../../../elsewhere/model.py' resolves outside the model directory"},
		{"absolute model.py", `,"default_model_filename":"` + filepath.Join(elsewhere, "model.py") + `"`, "resolves outside the model directory"},
		{"model.py through a symlink", `,"default_model_filename":"linked.py"`, "model file 'linked.py' resolves outside the model directory"},
		{"op library", `,"model_operations":{"op_library_filename":["` + filepath.Join(elsewhere, "evil.so") + `"]}`, "op_library_filename"},
	} {
		code, body := load(override(c.extra), true)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 %q", c.name, code, body, c.want)
		}
		if strings.Contains(body, base) {
			t.Errorf("%s: the error names a server path: %s", c.name, body)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a model.py outside the model directory was imported")
	}
	if code, body := post(t, httpBase+"/v2/models/m/infer", `{"inputs":[{"name":"INPUT__0","shape":[1],"datatype":"FP32","data":[7]}]}`); code != 200 {
		t.Errorf("the serving version after the refused loads: %d %s", code, body)
	}

	client := grpcClient(t, srv.addrs["GRPCInferenceService"])
	req := &pb.RepositoryModelLoadRequest{ModelName: "m", Parameters: map[string]*pb.ModelRepositoryParameter{
		"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: override(`,"default_model_filename":"../../../elsewhere/model.py"`)}}}}
	_, err := client.RepositoryModelLoad(context.Background(), req)
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "expecting header 'triton-grpc-protocol-admin'") {
		t.Errorf("gRPC load without the operator's metadata: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "triton-grpc-protocol-admin", "s3cret")
	_, err = client.RepositoryModelLoad(ctx, req)
	if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "resolves outside the model directory") || strings.Contains(st.Message(), base) {
		t.Errorf("gRPC load of a foreign model.py: %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a model.py outside the model directory was imported over gRPC")
	}
}
