package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestStrictReadinessFlag runs the server with a model that fails to load:
// both frontends report not ready under the default --strict-readiness and
// ready with --strict-readiness=false, and both stay live.
func TestStrictReadinessFlag(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "good")
	broken := `
backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
parameters { key: "fake_fail" value { string_value: "load" } }
`
	if err := os.MkdirAll(filepath.Join(root, "broken", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "broken", "config.pbtxt"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag  string
		ready bool
	}{{"--strict-readiness=true", false}, {"--strict-readiness=false", true}} {
		t.Run(c.flag, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			s := startServe(t, ctx, root, "--exit-on-error=false", c.flag)
			defer func() {
				cancel()
				if err := <-s.done; err != nil {
					t.Error(err)
				}
			}()
			code := map[bool]int{true: 200, false: 400}
			for path, want := range map[string]int{"/v2/health/live": 200, "/v2/health/ready": code[c.ready]} {
				resp, err := http.Get("http://" + s.addrs["HTTPService"] + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("HTTP %s: %d, want %d", path, resp.StatusCode, want)
				}
			}
			conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := pb.NewGRPCInferenceServiceClient(conn)
			live, err := client.ServerLive(ctx, &pb.ServerLiveRequest{})
			if err != nil || !live.Live {
				t.Errorf("gRPC ServerLive = %v, %v; want live", live, err)
			}
			ready, err := client.ServerReady(ctx, &pb.ServerReadyRequest{})
			if err != nil || ready.Ready != c.ready {
				t.Errorf("gRPC ServerReady = %v, %v; want %v", ready, err, c.ready)
			}
		})
	}
}

// fragileModel is a python model that crashes on a negative input and
// cannot initialize while its version directory holds a file "broken".
const fragileModel = `import os
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists("broken"):
            raise RuntimeError("the weights are gone")
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy()
            if x[0] < 0:
                os._exit(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", x)]))
        return out
`

// TestReadinessFollowsInstances is issue 17's case 9: a python stub that
// crashed and could not restart answered every request 503 while the model
// and the server reported ready. Now the model is not ready over HTTP and
// gRPC, nor is the server (strict readiness, the default), while it stays
// live; once the model can start again the stub comes back by itself and
// both turn ready and the model serves.
func TestReadinessFollowsInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "fragile", floatConfig, "1")
	if err := os.WriteFile(filepath.Join(root, "fragile", "1", "model.py"), []byte(fragileModel), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, grpcAddr, logs := startPythonServer(t, true, "fragile", "--model-repository", root)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	infer := func(v float32) (int, string) {
		body := fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[1],"datatype":"FP32","data":[%g]}]}`, v)
		return post(t, base+"/v2/models/fragile/infer", body)
	}
	// state reports HTTP model ready, HTTP server ready, gRPC ModelReady
	// and gRPC ServerReady, and checks that the server stays live.
	state := func() [4]bool {
		var s [4]bool
		for i, path := range []string{"/v2/models/fragile/ready", "/v2/health/ready", "/v2/health/live"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if i == 2 {
				if resp.StatusCode != 200 {
					t.Errorf("live: %d", resp.StatusCode)
				}
				continue
			}
			s[i] = resp.StatusCode == 200
		}
		mr, err := client.ModelReady(context.Background(), &pb.ModelReadyRequest{Name: "fragile"})
		if err != nil {
			t.Fatal(err)
		}
		sr, err := client.ServerReady(context.Background(), &pb.ServerReadyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s[2], s[3] = mr.Ready, sr.Ready
		return s
	}
	waitState := func(want bool, d time.Duration) {
		t.Helper()
		all := [4]bool{want, want, want, want}
		for deadline := time.Now().Add(d); state() != all; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("readiness %v after %s, want all %v:\n%s", state(), d, want, logs)
			}
		}
	}
	waitState(true, 10*time.Second)
	if code, body := infer(2); code != 200 {
		t.Fatalf("before the crash: %d %s", code, body)
	}

	if err := os.WriteFile(filepath.Join(root, "fragile", "1", "broken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := infer(-1); code == 200 {
		t.Fatal("the crashing request succeeded")
	}
	waitState(false, 30*time.Second)
	if code, body := infer(1); code != 503 || !strings.Contains(body, "restarting the stub failed") {
		t.Errorf("a request while the stub cannot restart: %d %s", code, body)
	}

	if err := os.Remove(filepath.Join(root, "fragile", "1", "broken")); err != nil {
		t.Fatal(err)
	}
	waitState(true, 60*time.Second)
	if code, body := infer(3); code != 200 || !strings.Contains(body, "[3]") {
		t.Errorf("after the model was fixed: %d %s", code, body)
	}
}
