package httpapi

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/metrics"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

const batchedModel = `
backend: "fake"
max_batch_size: 32
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
dynamic_batching { preferred_batch_size: [8, 16] max_queue_delay_microseconds: 5000 }
instance_group [{ kind: KIND_CPU count: 1 }]
parameters { key: "fake_delay_us" value { string_value: "3000" } }
`

type env struct {
	srv     *httptest.Server
	metrics *httptest.Server
	mgr     *repository.Manager
	be      *fake.Backend
}

// newEnv serves a repository with the fake backend over real listeners.
func newEnv(t testing.TB, models map[string]string, maxInput int64) *env {
	t.Helper()
	repo := frontendtest.NewRepo(t, models)
	e := &env{mgr: repo.Manager, be: repo.Backend}
	e.srv = httptest.NewServer(New(Options{Manager: repo.Manager, ID: "test-id", Version: "9.9", MaxInputSize: maxInput}))
	e.metrics = httptest.NewServer(metrics.Handler(metrics.NewRegistry(repo.Manager)))
	t.Cleanup(func() {
		e.srv.Close()
		e.metrics.Close()
	})
	return e
}

func (e *env) do(t *testing.T, method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func inputRows(rows int, base float32) []float32 {
	x := make([]float32, rows*4)
	for i := range x {
		x[i] = base + float32(i)*0.25
	}
	return x
}

type inferResponse struct {
	ID           string `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name       string          `json:"name"`
		Datatype   string          `json:"datatype"`
		Shape      []int64         `json:"shape"`
		Data       json.RawMessage `json:"data"`
		Parameters struct {
			BinaryDataSize *int `json:"binary_data_size"`
		} `json:"parameters"`
	} `json:"outputs"`
}

// TestReadiness answers the table the gRPC frontend answers too.
func TestReadiness(t *testing.T) {
	code := map[bool]int{true: 200, false: 400}
	for _, c := range frontendtest.Readiness() {
		t.Run(c.Name, func(t *testing.T) {
			repo, hs := c.Setup(t)
			srv := httptest.NewServer(New(Options{Manager: repo.Manager, Health: hs}))
			defer srv.Close()
			for path, want := range map[string]int{"/v2/health/live": code[c.Live], "/v2/health/ready": code[c.Ready]} {
				resp, err := srv.Client().Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
}

func TestHealthAndServerMetadata(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
		if r, _ := e.do(t, "GET", p, nil, nil); r.StatusCode != 200 {
			t.Errorf("%s: %d", p, r.StatusCode)
		}
	}
	r, b := e.do(t, "GET", "/v2", nil, nil)
	var md serverMetadata
	if err := json.Unmarshal(b, &md); err != nil || r.StatusCode != 200 || md.Name != "test-id" || md.Version != "9.9" {
		t.Fatalf("server metadata %d %s %v", r.StatusCode, b, err)
	}
	if !strings.Contains(string(b), "binary_tensor_data") {
		t.Errorf("extensions: %s", b)
	}
	// A model that failed to load makes a strict server unready.
	e2 := newEnv(t, map[string]string{"linear": frontendtest.Linear, "bad": frontendtest.Linear + "optimization { graph { level: 1 } }"}, 0)
	if r, _ := e2.do(t, "GET", "/v2/health/ready", nil, nil); r.StatusCode != 400 {
		t.Errorf("ready with a failed model: %d", r.StatusCode)
	}
	if r, _ := e2.do(t, "GET", "/v2/health/live", nil, nil); r.StatusCode != 200 {
		t.Errorf("live: %d", r.StatusCode)
	}
}

func TestModelMetadataReadyConfig(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	r, b := e.do(t, "GET", "/v2/models/linear", nil, nil)
	var md modelMetadata
	if err := json.Unmarshal(b, &md); err != nil || r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
	if md.Name != "linear" || strings.Join(md.Versions, ",") != "1,2" || md.Platform != "fake" ||
		md.Inputs[0].Name != "INPUT__0" || md.Inputs[0].Datatype != "FP32" || fmt.Sprint(md.Inputs[0].Shape) != "[-1 4]" ||
		fmt.Sprint(md.Outputs[0].Shape) != "[-1 3]" {
		t.Errorf("metadata: %s", b)
	}
	_, b = e.do(t, "GET", "/v2/models/linear/versions/1", nil, nil)
	if err := json.Unmarshal(b, &md); err != nil || strings.Join(md.Versions, ",") != "1" {
		t.Errorf("version metadata: %s", b)
	}
	for path, want := range map[string]int{
		"/v2/models/linear/ready": 200, "/v2/models/linear/versions/2/ready": 200,
		"/v2/models/linear/versions/3/ready": 400, "/v2/models/nope/ready": 400,
		"/v2/models/nope": 404, "/v2/models/linear/versions/3": 404, "/v2/models/linear/versions/x": 400,
	} {
		if r, b := e.do(t, "GET", path, nil, nil); r.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", path, r.StatusCode, b, want)
		}
	}
	r, b = e.do(t, "GET", "/v2/models/linear/config", nil, nil)
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil || r.StatusCode != 200 {
		t.Fatalf("config: %d %s", r.StatusCode, b)
	}
	if cfg["name"] != "linear" || cfg["max_batch_size"].(float64) != 8 || cfg["backend"] != "fake" {
		t.Errorf("config: %s", b)
	}
	in := cfg["input"].([]any)[0].(map[string]any)
	if in["data_type"] != "TYPE_FP32" || fmt.Sprint(in["dims"]) != "[4]" {
		t.Errorf("config input: %v", in)
	}
	// Triton's defaults are filled in: one CPU instance group named
	// <model>_0 with count 1.
	ig := cfg["instance_group"].([]any)[0].(map[string]any)
	if ig["name"] != "linear" || ig["kind"] != "KIND_CPU" || ig["count"].(float64) != 1 {
		t.Errorf("config instance_group: %v", ig)
	}
}

func TestInferJSONFlatAndNested(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	x := inputRows(2, 1)
	want := fake.Linear(x, 4, 3)
	flat, _ := json.Marshal(x)
	nested, _ := json.Marshal([][]float32{x[:4], x[4:]})
	for name, data := range map[string][]byte{"flat": flat, "nested": nested} {
		body := fmt.Sprintf(`{"id":"req-%s","inputs":[{"name":"INPUT__0","shape":[2,4],"datatype":"FP32","data":%s}]}`, name, data)
		r, b := e.do(t, "POST", "/v2/models/linear/versions/2/infer", []byte(body), nil)
		if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", name, r.StatusCode, b)
		}
		var resp inferResponse
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.ID != "req-"+name || resp.ModelName != "linear" || resp.ModelVersion != "2" {
			t.Errorf("%s: header fields %+v", name, resp)
		}
		var got []float32
		if err := json.Unmarshal(resp.Outputs[0].Data, &got); err != nil {
			t.Fatal(err)
		}
		if resp.Outputs[0].Name != "OUTPUT__0" || resp.Outputs[0].Datatype != "FP32" || fmt.Sprint(resp.Outputs[0].Shape) != "[2 3]" {
			t.Errorf("%s: output %+v", name, resp.Outputs[0])
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: got %v want %v", name, got, want)
			}
		}
	}
}

// binaryBody builds a binary-extension request body.
func binaryBody(header string, parts ...[]byte) ([]byte, map[string]string) {
	body := []byte(header)
	for _, p := range parts {
		body = append(body, p...)
	}
	return body, map[string]string{HeaderLength: strconv.Itoa(len(header)), "Content-Type": "application/octet-stream"}
}

func TestInferBinaryInAndOut(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	x := inputRows(3, -2)
	want := frontendtest.F32Bytes(fake.Linear(x, 4, 3))
	for _, c := range []struct {
		name, params, outputs string
		binaryOut             bool
	}{
		{"all-binary", `"parameters":{"binary_data_output":true},`, ``, true},
		{"per-output-binary", ``, `,"outputs":[{"name":"OUTPUT__0","parameters":{"binary_data":true}}]`, true},
		{"binary-in-json-out", ``, `,"outputs":[{"name":"OUTPUT__0"}]`, false},
	} {
		hdr := fmt.Sprintf(`{%s"inputs":[{"name":"INPUT__0","shape":[3,4],"datatype":"FP32","parameters":{"binary_data_size":48}}]%s}`, c.params, c.outputs)
		body, h := binaryBody(hdr, frontendtest.F32Bytes(x))
		r, b := e.do(t, "POST", "/v2/models/linear/infer", body, h)
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, r.StatusCode, b)
		}
		if !c.binaryOut {
			var resp inferResponse
			if err := json.Unmarshal(b, &resp); err != nil {
				t.Fatal(err)
			}
			var got []float32
			_ = json.Unmarshal(resp.Outputs[0].Data, &got)
			if !bytes.Equal(frontendtest.F32Bytes(got), want) {
				t.Errorf("%s: got %v", c.name, got)
			}
			continue
		}
		hl, err := strconv.Atoi(r.Header.Get(HeaderLength))
		if err != nil || hl > len(b) {
			t.Fatalf("%s: bad %s %q", c.name, HeaderLength, r.Header.Get(HeaderLength))
		}
		var resp inferResponse
		if err := json.Unmarshal(b[:hl], &resp); err != nil {
			t.Fatalf("%s: %v in %q", c.name, err, b[:hl])
		}
		if sz := resp.Outputs[0].Parameters.BinaryDataSize; sz == nil || *sz != len(want) || resp.Outputs[0].Data != nil {
			t.Errorf("%s: output header %+v", c.name, resp.Outputs[0])
		}
		if !bytes.Equal(b[hl:], want) {
			t.Errorf("%s: binary output differs", c.name)
		}
	}
}

func bytesElems(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

func TestInferOtherDatatypes(t *testing.T) {
	e := newEnv(t, map[string]string{"ident": frontendtest.Ident}, 0)
	body := `{"inputs":[
	  {"name":"S","shape":[3],"datatype":"BYTES","data":["hello","quote\"and\u00e9",""]},
	  {"name":"I","shape":[2,2],"datatype":"INT32","data":[[1,-2],[2147483647,-2147483648]]},
	  {"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}]}`
	r, b := e.do(t, "POST", "/v2/models/ident/infer", []byte(body), nil)
	if r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
	var resp inferResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range resp.Outputs {
		got[o.Name] = string(o.Data)
	}
	want := map[string]string{
		"S_OUT": `["hello","quote\"andé",""]`,
		"I_OUT": `[1,-2,2147483647,-2147483648]`,
		"B_OUT": `[true,false]`,
	}
	if len(got) != 3 {
		t.Errorf("outputs: %s (the optional input was absent, so D_OUT is too)", b)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %s, want %s", k, got[k], v)
		}
	}

	// BYTES through the binary extension, both directions, next to a JSON input.
	s := bytesElems("a", "", "xyz\x00")
	hdr := fmt.Sprintf(`{"inputs":[{"name":"S","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":%d}},
	  {"name":"I","shape":[2,2],"datatype":"INT32","data":[1,2,3,4]},{"name":"B","shape":[2],"datatype":"BOOL","data":[false,true]},
	  {"name":"D","shape":[1],"datatype":"FP64","parameters":{"binary_data_size":8}}],
	  "outputs":[{"name":"S_OUT","parameters":{"binary_data":true}},{"name":"D_OUT"}]}`, len(s))
	d := binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1))
	bb, h := binaryBody(hdr, s, d)
	r, b = e.do(t, "POST", "/v2/models/ident/infer", bb, h)
	if r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
	hl, _ := strconv.Atoi(r.Header.Get(HeaderLength))
	if err := json.Unmarshal(b[:hl], &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 2 || resp.Outputs[0].Name != "S_OUT" || string(resp.Outputs[1].Data) != "[0.1]" {
		t.Errorf("requested outputs in order: %s", b[:hl])
	}
	if !bytes.Equal(b[hl:], s) {
		t.Errorf("BYTES binary output %q, want %q", b[hl:], s)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident}, 4096)
	good := frontendtest.F32Bytes(inputRows(1, 0))
	bin := func(hdr string, parts ...[]byte) ([]byte, map[string]string) { return binaryBody(hdr, parts...) }
	type tc struct {
		name   string
		path   string
		body   []byte
		hdr    map[string]string
		status int
		msg    string
	}
	j := func(s string) []byte { return []byte(s) }
	cases := []tc{
		{"unknown model", "/v2/models/nope/infer", j(`{"inputs":[]}`), nil, 404, "unknown model: 'nope'"},
		{"unknown version", "/v2/models/linear/versions/7/infer", j(`{"inputs":[]}`), nil, 404, "version 7 is not found"},
		{"bad version", "/v2/models/linear/versions/-1/infer", j(`{}`), nil, 400, "invalid model version"},
		{"malformed JSON", "/v2/models/linear/infer", j(`{"inputs":[{"name":`), nil, 400, "failed to parse the request JSON"},
		{"wrong dtype", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}`), nil, 400,
			"[request id: <id_unknown>] inference input 'INPUT__0' data-type is 'INT32', but model 'linear' expects 'FP32'"},
		{"invalid dtype", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP33","data":[1,2,3,4]}]}`), nil, 400, "invalid datatype 'FP33'"},
		{"wrong shape", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,5],"datatype":"FP32","data":[1,2,3,4,5]}]}`), nil, 400,
			"unexpected shape for input 'INPUT__0' for model 'linear'. Expected [-1,4], got [1,5]"},
		{"batch too big", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[9,4],"datatype":"FP32","data":[` + strings.Repeat("1,", 35) + `1]}]}`), nil, 400,
			"batch-size must be <= 8"},
		{"missing input", "/v2/models/linear/infer", j(`{"inputs":[]}`), nil, 400, "expected 1 inputs but got 0 inputs for model 'linear'"},
		{"missing required among optional", "/v2/models/ident/infer", j(`{"inputs":[{"name":"B","shape":[2],"datatype":"BOOL","data":[true,true]}]}`), nil, 400,
			"Got input(s) ['B'], but missing required input(s) ['S','I']. Please provide all required input(s)."},
		{"extra input", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},{"name":"EXTRA","shape":[1],"datatype":"FP32","data":[1]}]}`), nil, 400,
			"expected 1 inputs but got 2 inputs for model 'linear'. Got input(s) ['INPUT__0','EXTRA'], but missing required input(s) ]. Please provide all required input(s)."},
		{"unknown input", "/v2/models/linear/infer", j(`{"inputs":[{"name":"EXTRA","shape":[1],"datatype":"FP32","data":[1]}]}`), nil, 400,
			"unexpected inference input 'EXTRA' for model 'linear'"},
		{"duplicate input", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`), nil, 400,
			"input 'INPUT__0' already exists in request"},
		{"duplicate output", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"OUTPUT__0"},{"name":"OUTPUT__0"}]}`), nil, 400,
			"Duplicate output name 'OUTPUT__0' is not allowed in a request"},
		{"too few elements", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3]}]}`), nil, 500, "Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"not a number", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,"x",4]}]}`), nil, 500, "Unable to parse 'data': attempt to access JSON non-number as double"},
		{"no data", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32"}]}`), nil, 400, "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set"},
		{"unknown output", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"NOPE"}]}`), nil, 400,
			"unexpected inference output 'NOPE'"},
		{"classification", "/v2/models/linear/infer", j(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"OUTPUT__0","parameters":{"classification":-1}}]}`), nil, 400,
			"classification count must not be negative"},
	}
	b1, h1 := bin(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, good[:10])
	cases = append(cases, tc{"truncated binary", "/v2/models/linear/infer", b1, h1, 400, "unexpected end of binary data for input 'INPUT__0'"})
	b2, h2 := bin(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":12}}]}`, good[:12])
	cases = append(cases, tc{"size mismatch", "/v2/models/linear/infer", b2, h2, 400, "input byte size mismatch for input 'INPUT__0' for model 'linear'. Expected 16, got 12"})
	b3, h3 := bin(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, good, []byte{1, 2})
	cases = append(cases, tc{"trailing binary", "/v2/models/linear/infer", b3, h3, 400, "2 bytes of binary data follow"})
	b4, _ := bin(`{"inputs":[]}`)
	cases = append(cases, tc{"header length too big", "/v2/models/linear/infer", b4, map[string]string{HeaderLength: "999"}, 400, "has only"})
	cases = append(cases, tc{"header length junk", "/v2/models/linear/infer", b4, map[string]string{HeaderLength: "x"}, 400, "invalid Inference-Header-Content-Length"})
	b5, h5 := bin(`{"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":6}},{"name":"I","shape":[2,2],"datatype":"INT32","data":[1,2,3,4]},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,true]}]}`, []byte{5, 0, 0, 0, 'a', 'b'})
	cases = append(cases, tc{"bad BYTES element", "/v2/models/ident/infer", b5, h5, 400, "incomplete string for inference input 'S'"})
	cases = append(cases, tc{"oversized body", "/v2/models/linear/infer", make([]byte, 5000), nil, 413, "exceeds the maximum allowed value of 4096 bytes"})
	cases = append(cases, tc{"no such endpoint", "/v2/nothing", nil, nil, 404, "no such endpoint"})

	for _, c := range cases {
		r, b := e.do(t, "POST", c.path, c.body, c.hdr)
		var er struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(b, &er); err != nil {
			t.Errorf("%s: error body is not JSON: %q", c.name, b)
			continue
		}
		if r.StatusCode != c.status || !strings.Contains(er.Error, c.msg) {
			t.Errorf("%s: %d %q, want %d containing %q", c.name, r.StatusCode, er.Error, c.status, c.msg)
		}
	}
	// An oversized chunked body (no Content-Length) is refused while reading.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v2/models/linear/infer", io.MultiReader(bytes.NewReader(make([]byte, 5000))))
	req.ContentLength = -1
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked oversized body: %d", resp.StatusCode)
	}
	// The server keeps serving after all of that.
	body := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	if r, b := e.do(t, "POST", "/v2/models/linear/infer", []byte(body), nil); r.StatusCode != 200 {
		t.Fatalf("after bad requests: %d %s", r.StatusCode, b)
	}
	// Validation failures count as failed requests of the model.
	_, b := e.do(t, "GET", "/v2/models/linear/versions/2/stats", nil, nil)
	var st struct {
		ModelStats []modelStatsJSON `json:"model_stats"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.ModelStats[0].InferenceStats.Fail.Count == 0 || st.ModelStats[0].InferenceStats.Success.Count != 1 {
		t.Errorf("stats after bad requests: %s", b)
	}
}

func TestStatsAndRepositoryIndex(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident, "broken": frontendtest.Linear + "metric_tags { key: \"a\" value: \"b\" }"}, 0)
	body := `{"inputs":[{"name":"INPUT__0","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}`
	for i := 0; i < 3; i++ {
		if r, b := e.do(t, "POST", "/v2/models/linear/versions/1/infer", []byte(body), nil); r.StatusCode != 200 {
			t.Fatalf("%d %s", r.StatusCode, b)
		}
	}
	var st struct {
		ModelStats []modelStatsJSON `json:"model_stats"`
	}
	_, b := e.do(t, "GET", "/v2/models/linear/versions/1/stats", nil, nil)
	if err := json.Unmarshal(b, &st); err != nil || len(st.ModelStats) != 1 {
		t.Fatalf("%s %v", b, err)
	}
	ms := st.ModelStats[0]
	if ms.Name != "linear" || ms.Version != "1" || ms.InferenceCount != 6 || ms.ExecutionCount != 3 || ms.LastInference == 0 ||
		ms.InferenceStats.Success.Count != 3 || ms.InferenceStats.Success.Ns == 0 || len(ms.BatchStats) != 1 || ms.BatchStats[0].BatchSize != 2 {
		t.Errorf("stats: %s", b)
	}
	for _, k := range []string{`"compute_infer":{"count":3`, `"cache_hit"`, `"queue"`, `"memory_usage":[]`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("stats JSON lacks %s: %s", k, b)
		}
	}
	_, b = e.do(t, "GET", "/v2/models/linear/stats", nil, nil)
	if err := json.Unmarshal(b, &st); err != nil || len(st.ModelStats) != 2 {
		t.Errorf("model stats for all versions: %s", b)
	}
	_, b = e.do(t, "GET", "/v2/models/stats", nil, nil)
	if err := json.Unmarshal(b, &st); err != nil || len(st.ModelStats) != 3 {
		t.Errorf("all stats: %s", b)
	}
	if r, _ := e.do(t, "GET", "/v2/models/broken/stats", nil, nil); r.StatusCode != 404 {
		t.Errorf("stats of a model with no ready version: %d", r.StatusCode)
	}

	r, b := e.do(t, "POST", "/v2/repository/index", nil, nil)
	var idx []repository.IndexEntry
	if err := json.Unmarshal(b, &idx); err != nil || r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
	got := map[string]repository.IndexEntry{}
	for _, x := range idx {
		got[x.Name+"/"+x.Version] = x
	}
	if got["linear/1"].State != "READY" || got["linear/2"].State != "READY" || got["ident/2"].State != "READY" {
		t.Errorf("index: %s", b)
	}
	if br := got["broken/"]; br.State != "UNAVAILABLE" || !strings.Contains(br.Reason, "unsupported: metric_tags") {
		t.Errorf("broken model in index: %s", b)
	}
	_, b = e.do(t, "POST", "/v2/repository/index", []byte(`{"ready":true}`), nil)
	if err := json.Unmarshal(b, &idx); err != nil || len(idx) != 3 {
		t.Errorf("ready index: %s", b)
	}
	if r, _ := e.do(t, "POST", "/v2/repository/index", []byte(`{"ready":`), nil); r.StatusCode != 400 {
		t.Errorf("malformed index request: %d", r.StatusCode)
	}
}

// scrape returns the value of a metric line with the given labels.
func scrape(t *testing.T, url, name, model string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	prefix := name + `{model="` + model + `",version="1"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s for %s not found", name, model)
	return 0
}

func TestDynamicBatchingUnderConcurrentClients(t *testing.T) {
	models := map[string]string{"batched": strings.Replace(batchedModel, "\nmax_batch_size", "\nversion_policy { specific { versions: [1] } }\nmax_batch_size", 1)}
	e := newEnv(t, models, 0)
	const clients, perClient = 32, 8
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for k := 0; k < perClient; k++ {
				rows := 1 + (c+k)%2
				x := inputRows(rows, float32(c*100+k))
				hdr := fmt.Sprintf(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[%d,4],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, rows, 16*rows)
				body, h := binaryBody(hdr, frontendtest.F32Bytes(x))
				req, _ := http.NewRequest("POST", e.srv.URL+"/v2/models/batched/infer", bytes.NewReader(body))
				for k, v := range h {
					req.Header.Set(k, v)
				}
				resp, err := e.srv.Client().Do(req)
				if err != nil {
					errs <- err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				hl, _ := strconv.Atoi(resp.Header.Get(HeaderLength))
				if resp.StatusCode != 200 || hl > len(b) || !bytes.Equal(b[hl:], frontendtest.F32Bytes(fake.Linear(x, 4, 3))) {
					errs <- fmt.Sprintf("client %d request %d: status %d, rows not its own", c, k, resp.StatusCode)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	url := e.metrics.URL + "/metrics"
	count := scrape(t, url, "nv_inference_count", "batched")
	execs := scrape(t, url, "nv_inference_exec_count", "batched")
	success := scrape(t, url, "nv_inference_request_success", "batched")
	wantRows := 0
	for c := 0; c < clients; c++ {
		for k := 0; k < perClient; k++ {
			wantRows += 1 + (c+k)%2
		}
	}
	if count != float64(wantRows) || success != clients*perClient {
		t.Errorf("nv_inference_count %v (want %d), success %v", count, wantRows, success)
	}
	if execs > count/4 {
		t.Errorf("dynamic batching did not batch: %v executions for %v inferences", execs, count)
	}
	t.Logf("%v inferences in %v executions", count, execs)
	for _, name := range []string{"nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"} {
		if scrape(t, url, name, "batched") <= 0 {
			t.Errorf("%s is zero", name)
		}
	}
	if scrape(t, url, "nv_inference_pending_request_count", "batched") != 0 {
		t.Errorf("pending requests after all answered")
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes", "nv_inference_request_failure", "nv_inference_compute_input_duration_us", "nv_inference_compute_output_duration_us"} {
		if !strings.Contains(string(b), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}
