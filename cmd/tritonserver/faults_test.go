package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

func writeConfig(t *testing.T, root, name, cfg string, versions ...string) {
	t.Helper()
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(root, name, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMDuringLongLoad is issue 17's case 4 (SIGTERM had no effect
// while a long load held startup): the signal (the serve context ending)
// stops a load in progress, no further model starts loading, and serve
// returns promptly with an error.
func TestSIGTERMDuringLongLoad(t *testing.T) {
	root := t.TempDir()
	slow := strings.Replace(slowModel, `"fake_delay_us"`, `"fake_load_delay_us"`, 1)
	slow = strings.Replace(slow, `"300000"`, `"600000000"`, 1) // ten minutes
	writeConfig(t, root, "a_slow", slow, "1")
	writeConfig(t, root, "b_next", slowModel, "1")
	cfg, err := parseFlags([]string{"--model-repository", root, "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	log, err := newLog(cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- serve(ctx, cfg, log, fakeBackends()) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("serve after a signal during the load: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still loading 10 s after the signal:\n%s", logs)
	}
	if strings.Contains(logs.String(), "model=b_next") && strings.Contains(logs.String(), "model version ready") {
		t.Errorf("a model loaded after the signal:\n%s", logs)
	}
}

func fakeBackends() map[string]backend.Backend {
	return map[string]backend.Backend{"fake": fake.New()}
}

// TestShutdownWithStuckExecution is issue 17's case 5: a forward that
// never returns kept the server alive past --exit-timeout-secs (waiting in
// Scheduler.Close) and the exit status was 0 although requests were
// dropped. serve returns within the timeout with an error, and the stuck
// HTTP and gRPC requests are answered with an error rather than a reset.
func TestShutdownWithStuckExecution(t *testing.T) {
	root := t.TempDir()
	writeConfig(t, root, "slow", slowModel+`parameters { key: "fake_fail" value { string_value: "hang" } }`, "1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--exit-timeout-secs=3")
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcErr := make(chan error, 1)
	go func() {
		_, err := pb.NewGRPCInferenceServiceClient(conn).ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "slow",
			RawInputContents: [][]byte{rowBytes()},
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}}})
		grpcErr <- err
	}()
	type answer struct {
		code int
		body string
		err  error
	}
	httpAns := make(chan answer, 1)
	go func() {
		body := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
		resp, err := http.Post("http://"+s.addrs["HTTPService"]+"/v2/models/slow/infer", "application/json", strings.NewReader(body))
		if err != nil {
			httpAns <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		httpAns <- answer{code: resp.StatusCode, body: string(b)}
	}()
	time.Sleep(time.Second) // both are executing (2 instances; they hang, so waiting longer only costs time)
	start := time.Now()
	cancel()
	select {
	case err := <-s.done:
		if err == nil || !strings.Contains(err.Error(), "answered with an error") {
			t.Errorf("serve after a stuck shutdown: %v (want an error, for a non-zero exit status)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running 10 s after the signal with --exit-timeout-secs=3:\n%s", s.logs)
	}
	// The execution hangs forever; 3 s beyond the exit timeout allows for a
	// loaded machine and still shows the timeout ended the wait.
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("shutdown took %s with --exit-timeout-secs=3", d)
	}
	if a := <-httpAns; a.err != nil || a.code != 503 || !strings.Contains(a.body, "was unloaded while this request was executing") {
		t.Errorf("the stuck HTTP request: %+v", a)
	}
	if st := grpcstatus.Convert(<-grpcErr); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "was unloaded while this request was executing") {
		t.Errorf("the stuck gRPC request: %v", st)
	}
	if run(context.Background(), nil, io.Discard, io.Discard) == 0 {
		t.Error("run without a repository exited 0")
	}
}
