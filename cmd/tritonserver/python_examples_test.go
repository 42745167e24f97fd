package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// The models under testdata/pyexamples are ours: each uses the python
// backend API the way one of python_backend's examples does (add_sub,
// pytorch, auto_complete, bls, decoupled, custom_metrics), and the clients
// below do what that example's client.py does, over HTTP and over gRPC.

// exampleServer serves a copy of testdata/pyexamples/<models...> with the
// real backends and waits until every named model is ready.
type exampleServer struct {
	http, grpc, metrics string
	logs                *syncBuffer
	conn                *grpc.ClientConn
}

func startExamples(t *testing.T, models []string, args ...string) *exampleServer {
	t.Helper()
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	repo := filepath.Join(t.TempDir(), "models")
	for _, m := range models {
		src := filepath.Join("testdata", "pyexamples", m)
		if out, err := exec.Command("mkdir", "-p", repo).CombinedOutput(); err != nil {
			t.Fatalf("mkdir: %v %s", err, out)
		}
		if out, err := exec.Command("cp", "-r", src, repo).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", m, err, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	common := []string{"--model-repository", repo, "--http-address=127.0.0.1", "--http-port=0",
		"--metrics-address=127.0.0.1", "--metrics-port=0", "--grpc-address=127.0.0.1", "--grpc-port=0",
		"--backend-config=python,env-cache-dir=" + t.TempDir()}
	go func() { done <- run(ctx, append(common, args...), io.Discard, logs) }()
	s := &exampleServer{logs: logs}
	t.Cleanup(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("server exit %d:\n%s", code, logs.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("server did not shut down")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	addrs := map[string]string{}
	for deadline := time.Now().Add(120 * time.Second); len(addrs) < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("server did not start:\n%s", logs.String())
		}
		select {
		case code := <-done:
			t.Fatalf("server exited %d:\n%s", code, logs.String())
		default:
		}
		for _, m := range startedRE.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
	}
	s.http, s.grpc, s.metrics = "http://"+addrs["HTTPService"], addrs["GRPCInferenceService"], "http://"+addrs["Metrics Service"]
	for _, m := range models {
		for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if resp, err := http.Get(s.http + "/v2/models/" + m + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("model %s never ready:\n%s", m, logs.String())
			}
		}
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	return s
}

func (s *exampleServer) client() inference.GRPCInferenceServiceClient {
	return inference.NewGRPCInferenceServiceClient(s.conn)
}

// jsonTensor is a tensor of the HTTP/JSON protocol.
type jsonTensor struct {
	Name       string         `json:"name"`
	Datatype   string         `json:"datatype,omitempty"`
	Shape      []int64        `json:"shape,omitempty"`
	Data       any            `json:"data,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

type jsonResponse struct {
	ModelName  string         `json:"model_name"`
	ID         string         `json:"id"`
	Parameters map[string]any `json:"parameters"`
	Outputs    []struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int64   `json:"shape"`
		Data     []float64 `json:"data"`
	} `json:"outputs"`
	Error string `json:"error"`
}

// inferHTTP posts a JSON inference request and returns the status and
// the decoded answer.
func (s *exampleServer) inferHTTP(t *testing.T, model string, body map[string]any) (int, *jsonResponse) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(s.http+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out jsonResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %d %s: %v", model, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, &out
}

func (r *jsonResponse) output(t *testing.T, name string) []float64 {
	t.Helper()
	for _, o := range r.Outputs {
		if o.Name == name {
			return o.Data
		}
	}
	t.Fatalf("no output %s in %+v", name, r)
	return nil
}

func fp32Raw(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func fp32From(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

func rawOutput(t *testing.T, resp *inference.ModelInferResponse, name string) []byte {
	t.Helper()
	for i, o := range resp.Outputs {
		if o.Name == name {
			return resp.RawOutputContents[i]
		}
	}
	t.Fatalf("no output %s in %v", name, resp)
	return nil
}

func near(got []float64, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if math.Abs(got[i]-float64(want[i])) > 1e-5 {
			return false
		}
	}
	return true
}

// checkSumDiff does what add_sub's client.py does: two random FP32 [4]
// inputs, both outputs requested, sum and difference checked, over HTTP
// and gRPC.
func checkSumDiff(t *testing.T, s *exampleServer, model string, extra ...jsonTensor) {
	t.Helper()
	checkSumDiffShape(t, s, model, []int64{4}, extra...)
}

// checkSumDiffShape is checkSumDiff with inputs of shape (4 elements in all).
func checkSumDiffShape(t *testing.T, s *exampleServer, model string, shape []int64, extra ...jsonTensor) {
	t.Helper()
	a := []float32{0.25, -1.5, 3, 0.125}
	b := []float32{1, 2.5, -0.75, 0.5}
	sum, diff := make([]float32, 4), make([]float32, 4)
	for i := range a {
		sum[i], diff[i] = a[i]+b[i], a[i]-b[i]
	}
	inputs := []jsonTensor{{Name: "A", Datatype: "FP32", Shape: shape, Data: a}, {Name: "B", Datatype: "FP32", Shape: shape, Data: b}}
	code, out := s.inferHTTP(t, model, map[string]any{"id": "1", "inputs": append(inputs, extra...),
		"outputs": []map[string]string{{"name": "SUM"}, {"name": "DIFF"}}})
	if code != 200 || out.ID != "1" {
		t.Fatalf("%s over HTTP: %d %+v", model, code, out)
	}
	if !near(out.output(t, "SUM"), sum) || !near(out.output(t, "DIFF"), diff) {
		t.Errorf("%s over HTTP: %+v, want %v and %v", model, out.Outputs, sum, diff)
	}

	req := &inference.ModelInferRequest{ModelName: model, Id: "1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "FP32", Shape: shape}, {Name: "B", Datatype: "FP32", Shape: shape}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "SUM"}, {Name: "DIFF"}},
		RawInputContents: [][]byte{fp32Raw(a), fp32Raw(b)}}
	for _, e := range extra {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: e.Name, Datatype: e.Datatype, Shape: e.Shape})
		req.RawInputContents = append(req.RawInputContents, bytesElements(e.Data.([]string)...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.client().ModelInfer(ctx, req)
	if err != nil {
		t.Fatalf("%s over gRPC: %v", model, err)
	}
	if g := fp32From(rawOutput(t, resp, "SUM")); !near(g, sum) {
		t.Errorf("%s over gRPC: SUM %v, want %v", model, g, sum)
	}
	if g := fp32From(rawOutput(t, resp, "DIFF")); !near(g, diff) {
		t.Errorf("%s over gRPC: DIFF %v, want %v", model, g, diff)
	}
}

// bytesElements encodes BYTES elements for raw_input_contents.
func bytesElements(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// TestPythonExampleAddSub: the config helpers add_sub's initialize calls
// (get_output_config_by_name, triton_string_to_numpy, ...) exist and the
// model answers over both protocols.
func TestPythonExampleAddSub(t *testing.T) {
	s := startExamples(t, []string{"sum_diff"})
	checkSumDiff(t, s, "sum_diff")
}

// TestPythonExamplePyTorch: a torch module called from execute, as
// python_backend's pytorch example does.
func TestPythonExamplePyTorch(t *testing.T) {
	testenv.NeedPython(t, "/usr/bin/python3", "torch", "numpy")
	s := startExamples(t, []string{"torch_sum_diff"})
	checkSumDiff(t, s, "torch_sum_diff")
}

// TestPythonExampleAutoComplete: what auto_complete's client.py checks —
// the configuration the server reports is the one auto_complete_config
// built (max_batch_size, inputs, outputs), for a model without
// config.pbtxt and one whose config names only the backend — and that
// both answer.
func TestPythonExampleAutoComplete(t *testing.T) {
	s := startExamples(t, []string{"auto_nobatch", "auto_batch"})
	for _, c := range []struct {
		model    string
		maxBatch int
		shape    []int64
	}{{"auto_nobatch", 0, []int64{4}}, {"auto_batch", 4, []int64{1, 4}}} {
		resp, err := http.Get(s.http + "/v2/models/" + c.model + "/config")
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			MaxBatchSize    int            `json:"max_batch_size"`
			DynamicBatching map[string]any `json:"dynamic_batching"`
			Input, Output   []struct {
				Name     string  `json:"name"`
				DataType string  `json:"data_type"`
				Dims     []int64 `json:"dims"`
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&cfg)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MaxBatchSize != c.maxBatch || len(cfg.Input) != 2 || len(cfg.Output) != 2 ||
			cfg.Input[1].Name != "B" || cfg.Input[1].DataType != "TYPE_FP32" || len(cfg.Input[1].Dims) != 1 || cfg.Input[1].Dims[0] != 4 ||
			cfg.Output[0].Name != "SUM" || (c.maxBatch > 0) != (cfg.DynamicBatching != nil) {
			t.Errorf("%s: config over HTTP %+v", c.model, cfg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		g, err := s.client().ModelConfig(ctx, &inference.ModelConfigRequest{Name: c.model})
		cancel()
		if err != nil || g.Config.MaxBatchSize != int32(c.maxBatch) || len(g.Config.Input) != 2 || g.Config.Output[1].Name != "DIFF" {
			t.Errorf("%s: config over gRPC %v %v", c.model, g, err)
		}
		checkSumDiffShape(t, s, c.model, c.shape)
	}
}
