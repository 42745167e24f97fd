package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// seedRepo lays out the report's python-backend repository exactly as
// shipped (runtime/python/testdata keeps a copy of the report's files), with
// model.pt made by the report's make_model.py and venv.tar.gz packed from a
// venv over the distribution's python, as the report does.
func seedRepo(t *testing.T, variant string) string {
	t.Helper()
	py := "/usr/bin/python3"
	testenv.NeedPython(t, py, "torch", "numpy")
	repo := filepath.Join(t.TempDir(), "model_repository")
	if out, err := exec.Command("cp", "-r", filepath.Join("../../runtime/python/testdata", variant), repo).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	model := filepath.Join(repo, "simple_linear")
	if out, err := exec.Command(py, "../../runtime/python/testdata/make_model.py", filepath.Join(model, "1", "model.pt")).CombinedOutput(); err != nil {
		t.Fatalf("make_model.py: %v %s", err, out)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", "--system-site-packages", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	if out, err := exec.Command("tar", "czf", filepath.Join(model, "venv.tar.gz"), "-C", filepath.Dir(venv), "venv").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	return repo
}

// startServer runs the real program in-process on free loopback ports and
// returns its HTTP and metrics base URLs.
func startServer(t *testing.T, args ...string) (string, string, *syncBuffer) {
	base, metrics, _, logs := startServerGRPC(t, false, args...)
	return base, metrics, logs
}

// startServerGRPC also starts the gRPC endpoint when withGRPC and returns
// its address.
func startServerGRPC(t *testing.T, withGRPC bool, args ...string) (string, string, string, *syncBuffer) {
	t.Helper()
	return startPythonServer(t, withGRPC, "simple_linear", args...)
}

// startPythonServer is startServerGRPC waiting for the model named ready.
func startPythonServer(t *testing.T, withGRPC bool, model string, args ...string) (string, string, string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	common := []string{"--http-address=127.0.0.1", "--http-port=0", "--metrics-address=127.0.0.1", "--metrics-port=0",
		"--backend-config=python,env-cache-dir=" + t.TempDir()}
	want := 2
	if withGRPC {
		common = append(common, "--allow-grpc=true", "--grpc-address=127.0.0.1", "--grpc-port=0")
		want = 3
	} else {
		common = append(common, "--allow-grpc=false")
	}
	go func() { done <- run(ctx, append(common, args...), io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("server exit %d:\n%s", code, logs.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("server did not shut down")
		}
	})
	addrs := waitStarted(t, logs, want, done)
	base := "http://" + addrs["HTTPService"]
	waitModelsReady(t, base, logs, model)
	return base, "http://" + addrs["Metrics Service"], addrs["GRPCInferenceService"], logs
}

// inferGRPC sends the rows as raw_input_contents through a client
// generated from our .proto.
func inferGRPC(addr string, rows [][]float32) ([][]float64, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	raw := make([]byte, 0, len(rows)*40)
	for _, r := range rows {
		for _, v := range r {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inference.ModelInferRequest{
		ModelName: "simple_linear",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT__0", Datatype: "FP32", Shape: []int64{int64(len(rows)), 10}}},
		RawInputContents: [][]byte{raw},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUTPUT__0" || len(resp.RawOutputContents) != 1 {
		return nil, fmt.Errorf("unexpected response %v", resp)
	}
	if sh := resp.Outputs[0].Shape; len(sh) != 2 || sh[0] != int64(len(rows)) || sh[1] != 5 {
		return nil, fmt.Errorf("output shape %v", sh)
	}
	out := resp.RawOutputContents[0]
	got := make([][]float64, len(rows))
	for i := range got {
		for j := 0; j < 5; j++ {
			got[i] = append(got[i], float64(math.Float32frombits(binary.LittleEndian.Uint32(out[(i*5+j)*4:]))))
		}
	}
	return got, nil
}

// torchForward computes the expected output, row by row, with torch itself.
func torchForward(t *testing.T, modelPT string, rows [][]float32) [][]float64 {
	t.Helper()
	flat := torchtest.Forward(t, "/usr/bin/python3", modelPT, rows)
	want := make([][]float64, len(rows))
	for i := range want {
		want[i] = flat[i*5 : i*5+5]
	}
	return want
}

// postInfer POSTs req, a JSON inference request, to model's infer
// endpoint on the HTTP base URL and returns the body of its 200 answer.
func postInfer(base, model string, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := http.Post(base+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	return data, nil
}

func inferJSON(base string, rows [][]float32) ([][]float64, error) {
	flat := []float32{}
	for _, r := range rows {
		flat = append(flat, r...)
	}
	data, err := postInfer(base, "simple_linear", map[string]any{"inputs": []any{map[string]any{
		"name": "INPUT__0", "datatype": "FP32", "shape": []int{len(rows), 10}, "data": flat}}})
	if err != nil {
		return nil, err
	}
	var out struct {
		Outputs []struct {
			Name  string
			Shape []int
			Data  []float64
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	o := out.Outputs[0]
	if o.Name != "OUTPUT__0" || len(o.Shape) != 2 || o.Shape[0] != len(rows) || o.Shape[1] != 5 {
		return nil, fmt.Errorf("output %s shape %v", o.Name, o.Shape)
	}
	got := make([][]float64, len(rows))
	for i := range got {
		got[i] = o.Data[i*5 : i*5+5]
	}
	return got, nil
}

func closeTo(a, b [][]float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		for j := range a[i] {
			if math.Abs(a[i][j]-b[i][j]) > tol {
				return false
			}
		}
	}
	return true
}

func rowsFor(seed int, n int) [][]float32 {
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, 10)
		for j := range rows[i] {
			rows[i][j] = float32((seed*31+i*7+j*3)%17)/8 - 1
		}
	}
	return rows
}

// The report's python-backend repository, unchanged, served over HTTP and
// gRPC: a [2,10] input gives torch's own (2,5) output.
func TestPythonSeedRepositoryOverHTTPAndGRPC(t *testing.T) {
	repo := seedRepo(t, "seed-model-repository")
	base, _, grpcAddr, logs := startServerGRPC(t, true, "--model-repository", repo, "--log-verbose=1")
	rows := rowsFor(1, 2)
	want := torchForward(t, filepath.Join(repo, "simple_linear", "1", "model.pt"), rows)
	got, err := inferJSON(base, rows)
	if err != nil {
		t.Fatalf("HTTP: %v\n%s", err, logs.String())
	}
	if !closeTo(got, want, torchtest.Tolerance) {
		t.Errorf("HTTP: got %v, want %v", got, want)
	}
	got, err = inferGRPC(grpcAddr, rows)
	if err != nil {
		t.Fatalf("gRPC: %v\n%s", err, logs.String())
	}
	if !closeTo(got, want, torchtest.Tolerance) {
		t.Errorf("gRPC: got %v, want %v", got, want)
	}
	// model.py's own output reaches the log run builds, one record per
	// line, attributed to the backend and the model instance.
	if line := `] Model initialized successfully on CPU. backend=python model=simple_linear version=1 instance=0`; !strings.Contains(logs.String(), line) {
		t.Errorf("log lacks %s:\n%s", line, logs.String())
	}
}

// The tuned variant: 4 stub processes, and under 32 concurrent clients
// execute() receives batches while every client gets its own rows back.
func TestPythonBatchedSeedRepository(t *testing.T) {
	repo := seedRepo(t, "seed-model-repository-batched")
	base, metricsURL, logs := startServer(t, "--model-repository", repo)
	if n := countStubs(t); n != 4 {
		t.Errorf("%d python stub processes, want 4 (instance_group count 4)", n)
	}
	modelPT := filepath.Join(repo, "simple_linear", "1", "model.pt")
	var all [][]float32
	for c := 0; c < 32; c++ {
		all = append(all, rowsFor(c, 1)...)
	}
	want := torchForward(t, modelPT, all)
	var wg sync.WaitGroup
	errs := make(chan error, 32*20)
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				got, err := inferJSON(base, rowsFor(c, 1))
				if err != nil {
					errs <- err
					return
				}
				if !closeTo(got, want[c:c+1], torchtest.Tolerance) {
					errs <- fmt.Errorf("client %d got %v, want %v", c, got, want[c])
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	infer, exec := metric(t, metricsURL, "nv_inference_count"), metric(t, metricsURL, "nv_inference_exec_count")
	t.Logf("nv_inference_count %v, nv_inference_exec_count %v", infer, exec)
	if infer != 640 || exec >= infer*3/4 {
		t.Errorf("dynamic batching did not batch: %v inferences in %v executions", infer, exec)
	}
}

func countStubs(*testing.T) int { return len(stubsOf(os.Getpid())) }

func metric(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*model="simple_linear"[^}]*\} ([0-9.e+]+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("%s not in metrics:\n%.2000s", name, body)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
