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
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
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

// closedWithin reports whether the server closes c within d, reading
// whatever it still sends (a timeout is an error, EOF is the close).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil
}

// dial opens a TCP connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReliabilitySlowClients is issue 17's cases 2 and 3 against the
// binary, with the bounds turned down to a second: kept-alive connections
// that sit idle, headers that trickle in, bodies that trickle in, gRPC
// connections that never speak or sit idle, oversized gRPC messages, and
// more connections than the bound. Each is cut off or refused within a
// few seconds, and the server goes on serving.
func TestReliabilitySlowClients(t *testing.T) {
	needReliability(t)
	root := t.TempDir()
	writePythonModel(t, root, "double", doubleConfig, doubleModel)
	srv := startBinary(t, 0, "--model-repository", root,
		"--http-header-timeout-secs=1", "--http-idle-timeout-secs=1", "--http-body-min-rate=1000", "--http-max-connections=8",
		"--grpc-handshake-timeout-secs=1", "--grpc-max-connection-idle-secs=1", "--grpc-max-recv-message-size=1048576")
	httpAddr, grpcAddr := srv.addrs["HTTPService"], srv.addrs["GRPCInferenceService"]
	live := "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"

	t.Run("idle keep-alive", func(t *testing.T) {
		c := holdConns(t, httpAddr, 1, live)[0]
		if !closedWithin(c, 4*time.Second) {
			t.Error("an idle keep-alive connection outlived --http-idle-timeout-secs=1")
		}
	})
	t.Run("trickled headers", func(t *testing.T) {
		c := dial(t, httpAddr)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for _, b := range []byte("GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)) {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
		if !closedWithin(c, 4*time.Second) {
			t.Error("headers trickling at 10 bytes per second held the connection past --http-header-timeout-secs=1")
		}
	})
	t.Run("trickled body", func(t *testing.T) {
		c := dial(t, httpAddr)
		start := time.Now()
		fmt.Fprintf(c, "POST /v2/models/double/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "(--http-body-min-rate)") {
			t.Errorf("a body at 10 bytes per second: %d %s", resp.StatusCode, b)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a trickled body was held %s", d)
		}
	})
	t.Run("connection limit", func(t *testing.T) {
		holdConns(t, httpAddr, 8, live)
		quick := &http.Client{Timeout: 300 * time.Millisecond}
		if resp, err := quick.Get("http://" + httpAddr + "/v2/health/live"); err == nil {
			resp.Body.Close()
			t.Error("a ninth connection was served while --http-max-connections=8 were held")
		}
		// The held ones go idle and are closed; the next client is served.
		patient := &http.Client{Timeout: 5 * time.Second}
		resp, err := patient.Get("http://" + httpAddr + "/v2/health/live")
		if err != nil {
			t.Fatalf("after the idle connections were closed: %v", err)
		}
		resp.Body.Close()
	})
	t.Run("silent gRPC connection", func(t *testing.T) {
		if !closedWithin(dial(t, grpcAddr), 4*time.Second) {
			t.Error("a gRPC connection that never speaks outlived --grpc-handshake-timeout-secs=1")
		}
	})
	t.Run("idle gRPC connection", func(t *testing.T) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := pb.NewGRPCInferenceServiceClient(conn)
		if _, err := client.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for st := conn.GetState(); st != connectivity.Idle; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				t.Fatalf("the connection is still %v 5 s after --grpc-max-connection-idle-secs=1", conn.GetState())
			}
		}
		if _, err := client.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil {
			t.Errorf("the call after the server's GOAWAY: %v", err)
		}
	})
	t.Run("oversized gRPC message", func(t *testing.T) {
		client := grpcClient(t, grpcAddr)
		big := &pb.ModelInferRequest{ModelName: "double", RawInputContents: [][]byte{make([]byte, 2<<20)},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1 << 17, 4}}}}
		_, err := client.ModelInfer(context.Background(), big)
		if st := grpcstatus.Convert(err); st.Code() != codes.ResourceExhausted {
			t.Errorf("a 2 MiB message to --grpc-max-recv-message-size=1048576: %v", err)
		}
		if got, err := inferDoubleGRPC(client, [4]float32{1, 2, 3, 4}); err != nil || got[3] != 8 {
			t.Errorf("a request after the refused one: %v %v", got, err)
		}
	})
}

// sleepyModel hangs in execute on a negative input, having said so in the
// file "executing" of its version directory.
const sleepyModel = `import time
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy()
            if x[0] < 0:
                open("executing", "w").close()
                time.sleep(3600)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", x)]))
        return out
`

// stubOf returns the pid of the python stub of server pid whose working
// directory is dir (a model's version directory), or 0.
func stubOf(pid int, dir string) int {
	for _, s := range stubsOf(pid) {
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", s)); err == nil && cwd == dir {
			return s
		}
	}
	return 0
}

// TestReliabilityFaults injects faults into the instances of the binary's
// python models: a stub that crashes in execute, one killed from outside
// while idle, one that hangs past --backend-config=python,execute-timeout-secs,
// and one that crashed and cannot restart (issue 17's case 9: the model
// and the server not ready until it can); then a SIGTERM while an execute
// never returns (case 5: the exit comes within --exit-timeout-secs, with
// status 1, the stuck request answered with an error and no stub left).
func TestReliabilityFaults(t *testing.T) {
	needReliability(t)
	root := t.TempDir()
	writePythonModel(t, root, "fragile", floatConfig, fragileModel)
	writePythonModel(t, root, "sleepy", floatConfig, sleepyModel)
	srv := startBinary(t, 0, "--model-repository", root, "--backend-config=python,execute-timeout-secs=2")
	base := "http://" + srv.addrs["HTTPService"]
	infer := func(model string, v float32) (int, string) {
		return post(t, base+"/v2/models/"+model+"/infer", fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[1],"datatype":"FP32","data":[%g]}]}`, v))
	}
	ready := func(path string) bool {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	waitReady := func(want bool, d time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(d); ready("/v2/models/fragile/ready") != want || ready("/v2/health/ready") != want; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("model and server readiness not %v after %s", want, d)
			}
		}
	}
	fragileDir := filepath.Join(root, "fragile", "1")
	// fragileStub waits for a stub of fragile other than old to run.
	fragileStub := func(old int) int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if pid := stubOf(srv.pid(), fragileDir); pid != 0 && pid != old {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatal("no new stub of fragile runs")
			}
		}
	}
	killStub := func() int {
		t.Helper()
		pid := fragileStub(0)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		return pid
	}

	t.Run("crash in execute", func(t *testing.T) {
		if code, body := infer("fragile", -1); code != 500 || !strings.Contains(body, "exited while running execute") {
			t.Errorf("the crashing request: %d %s", code, body)
		}
		if code, body := infer("fragile", 2); code != 200 {
			t.Errorf("after the crash: %d %s", code, body)
		}
	})
	t.Run("killed while idle", func(t *testing.T) {
		// The stub comes back without a request to find it gone.
		fragileStub(killStub())
		waitReady(true, 30*time.Second)
		if code, body := infer("fragile", 3); code != 200 {
			t.Errorf("after the kill: %d %s", code, body)
		}
	})
	t.Run("hang past the execute timeout", func(t *testing.T) {
		start := time.Now()
		if code, body := infer("sleepy", -1); code != 500 || !strings.Contains(body, "did not finish running execute within 2s") {
			t.Errorf("the hanging request: %d %s", code, body)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the hanging request was answered after %s", d)
		}
		if code, body := infer("sleepy", 4); code != 200 {
			t.Errorf("after the hang: %d %s", code, body)
		}
	})
	t.Run("cannot restart", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(fragileDir, "broken"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		killStub()
		waitReady(false, 30*time.Second)
		if !ready("/v2/health/live") {
			t.Error("not live while a model cannot serve")
		}
		if code, body := infer("fragile", 1); code != 503 || !strings.Contains(body, "the weights are gone") {
			t.Errorf("a request while the stub cannot restart: %d %s", code, body)
		}
		if err := os.Remove(filepath.Join(fragileDir, "broken")); err != nil {
			t.Fatal(err)
		}
		waitReady(true, 60*time.Second)
		if code, body := infer("fragile", 5); code != 200 {
			t.Errorf("after the model was fixed: %d %s", code, body)
		}
	})

	t.Run("SIGTERM with an execute that never returns", func(t *testing.T) {
		root := t.TempDir()
		writePythonModel(t, root, "stuck", floatConfig, sleepyModel)
		srv := startBinary(t, 0, "--model-repository", root, "--backend-config=python,execute-timeout-secs=0", "--exit-timeout-secs=2")
		stubDir := filepath.Join(root, "stuck", "1")
		stub := stubOf(srv.pid(), stubDir)
		type answer struct {
			code int
			body string
		}
		answered := make(chan answer, 1)
		go func() {
			resp, err := http.Post("http://"+srv.addrs["HTTPService"]+"/v2/models/stuck/infer", "application/json",
				strings.NewReader(`{"inputs":[{"name":"INPUT__0","shape":[1],"datatype":"FP32","data":[-1]}]}`))
			if err != nil {
				answered <- answer{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered <- answer{resp.StatusCode, string(b)}
		}()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(stubDir, "executing")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the request never reached execute")
			}
		}
		start := time.Now()
		srv.signal(t, syscall.SIGTERM)
		code := srv.wait(t, 15*time.Second)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("exit %s after SIGTERM with --exit-timeout-secs=2", d)
		}
		if code != 1 {
			t.Errorf("exit status %d after cutting a request, want 1", code)
		}
		select {
		case a := <-answered:
			if a.code != 503 || !strings.Contains(a.body, "was unloaded while this request was executing") {
				t.Errorf("the stuck request: %d %s", a.code, a.body)
			}
		case <-time.After(5 * time.Second):
			t.Error("the stuck request was never answered")
		}
		for deadline := time.Now().Add(5 * time.Second); stub != 0 && alive(stub); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the stub %d outlived the server", stub)
				break
			}
		}
	})
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.HasPrefix(string(stat[strings.LastIndexByte(string(stat), ')')+2:]), "Z")
}
