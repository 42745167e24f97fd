package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// The models under testdata/pyexamples are ours: each uses the python
// backend API the way one of python_backend's examples does (add_sub,
// pytorch, auto_complete, bls, decoupled, custom_metrics), and the clients
// below do what that example's client.py does, over HTTP and over gRPC.

// exampleServer serves a copy of testdata/pyexamples/<models...> with the
// real backends and waits until every named model is ready (in explicit
// model control mode, every model a --load-model names).
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
	addrs := waitStarted(t, logs, 3, done)
	s.http, s.grpc, s.metrics = "http://"+addrs["HTTPService"], addrs["GRPCInferenceService"], "http://"+addrs["Metrics Service"]
	wait := models
	if slices.Contains(args, "--model-control-mode=explicit") {
		wait = nil
		for _, a := range args {
			if m, ok := strings.CutPrefix(a, "--load-model="); ok {
				wait = append(wait, m)
			}
		}
	}
	waitModelsReady(t, s.http, logs, wait...)
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

func near(got []float64, want []float32) bool { return nearWithin(got, want, 1e-5) }

// nearWithin reports whether got is want to within tol in every element.
func nearWithin(got []float64, want []float32, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if math.Abs(got[i]-float64(want[i])) > tol {
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

// TestPythonExampleBLS: what bls's sync and async clients do — the BLS
// model is told which model to call (MODEL_NAME) and answers with that
// model's outputs — plus a call to a model that does not exist, whose
// error reaches the client.
func TestPythonExampleBLS(t *testing.T) {
	testenv.NeedPython(t, "/usr/bin/python3", "torch", "numpy")
	s := startExamples(t, []string{"sum_diff", "torch_sum_diff", "bls_sync", "bls_async"})
	for _, model := range []string{"bls_sync", "bls_async"} {
		for _, target := range []string{"sum_diff", "torch_sum_diff"} {
			checkSumDiff(t, s, model, jsonTensor{Name: "MODEL_NAME", Datatype: "BYTES", Shape: []int64{1}, Data: []string{target}})
		}
	}
	code, out := s.inferHTTP(t, "bls_sync", map[string]any{"inputs": []jsonTensor{
		{Name: "A", Datatype: "FP32", Shape: []int64{4}, Data: []float32{1, 2, 3, 4}},
		{Name: "B", Datatype: "FP32", Shape: []int64{4}, Data: []float32{1, 2, 3, 4}},
		{Name: "MODEL_NAME", Datatype: "BYTES", Shape: []int64{1}, Data: []string{"no_such_model"}}}})
	if code != http.StatusNotFound || !strings.Contains(out.Error, "no_such_model") {
		t.Errorf("BLS to a missing model: %d %+v", code, out)
	}
}

// streamInfer sends one request over ModelStreamInfer and collects the
// responses until the final one (the empty final response is asked for,
// so that zero responses can be told from none yet).
func streamInfer(t *testing.T, s *exampleServer, model string, in int32) []*inference.ModelInferResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := s.client().ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&inference.ModelInferRequest{ModelName: model, Id: "s",
		Parameters:       map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(in))}})
	if err != nil {
		t.Fatal(err)
	}
	var got []*inference.ModelInferResponse
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s stream: %v after %d responses", model, err, len(got))
		}
		if r.ErrorMessage != "" {
			t.Fatalf("%s stream error: %s", model, r.ErrorMessage)
		}
		if p := r.InferResponse.Parameters["triton_final_response"]; p != nil && p.GetBoolParam() {
			if len(r.InferResponse.Outputs) > 0 {
				got = append(got, r.InferResponse)
			}
			return got
		}
		got = append(got, r.InferResponse)
	}
}

// TestPythonExampleDecoupled: what decoupled's square client does — n
// responses for n, from a thread of the model, 0 for 0 — over gRPC
// streaming and HTTP generate_stream; and bls_decoupled's: a model that
// iterates a decoupled model's responses through BLS, and its async
// model: two such calls awaited at once, request after request (the stub
// once dropped a batch that a response thread read, and the next request
// hung), answering int64 for an output declared INT32 as Triton does.
func TestPythonExampleDecoupled(t *testing.T) {
	s := startExamples(t, []string{"square_stream", "bls_stream", "bls_stream_async"})
	for _, n := range []int32{3, 0, 1} {
		got := streamInfer(t, s, "square_stream", n)
		if len(got) != int(n) {
			t.Fatalf("square_stream(%d): %d responses", n, len(got))
		}
		for _, r := range got {
			if v := int32(binary.LittleEndian.Uint32(r.RawOutputContents[0])); v != n || r.Id != "s" {
				t.Errorf("square_stream(%d): response %d id %q", n, v, r.Id)
			}
		}
	}
	resp, err := http.Post(s.http+"/v2/models/square_stream/generate_stream", "application/json", strings.NewReader(`{"IN": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Count(string(body), "data: ") != 4 || !strings.Contains(string(body), `"OUT":4`) {
		t.Errorf("generate_stream: %d %s", resp.StatusCode, body)
	}

	code, out := s.inferHTTP(t, "bls_stream", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1}, Data: []int32{5}}}})
	if code != 200 || out.output(t, "SUM")[0] != 25 || out.output(t, "COUNT")[0] != 5 {
		t.Errorf("bls_stream over HTTP: %d %+v", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := s.client().ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "bls_stream",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, 3)}})
	if err != nil || binary.LittleEndian.Uint32(rawOutput(t, g, "SUM")) != 9 || binary.LittleEndian.Uint32(rawOutput(t, g, "COUNT")) != 3 {
		t.Errorf("bls_stream over gRPC: %v %v", g, err)
	}

	for _, n := range []int32{4, 2, 0, 1} {
		code, out := s.inferHTTP(t, "bls_stream_async", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1}, Data: []int32{n}}}})
		if code != 200 || len(out.Outputs) != 1 || out.Outputs[0].Datatype != "INT64" || out.output(t, "SUM")[0] != float64(2*n*n) {
			t.Fatalf("bls_stream_async(%d) over HTTP: %d %+v, want INT64 SUM %d", n, code, out, 2*n*n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		g, err := s.client().ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "bls_stream_async",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(n))}})
		cancel()
		if err != nil || g.Outputs[0].Datatype != "INT64" || binary.LittleEndian.Uint64(rawOutput(t, g, "SUM")) != uint64(2*n*n) {
			t.Fatalf("bls_stream_async(%d) over gRPC: %v %v", n, g, err)
		}
	}
}

// TestPythonExampleCustomMetrics: what custom_metrics's client checks —
// the model's own metric families appear on /metrics with its labels and
// the values it set — for a counter, a gauge and a histogram.
func TestPythonExampleCustomMetrics(t *testing.T) {
	s := startExamples(t, []string{"metrics_model"})
	for i, x := range [][]float32{{1, 2, 3}, {4, 5}} {
		code, out := s.inferHTTP(t, "metrics_model", map[string]any{"inputs": []jsonTensor{{Name: "X", Datatype: "FP32", Shape: []int64{int64(len(x))}, Data: x}}})
		if want := []float64{3, 5}[i]; code != 200 || out.output(t, "TOTAL")[0] != want {
			t.Fatalf("request %d: %d %+v, want TOTAL %g", i, code, out, want)
		}
	}
	resp, err := http.Get(s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"# HELP example_elements_total Elements received",
		"# TYPE example_elements_total counter",
		`example_elements_total{model="metrics_model",version="1"} 5`,
		`example_last_sum{model="metrics_model",version="1"} 9`,
		`example_request_elements_bucket{model="metrics_model",version="1",le="1"} 0`,
		`example_request_elements_bucket{model="metrics_model",version="1",le="4"} 2`,
		`example_request_elements_count{model="metrics_model",version="1"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestPythonResponseParametersAndErrorCodes: InferenceResponse(parameters=
// ...) reaches clients as the HTTP response's "parameters" object and as
// ModelInferResponse.parameters (bool, int64 and string), the request's
// own parameters included; and each TritonError code a response carries
// reaches the client as Triton maps it (HTTP status, gRPC code) with the
// model's message.
func TestPythonResponseParametersAndErrorCodes(t *testing.T) {
	s := startExamples(t, []string{"status_params"})
	code, out := s.inferHTTP(t, "status_params", map[string]any{
		"parameters": map[string]any{"echo": "hello", "n": 7},
		"inputs":     []jsonTensor{{Name: "CODE", Datatype: "INT32", Shape: []int64{1}, Data: []int32{-1}}}})
	if code != 200 {
		t.Fatalf("HTTP: %d %+v", code, out)
	}
	want := map[string]any{"echo": "hello", "n": 7.0, "answered": true, "count": 3.0, "big": float64(1 << 40), "word": "ok"}
	if len(out.Parameters) != len(want) {
		t.Errorf("HTTP parameters %v, want %v", out.Parameters, want)
	}
	for k, v := range want {
		if out.Parameters[k] != v {
			t.Errorf("HTTP parameter %s = %v (%T), want %v", k, out.Parameters[k], out.Parameters[k], v)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := func(c int32) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "status_params",
			Parameters: map[string]*inference.InferParameter{
				"echo": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "hello"}},
				"n":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 7}}},
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "CODE", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(c))}}
	}
	resp, err := s.client().ModelInfer(ctx, req(-1))
	if err != nil {
		t.Fatalf("gRPC: %v", err)
	}
	ps := resp.GetParameters()
	if ps["echo"].GetStringParam() != "hello" || ps["n"].GetInt64Param() != 7 || !ps["answered"].GetBoolParam() ||
		ps["count"].GetInt64Param() != 3 || ps["big"].GetInt64Param() != 1<<40 || ps["word"].GetStringParam() != "ok" || len(ps) != 6 {
		t.Errorf("gRPC parameters %v", ps)
	}

	// pb_utils.TritonError's codes in order: UNKNOWN, INTERNAL, NOT_FOUND,
	// INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED.
	wantHTTP := []int{400, 500, 404, 400, 503, 501, 400, 400}
	wantGRPC := []codes.Code{codes.Unknown, codes.Internal, codes.NotFound, codes.InvalidArgument,
		codes.Unavailable, codes.Unimplemented, codes.AlreadyExists, codes.Canceled}
	for c := range wantHTTP {
		msg := fmt.Sprintf("asked for code %d", c)
		code, out := s.inferHTTP(t, "status_params", map[string]any{
			"inputs": []jsonTensor{{Name: "CODE", Datatype: "INT32", Shape: []int64{1}, Data: []int32{int32(c)}}}})
		if code != wantHTTP[c] || !strings.Contains(out.Error, msg) {
			t.Errorf("code %d over HTTP: %d %q, want %d with %q", c, code, out.Error, wantHTTP[c], msg)
		}
		_, err := s.client().ModelInfer(ctx, req(int32(c)))
		if st, _ := status.FromError(err); st.Code() != wantGRPC[c] || !strings.Contains(st.Message(), msg) {
			t.Errorf("code %d over gRPC: %v, want %v with %q", c, err, wantGRPC[c], msg)
		}
	}
}

// TestPythonIsCancelledOnClientGiveUp: an HTTP client that disconnects
// and a gRPC client whose deadline passes make request.is_cancelled() true
// in the running execute; a request left alone is not cancelled.
func TestPythonIsCancelledOnClientGiveUp(t *testing.T) {
	s := startExamples(t, []string{"cancel_watch"})
	body, _ := json.Marshal(map[string]any{"id": "h1",
		"inputs": []jsonTensor{{Name: "WAIT", Datatype: "FP32", Shape: []int64{1}, Data: []float32{30}}}})
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := hc.Post(s.http+"/v2/models/cancel_watch/infer", "application/json", bytes.NewReader(body)); err == nil {
		resp.Body.Close()
		t.Fatalf("HTTP request answered %d before the client gave up", resp.StatusCode)
	}
	waitLog := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(s.logs.String(), what); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the model never logged %q", what)
			}
		}
	}
	waitLog("request h1 cancelled=True")

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req := &inference.ModelInferRequest{ModelName: "cancel_watch", Id: "g1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "WAIT", Datatype: "FP32", Shape: []int64{1}}},
		RawInputContents: [][]byte{fp32Raw([]float32{30})}}
	if _, err := s.client().ModelInfer(ctx, req); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("gRPC: %v, want DeadlineExceeded", err)
	}
	waitLog("request g1 cancelled=True")

	body, _ = json.Marshal(map[string]any{"id": "h2",
		"inputs": []jsonTensor{{Name: "WAIT", Datatype: "FP32", Shape: []int64{1}, Data: []float32{0.2}}}})
	resp, err := http.Post(s.http+"/v2/models/cancel_watch/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"data":[false]`) {
		t.Fatalf("uncancelled request: %d %s", resp.StatusCode, raw)
	}
	waitLog("request h2 cancelled=False")
}

// TestPythonModelControl: pb_utils.load_model from execute, in explicit
// model control mode, with a config override (sum_diff, from the
// repository, with two instances) and with model files only (triple, a
// model no repository holds), is_model_ready after each, the loaded
// models answering over HTTP and gRPC, unload_model, and load_model's
// refusal of files without a config reaching the client.
func TestPythonModelControl(t *testing.T) {
	s := startExamples(t, []string{"model_control", "sum_diff"}, "--model-control-mode=explicit", "--load-model=model_control")
	op := func(name string) (int, *jsonResponse) {
		return s.inferHTTP(t, "model_control", map[string]any{"inputs": []jsonTensor{{Name: "OP", Datatype: "BYTES", Shape: []int64{1}, Data: []string{name}}}})
	}
	readyAfter := func(name string, want bool) {
		t.Helper()
		code, out := op(name)
		if code != 200 || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 {
			t.Fatalf("%s: %d %+v", name, code, out)
		}
		if (out.Outputs[0].Data[0] != 0) != want {
			t.Fatalf("%s: is_model_ready %v, want %v", name, out.Outputs[0].Data, want)
		}
	}

	readyAfter("load_config", true)
	resp, err := http.Get(s.http + "/v2/models/sum_diff/config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		InstanceGroup []struct {
			Count int `json:"count"`
		} `json:"instance_group"`
	}
	err = json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	if err != nil || len(cfg.InstanceGroup) != 1 || cfg.InstanceGroup[0].Count != 2 {
		t.Fatalf("sum_diff's config after load_model with an override: %+v %v", cfg, err)
	}
	checkSumDiff(t, s, "sum_diff")

	readyAfter("load_files", true)
	code, out := s.inferHTTP(t, "triple", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{2}, Data: []float32{1, -2.5}}}})
	if code != 200 || !near(out.output(t, "OUT"), []float32{3, -7.5}) {
		t.Fatalf("triple over HTTP: %d %+v", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := s.client().ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "triple",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{2}}},
		RawInputContents: [][]byte{fp32Raw([]float32{2, 4})}})
	if err != nil || !near(fp32From(rawOutput(t, g, "OUT")), []float32{6, 12}) {
		t.Fatalf("triple over gRPC: %v %v", g, err)
	}

	readyAfter("unload", false)
	if resp, err := http.Get(s.http + "/v2/models/triple/ready"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("triple still ready after unload_model: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	code, out = op("files_without_config")
	if code == 200 || !strings.Contains(out.Error, "a config override must be given with override files") {
		t.Fatalf("load_model with files and no config: %d %+v", code, out)
	}
}

// doubleOrCrash is the version 1 of TestLoadFilesPartialStubRestart's
// model: OUT = 2 * IN, and a negative IN kills the stub.
const doubleOrCrash = `import os
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x[0] < 0:
                os._exit(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", 2 * x)]))
        return out
`

// TestLoadFilesPartialStubRestart: a load with files (Triton's file:
// load parameters) where version 2 fails to initialize and version 1
// loads keeps version 1's files, so its stub, killed by a request,
// restarts from them and answers the next request; unloading the model
// removes the files.
func TestLoadFilesPartialStubRestart(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the server writes the files of a load
	s := startExamples(t, []string{"sum_diff"}, "--model-control-mode=explicit")
	cfg, _ := json.Marshal(map[string]any{"backend": "python", "max_batch_size": 0,
		"version_policy": map[string]any{"specific": map[string]any{"versions": []int{1, 2}}},
		"input":          []map[string]any{{"name": "IN", "data_type": "TYPE_FP32", "dims": []int{2}}},
		"output":         []map[string]any{{"name": "OUT", "data_type": "TYPE_FP32", "dims": []int{2}}}})
	body, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": string(cfg),
		"file:1/model.py": base64.StdEncoding.EncodeToString([]byte(doubleOrCrash)),
		"file:2/model.py": base64.StdEncoding.EncodeToString([]byte("class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('version 2 is broken')\n")),
	}})
	if code, out := post(t, s.http+"/v2/repository/models/flaky/load", string(body)); code == 200 || !strings.Contains(out, "version 2 is broken") {
		t.Fatalf("load with a broken version 2: %d %s", code, out)
	}
	filesLeft := func() int {
		m, _ := filepath.Glob(filepath.Join(tmp, "tritonbuild-override-flaky-*"))
		return len(m)
	}
	if n := filesLeft(); n != 1 {
		t.Fatalf("%d override directories after the partial load, want 1", n)
	}
	infer := func(v float32) (int, *jsonResponse) {
		return s.inferHTTP(t, "flaky/versions/1", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{2}, Data: []float32{v, 1}}}})
	}
	if code, out := infer(2); code != 200 || !near(out.output(t, "OUT"), []float32{4, 2}) {
		t.Fatalf("version 1 after the partial load: %d %+v", code, out)
	}
	if code, out := infer(-1); code != 500 || !strings.Contains(out.Error, "exited while running execute") {
		t.Fatalf("the request that kills the stub: %d %+v", code, out)
	}
	if code, out := infer(3); code != 200 || !near(out.output(t, "OUT"), []float32{6, 2}) {
		t.Fatalf("version 1 after its stub restarted: %d %+v", code, out)
	}
	if code, out := post(t, s.http+"/v2/repository/models/flaky/unload", "{}"); code != 200 {
		t.Fatalf("unload: %d %s", code, out)
	}
	if n := filesLeft(); n != 0 {
		t.Fatalf("%d override directories after unloading, want 0", n)
	}
}

// hubPrepare is what the test's machine lacks to let torch.hub work
// offline: a hub repository whose hubconf.py takes torchvision's models
// from the distribution's python3-torchvision, and the IMAGENET1K_V2
// weights file under its URL's name (random weights; torch.hub checks a
// hash only when it downloads). It also writes the torchvision forward of
// the test's input, for comparison.
const hubPrepare = `
import sys, numpy as np, torch, torchvision
home = sys.argv[1]
torch.manual_seed(7)
net = torchvision.models.resnet50().eval()
torch.save(net.state_dict(), home + "/hub/checkpoints/resnet50-11ad3fa6.pth")
x = torch.rand(2, 3, 64, 64)
with torch.no_grad():
    y = net(x)
x.numpy().tofile(home + "/x.f32")
y.numpy().tofile(home + "/y.f32")
`

// TestPythonExampleTorchHub is python_backend's instance_kind example in
// our own model: a ResNet50 that initialize fetches with torch.hub (from a
// hub cache prepared under TORCH_HOME, which the stub inherits) answers a
// batch of two images over HTTP and gRPC with torchvision's own forward.
func TestPythonExampleTorchHub(t *testing.T) {
	testenv.NeedPython(t, "/usr/bin/python3", "numpy", "torch", "torchvision")
	home := t.TempDir()
	for _, d := range []string{"hub/pytorch_vision_v0.14.1", "hub/checkpoints"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hubconf := "dependencies = [\"torch\"]\nfrom torchvision.models import resnet50  # noqa: F401\n"
	if err := os.WriteFile(filepath.Join(home, "hub/pytorch_vision_v0.14.1/hubconf.py"), []byte(hubconf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", hubPrepare, home).CombinedOutput(); err != nil {
		t.Fatalf("preparing the hub cache: %v\n%s", err, out)
	}
	x, err := os.ReadFile(filepath.Join(home, "x.f32"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(home, "y.f32"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(y)/4)
	for i, v := range fp32From(y) {
		want[i] = float32(v)
	}
	t.Setenv("TORCH_HOME", home)
	s := startExamples(t, []string{"hub_resnet"})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shape := []int64{2, 3, 64, 64}
	resp, err := s.client().ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "hub_resnet",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IMAGE", Datatype: "FP32", Shape: shape}},
		RawInputContents: [][]byte{x}})
	if err != nil {
		t.Fatalf("gRPC: %v", err)
	}
	if !nearWithin(fp32From(rawOutput(t, resp, "SCORES")), want, 1e-4) || !slices.Equal(resp.Outputs[0].Shape, []int64{2, 1000}) {
		t.Errorf("gRPC: shape %v, scores differ from torchvision's forward", resp.Outputs[0].Shape)
	}
	code, out := s.inferHTTP(t, "hub_resnet", map[string]any{
		"inputs": []jsonTensor{{Name: "IMAGE", Datatype: "FP32", Shape: shape, Data: fp32From(x)}}})
	if code != 200 || !nearWithin(out.output(t, "SCORES"), want, 1e-4) {
		t.Errorf("HTTP: %d, scores differ from torchvision's forward", code)
	}
}
