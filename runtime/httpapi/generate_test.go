package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// sseEvents splits a generate_stream body into its data events.
func sseEvents(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		out = append(out, ev)
	}
	return out
}

func TestGenerateExtension(t *testing.T) {
	e := newEnv(t, map[string]string{"repeat": frontendtest.Repeat, "echo": frontendtest.Echo}, 0)

	// An ordinary model through generate: members named like inputs are
	// tensors, the rest parameters; every output is a member.
	resp, body := e.do(t, "POST", "/v2/models/echo/generate", []byte(`{"IN": "hello", "parameters": {"temperature": 0.5}, "stream": false}`), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("generate: %d %s", resp.StatusCode, body)
	}
	if got := string(body); got != `{"model_name":"echo","model_version":"2","OUT":"hello"}` {
		t.Errorf("generate answered %s", got)
	}
	resp, body = e.do(t, "POST", "/v2/models/echo/generate_stream", []byte(`{"IN": ["a", "b"]}`), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("generate_stream: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if evs := sseEvents(t, body); len(evs) != 1 || fmt.Sprint(evs[0]["OUT"]) != "[a b]" {
		t.Errorf("generate_stream of an ordinary model: %v", evs)
	}

	// A decoupled model: one event per response, in order.
	resp, body = e.do(t, "POST", "/v2/models/repeat/generate_stream", []byte(`{"IN": [5, 6, 7, 8]}`), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("generate_stream: %d %s", resp.StatusCode, body)
	}
	evs := sseEvents(t, body)
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprint(ev["OUT"]))
		if ev["model_name"] != "repeat" {
			t.Errorf("event without the model name: %v", ev)
		}
	}
	if strings.Join(got, ",") != "5,6,7,8" {
		t.Errorf("decoupled generate_stream events: %v", evs)
	}
	// An error response mid-stream is an error event after the status.
	resp, body = e.do(t, "POST", "/v2/models/repeat/generate_stream", []byte(fmt.Sprintf(`{"IN": [1, %d, 3]}`, fake.FailValue)), nil)
	evs = sseEvents(t, body)
	if resp.StatusCode != 200 || len(evs) != 3 || evs[1]["error"] == nil || fmt.Sprint(evs[2]["OUT"]) != "3" {
		t.Errorf("error mid-stream: %d %v", resp.StatusCode, evs)
	}
	// An error before inference begins is a JSON error with its status
	// (an element of the wrong type: Triton's INTERNAL data error).
	resp, body = e.do(t, "POST", "/v2/models/repeat/generate_stream", []byte(`{"IN": ["x"]}`), nil)
	if resp.StatusCode != 500 || !strings.Contains(string(body), `"error"`) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("bad input to generate_stream: %d %s", resp.StatusCode, body)
	}
	// generate carries one response (TestGenerateResponseCount for the
	// other counts).
	resp, body = e.do(t, "POST", "/v2/models/repeat/generate", []byte(`{"IN": [9]}`), nil)
	if resp.StatusCode != 200 || string(body) != `{"model_name":"repeat","model_version":"2","OUT":9}` {
		t.Errorf("generate, one response: %d %s", resp.StatusCode, body)
	}
	// /infer refuses decoupled models with Triton's text and code.
	resp, body = e.do(t, "POST", "/v2/models/repeat/infer", []byte(`{"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[1]}]}`), nil)
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(body), "HTTP end point doesn't support models with decoupled transaction policy") {
		t.Errorf("infer on a decoupled model: %d %s", resp.StatusCode, body)
	}
}

// TestGenerateStreamTraced: a traced generate_stream still streams (the
// trace's writer flushes each event through) and its trace has Triton's
// HTTP and request timestamps.
func TestGenerateStreamTraced(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"repeat": frontendtest.Repeat})
	file := filepath.Join(t.TempDir(), "trace.json")
	tm, err := tracing.New(tracing.Options{Global: tracing.Setting{Level: tracing.LevelTimestamps, Rate: 1, Count: -1, File: file}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Manager: repo.Manager, Tracing: tm}))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v2/models/repeat/generate_stream", "application/json", strings.NewReader(`{"IN": [5, 6, 7, 8]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got []string
	for _, ev := range sseEvents(t, body) {
		got = append(got, fmt.Sprint(ev["OUT"]))
	}
	if resp.StatusCode != 200 || strings.Join(got, ",") != "5,6,7,8" {
		t.Fatalf("traced generate_stream: %d %v", resp.StatusCode, got)
	}
	if err := tm.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var recs []struct {
		ModelName  string `json:"model_name"`
		Timestamps []struct {
			Name string `json:"name"`
		} `json:"timestamps"`
	}
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	var names []string
	for _, r := range recs {
		for _, ts := range r.Timestamps {
			names = append(names, ts.Name)
		}
	}
	if recs[0].ModelName != "repeat" {
		t.Errorf("trace of model %q", recs[0].ModelName)
	}
	for _, want := range []string{"HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "HTTP_SEND_START", "REQUEST_END", "HTTP_SEND_END"} {
		if !slices.Contains(names, want) {
			t.Errorf("trace has no %s: %v", want, names)
		}
	}
	if names[0] != "HTTP_RECV_START" || names[len(names)-1] != "HTTP_SEND_END" {
		t.Errorf("trace timestamps out of order: %v", names)
	}

	// The writer passes Flush on to what it wraps.
	rec := httptest.NewRecorder()
	tw := &traceWriter{ResponseWriter: rec}
	tw.Flush()
	if !rec.Flushed {
		t.Error("traceWriter.Flush did not flush the connection")
	}
}

// pathErrBackend is a decoupled test backend whose every request gets
// one error response naming a server file, then the final flag.
type pathErrBackend struct{ path string }

func (b pathErrBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (b pathErrBackend) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	for _, r := range reqs {
		go func() {
			_ = r.Sender.Send(&backend.Response{Err: backend.Errorf(backend.Internal, "cannot read %s", b.path)}, false)
			_ = r.Sender.Send(nil, true)
		}()
	}
	return nil, nil
}

func (pathErrBackend) Close() error { return nil }

func (pathErrBackend) SupportsDecoupled() bool { return true }

// TestGenerateStreamErrorsNameNoServerPaths: an error event of
// generate_stream carries status.Message's text, absolute server paths
// cut to their last element, as every other error answer does.
func TestGenerateStreamErrorsNameNoServerPaths(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "weights.bin")
	repo := frontendtest.NewRepo(t, map[string]string{"patherr": `backend: "patherr"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
`}, func(o *repository.Options) { o.Backends["patherr"] = pathErrBackend{path: secret} })
	e := serveRepo(t, repo, Options{Manager: repo.Manager})
	resp, body := e.do(t, "POST", "/v2/models/patherr/generate_stream", []byte(`{"IN": [1]}`), nil)
	evs := sseEvents(t, body)
	// The error is the first event, so its code (INTERNAL) is the status.
	if resp.StatusCode != 500 || len(evs) != 1 {
		t.Fatalf("generate_stream: %d %s", resp.StatusCode, body)
	}
	if msg := fmt.Sprint(evs[0]["error"]); strings.Contains(msg, secret) || !strings.Contains(msg, ".../weights.bin") {
		t.Errorf("error event %q names the server path", msg)
	}
}

// halfOutBackend answers every request with one FP16 output OUT, [1.5].
type halfOutBackend struct{}

func (b halfOutBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return b, nil
}

func (halfOutBackend) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	out := make([]*backend.Response, len(reqs))
	for i := range reqs {
		out[i] = &backend.Response{Outputs: []backend.Tensor{{Name: "OUT", DataType: backend.FP16, Shape: []int64{1}, Data: []byte{0x00, 0x3e}}}}
	}
	return out, nil
}

func (halfOutBackend) Close() error { return nil }

// TestGenerateHalfPrecision: generate renders outputs as JSON, so an FP16
// output is refused as Triton refuses it (WriteDataToJson's words, 400):
// generate answers the error, generate_stream sends it as its first
// event under the error's status. An FP16 member of the request is
// refused as on /infer; other members may be lone values.
func TestGenerateHalfPrecision(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"half": halfModel, "halfout": `backend: "halfout"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "OUT" data_type: TYPE_FP16 dims: [1] }]
`}, func(o *repository.Options) { o.Backends["halfout"] = halfOutBackend{} })
	e := serveRepo(t, repo, Options{Manager: repo.Manager})
	const refused = `{"error":"sending FP16 data via JSON is not supported. Please use the binary data format for output"}`
	resp, body := e.do(t, "POST", "/v2/models/halfout/generate", []byte(`{"IN": [1]}`), nil)
	if resp.StatusCode != 400 || string(body) != refused || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("generate with an FP16 output: %d %s %s, want 400 %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, refused)
	}
	resp, body = e.do(t, "POST", "/v2/models/halfout/generate_stream", []byte(`{"IN": [1]}`), nil)
	if resp.StatusCode != 400 || string(body) != "data: "+refused+"\n\n" || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Errorf("generate_stream with an FP16 output: %d %s %q, want 400 with the event %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, refused)
	}

	const receiving = `{"error":"receiving FP16 data via JSON is not supported. Please use the binary data format for input H"}`
	if resp, body = e.do(t, "POST", "/v2/models/half/generate", []byte(`{"H": 1.5}`), nil); resp.StatusCode != 400 || string(body) != receiving {
		t.Errorf("generate with an FP16 member: %d %s, want 400 %s", resp.StatusCode, body, receiving)
	}
	if resp, body = e.do(t, "POST", "/v2/models/half/generate", []byte(`{"X": 5}`), nil); resp.StatusCode != 200 || string(body) != `{"model_name":"half","model_version":"2","X_OUT":5}` {
		t.Errorf("generate with a lone INT32 value: %d %s", resp.StatusCode, body)
	}
}

// TestGeneratePriorityTimeoutAreParameters: Triton's generate conversion
// sets no priority or timeout (http_server.cc, ExactMappingInput): a
// member or parameter named priority or timeout is a parameter for the
// model like any other, and the request keeps the defaults. The
// sequence parameters are the ones this server applies.
func TestGeneratePriorityTimeoutAreParameters(t *testing.T) {
	m, err := frontendtest.NewRepo(t, map[string]string{"echo": frontendtest.Echo}).Manager.Get("echo", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"IN": "x", "priority": 2, "timeout": 5000, "sequence_id": 7}`,
		`{"IN": "x", "parameters": {"priority": 2, "timeout": 5000, "sequence_id": 7}}`,
	} {
		req, err := generateRequest([]byte(body), m)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if req.Priority != 0 || req.Timeout != 0 {
			t.Errorf("%s: priority %d and timeout %v applied", body, req.Priority, req.Timeout)
		}
		if req.Parameters["priority"] != int64(2) || req.Parameters["timeout"] != int64(5000) {
			t.Errorf("%s: the model's parameters are %v", body, req.Parameters)
		}
		if _, ok := req.Parameters["sequence_id"]; ok || req.Sequence.ID != 7 {
			t.Errorf("%s: sequence id %d, parameters %v", body, req.Sequence.ID, req.Parameters)
		}
	}
}
