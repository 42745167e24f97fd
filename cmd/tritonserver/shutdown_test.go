package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// slowModel takes 300 ms per request on one instance without batching, so
// that requests are still queued or running when the shutdown begins.
const slowModel = `
backend: "fake"
max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
instance_group [{ kind: KIND_CPU count: 2 }]
parameters { key: "fake_delay_us" value { string_value: "300000" } }
`

type testServer struct {
	addrs map[string]string
	logs  *syncBuffer
	done  chan error
}

// startServe runs serve with the fake backend (and the real ones) on
// loopback ports chosen by the kernel.
func startServe(t *testing.T, ctx context.Context, root string, extra ...string) *testServer {
	t.Helper()
	args := append([]string{"--model-repository", root, "--http-address=127.0.0.1", "--http-port=0",
		"--grpc-address=127.0.0.1", "--grpc-port=0", "--metrics-address=127.0.0.1", "--metrics-port=0"}, extra...)
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addrs: map[string]string{}, logs: &syncBuffer{}, done: make(chan error, 1)}
	log, err := newLog(cfg, s.logs)
	if err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- serve(ctx, cfg, log, map[string]backend.Backend{"fake": fake.New()}) }()
	s.addrs = waitStarted(t, s.logs, 3, nil)
	return s
}

func rowBytes() []byte {
	b := make([]byte, 16)
	for i := 0; i < 4; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
	}
	return b
}

// TestGracefulShutdown cancels the server (as SIGINT/SIGTERM do) while
// HTTP and GRPC requests are queued and running: every one of them is
// answered successfully, and serve returns nil (exit status 0).
func TestGracefulShutdown(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "slow", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "slow", "config.pbtxt"), []byte(slowModel), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--exit-timeout-secs=30")
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)

	const perProtocol = 4 // 8 requests, 2 instances, 300 ms each: 1.2 s of work
	var wg sync.WaitGroup
	errs := make(chan error, 2*perProtocol)
	for i := 0; i < perProtocol; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			req := &pb.ModelInferRequest{ModelName: "slow", RawInputContents: [][]byte{rowBytes()},
				Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}}}
			resp, err := client.ModelInfer(context.Background(), req)
			if err == nil && len(resp.RawOutputContents) != 1 {
				err = fmt.Errorf("GRPC response without output: %v", resp)
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			hdr := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
			body := append([]byte(hdr), rowBytes()...)
			req, _ := http.NewRequest("POST", "http://"+s.addrs["HTTPService"]+"/v2/models/slow/infer", bytes.NewReader(body))
			req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(len(hdr)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
			}
			errs <- err
		}()
	}
	// Shut down once every request has reached the server.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("requests never reached the server")
		}
		// Two run, the rest wait: all were accepted.
		if pendingGauge(t, s) == 2*perProtocol-2 {
			break
		}
	}
	start := time.Now()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("request in flight at shutdown failed: %v", err)
		}
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, s.logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not exit")
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("shutdown took %v: the queued work cannot have been drained", el)
	}
	if !strings.Contains(s.logs.String(), "shutdown complete") {
		t.Errorf("log:\n%s", s.logs.String())
	}
}

// pendingGauge reads nv_inference_pending_request_count (requests queued
// and not yet executing) of the slow model from the metrics endpoint.
func pendingGauge(t *testing.T, s *testServer) int { return pendingGaugeOf(t, s, "slow") }

func pendingGaugeOf(t *testing.T, s *testServer, model string) int {
	t.Helper()
	resp, err := http.Get("http://" + s.addrs["Metrics Service"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "nv_inference_pending_request_count{") && strings.Contains(line, `model="`+model+`"`) {
			var n float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

func writeFakeModel(t *testing.T, root, name string) {
	t.Helper()
	cfg := strings.Replace(slowModel, `"300000"`, `"0"`, 1)
	if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestExplicitModelControl(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	writeFakeModel(t, root, "b")
	ctx, cancel := context.WithCancel(context.Background())
	s := startServe(t, ctx, root, "--model-control-mode=explicit", "--load-model=a")
	base := "http://" + s.addrs["HTTPService"]
	ready := func(m string) int {
		resp, err := http.Get(base + "/v2/models/" + m + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if ready("a") != 200 || ready("b") != 400 {
		t.Fatalf("after --load-model=a: a %d, b %d", ready("a"), ready("b"))
	}
	override := `{"parameters":{"config":"{\"backend\":\"fake\",\"max_batch_size\":2,\"input\":[{\"name\":\"INPUT__0\",\"data_type\":\"TYPE_FP32\",\"dims\":[4]}],\"output\":[{\"name\":\"OUTPUT__0\",\"data_type\":\"TYPE_FP32\",\"dims\":[3]}]}"}}`
	if code, body := post(t, base+"/v2/repository/models/b/load", override); code != 200 {
		t.Fatalf("load b: %d %s", code, body)
	}
	resp, err := http.Get(base + "/v2/models/b/config")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"max_batch_size":2`) {
		t.Errorf("config override not served: %s", b)
	}
	if code, body := post(t, base+"/v2/repository/models/a/unload", ""); code != 200 {
		t.Fatalf("unload a: %d %s", code, body)
	}
	if ready("a") != 400 || ready("b") != 200 {
		t.Fatalf("after unload a / load b: a %d, b %d", ready("a"), ready("b"))
	}
	if code, _ := post(t, base+"/v2/repository/models/nope/load", ""); code != 500 { // Triton's INTERNAL "failed to poll from model repository"
		t.Errorf("load of a missing model: %d", code)
	}
	if code, _ := post(t, base+"/v2/repository/models/b/load", `{"parameters":{"config":"{\"max_batch_size\":\"x\"}"}}`); code != 500 {
		t.Errorf("bad config override: %d", code)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}

func TestPollModelControl(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	s := startServe(t, ctx, root, "--model-control-mode=poll", "--repository-poll-secs=1")
	base := "http://" + s.addrs["HTTPService"]
	if code, body := post(t, base+"/v2/repository/models/a/unload", ""); code != 503 {
		t.Errorf("unload in poll mode: %d %s", code, body)
	}
	writeFakeModel(t, root, "b")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/v2/models/b/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poller never loaded model b")
		}
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}
