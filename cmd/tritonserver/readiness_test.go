package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
