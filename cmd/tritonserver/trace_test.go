package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	otlptrace "go.opentelemetry.io/proto/otlp/trace/v1"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// The timestamps of a traced request, in time order, as Triton's trace
// file has them: the core's between the frontend's (docs/user_guide/trace.md).
var (
	coreTimestamps = []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "INFER_RESPONSE_COMPLETE", "REQUEST_END"}
	httpTimestamps = slices.Concat([]string{"HTTP_RECV_START", "HTTP_RECV_END"}, coreTimestamps, []string{"HTTP_SEND_START", "HTTP_SEND_END"})
	grpcTimestamps = slices.Concat([]string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END"}, coreTimestamps, []string{"GRPC_SEND_START", "GRPC_SEND_END"})
)

func inferBoth(t *testing.T, ctx context.Context, s *testServer, model string, md metadata.MD, hdr http.Header) {
	t.Helper()
	body := `{"id":"h1","inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	req, _ := http.NewRequest("POST", "http://"+s.addrs["HTTPService"]+"/v2/models/"+model+"/infer", strings.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP infer: %d %s", resp.StatusCode, b)
	}
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gctx := ctx
	if md != nil {
		gctx = metadata.NewOutgoingContext(ctx, md)
	}
	_, err = pb.NewGRPCInferenceServiceClient(conn).ModelInfer(gctx, &pb.ModelInferRequest{ModelName: model, Id: "g1", RawInputContents: [][]byte{rowBytes()},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTritonTraceFile: with Triton's --trace-config flags the server
// writes Triton's JSON trace records for requests of both protocols
// (infer, generate, ModelInfer, ModelStreamInfer); the
// file parses back with the model, request ids and every timestamp name of
// the core and of the request's frontend, in order of their times;
// settings change through both protocols.
func TestTritonTraceFile(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	writeFakeModel(t, root, "a")
	writeFakeModel(t, root, "b")
	file := filepath.Join(dir, "trace.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--trace-config", "triton,file="+file, "--trace-config", "level=TIMESTAMPS", "--trace-config=rate=1", "--trace-config", "count=-1")
	base := "http://" + s.addrs["HTTPService"]
	var st map[string]any
	resp, err := http.Get(base + "/v2/trace/setting")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if fmt.Sprint(st["trace_level"]) != "[TIMESTAMPS]" || st["trace_rate"] != "1" || st["trace_count"] != "-1" || st["trace_file"] != file || st["log_frequency"] != "0" || st["trace_mode"] != "TRITON" {
		t.Errorf("global trace settings: %v", st)
	}
	inferBoth(t, ctx, s, "a", nil, nil)
	streamOne(t, ctx, s, "a", "st1")
	if code, body := post(t, base+"/v2/models/a/generate", `{"INPUT__0":[1,2,3,4]}`); code != 200 {
		t.Fatalf("generate: %d %s", code, body)
	}

	// Model b stops being traced; the global setting still traces a.
	if code, body := post(t, base+"/v2/models/b/trace/setting", `{"trace_level":["OFF"]}`); code != 200 || !strings.Contains(body, `"trace_level":["OFF"]`) || !strings.Contains(body, `"trace_rate":"1"`) {
		t.Errorf("model b setting: %d %s", code, body)
	}
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gs, err := pb.NewGRPCInferenceServiceClient(conn).TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "b"})
	if err != nil || fmt.Sprint(gs.GetSettings()["trace_level"].GetValue()) != "[OFF]" {
		t.Errorf("gRPC model b setting: %v %v", gs, err)
	}
	inferBoth(t, ctx, s, "b", nil, nil)
	if code, body := post(t, base+"/v2/trace/setting", `{"trace_file":"/tmp/x.json"}`); code != 501 || !strings.Contains(body, "trace file location can not be updated through network protocol") {
		t.Errorf("trace_file update: %d %s", code, body)
	}
	if code, body := post(t, base+"/v2/models/nope/trace/setting", `{}`); code != 400 || !strings.Contains(body, "Request for unknown model : nope") {
		t.Errorf("unknown model: %d %s", code, body)
	}
	if code, body := post(t, base+"/v2/trace/setting", `{"trace_rate":"0"}`); code != 400 || !strings.Contains(body, "sample rate must be non-zero") {
		t.Errorf("rate 0: %d %s", code, body)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var records []map[string]any
	if err := json.Unmarshal(data, &records); err != nil {
		t.Fatalf("trace file is not a JSON array: %v\n%s", err, data)
	}
	type traceInfo struct {
		model, request string
		names          []string
		ns             []float64
	}
	traces := map[float64]*traceInfo{}
	for _, r := range records {
		id := r["id"].(float64)
		if traces[id] == nil {
			traces[id] = &traceInfo{}
		}
		if m, ok := r["model_name"]; ok {
			traces[id].model, _ = m.(string)
			traces[id].request, _ = r["request_id"].(string)
			if r["model_version"] != float64(1) {
				t.Errorf("record %v: model_version", r)
			}
		}
		for _, ts := range asList(r["timestamps"]) {
			e := ts.(map[string]any)
			if e["ns"].(float64) <= 0 {
				t.Errorf("timestamp %v", e)
			}
			traces[id].names = append(traces[id].names, e["name"].(string))
			traces[id].ns = append(traces[id].ns, e["ns"].(float64))
		}
	}
	var requests []string
	for _, tr := range traces {
		requests = append(requests, tr.model+"/"+tr.request)
		want := httpTimestamps
		if tr.request == "g1" || tr.request == "st1" {
			want = grpcTimestamps
		}
		if !slices.Equal(tr.names, want) {
			t.Errorf("trace of %s/%s: timestamps %v, want %v", tr.model, tr.request, tr.names, want)
		}
		if !slices.IsSorted(tr.ns) {
			t.Errorf("trace of %s/%s: timestamps out of time order: %v %v", tr.model, tr.request, tr.names, tr.ns)
		}
	}
	slices.Sort(requests)
	if want := []string{"a/", "a/g1", "a/h1", "a/st1"}; !slices.Equal(requests, want) { // generate's has no id
		t.Errorf("traced requests %v, want %v (b was switched off)", requests, want)
	}
}

// streamOne sends one request over ModelStreamInfer and reads its answer.
func streamOne(t *testing.T, ctx context.Context, s *testServer, model, id string) {
	t.Helper()
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewGRPCInferenceServiceClient(conn).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.ModelInferRequest{ModelName: model, Id: id, RawInputContents: [][]byte{rowBytes()},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || r.GetErrorMessage() != "" {
		t.Fatalf("stream infer: %v %v", r, err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestTraceLogFrequency: with log-frequency N every N traces go to the
// next FILE.<index>, each a JSON array.
func TestTraceLogFrequency(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	writeFakeModel(t, root, "a")
	file := filepath.Join(dir, "t.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--trace-file="+file, "--trace-level=TIMESTAMPS", "--trace-rate=1", "--trace-config", "triton,log-frequency=2")
	inferBoth(t, ctx, s, "a", nil, nil)
	inferBoth(t, ctx, s, "a", nil, nil)
	cancel()
	<-s.done
	for _, name := range []string{"t.json.0", "t.json.1"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		var recs []map[string]any
		if err != nil || json.Unmarshal(data, &recs) != nil || len(recs) != 2+len(httpTimestamps)+len(grpcTimestamps) {
			t.Errorf("%s: %v, %d records\n%s", name, err, len(recs), data)
		}
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the
// ExportTraceServiceRequest protobuf messages the SDK exporter posts.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*otlptrace.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (o *otlpReceiver) snapshot() []*otlptrace.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.spans)
}

// TestOpenTelemetryTracing: in opentelemetry mode, requests carrying a W3C
// traceparent (HTTP header, gRPC metadata) are traced at rate 0 as Triton
// does, and the spans reach an OTLP/HTTP receiver started here as
// children of the caller's span, with Triton's span names and events.
func TestOpenTelemetryTracing(t *testing.T) {
	rcv := &otlpReceiver{}
	otlp := httptestServer(t, rcv)
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=0",
		"--trace-config", "opentelemetry,url="+otlp+"/v1/traces", "--trace-config", "opentelemetry,bsp_schedule_delay=50",
		"--trace-config", "opentelemetry,resource=service.name=tb-test")
	const traceID, httpParent, grpcParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "00f067aa0ba902b8"
	inferBoth(t, ctx, s, "a",
		metadata.Pairs("traceparent", "00-"+traceID+"-"+grpcParent+"-01"),
		http.Header{"Traceparent": {"00-" + traceID + "-" + httpParent + "-01"}})
	// A request without a trace context is not traced at rate 0.
	inferBoth(t, ctx, s, "a", nil, nil)
	resp, err := http.Get("http://" + s.addrs["HTTPService"] + "/v2/trace/setting")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"trace_mode":"OPENTELEMETRY"`) || !strings.Contains(string(b), `"url":"`+otlp+`/v1/traces"`) {
		t.Errorf("opentelemetry settings: %s", b)
	}
	cancel()
	if err := <-s.done; err != nil { // shutdown flushes the batch processor
		t.Fatal(err)
	}
	spans := rcv.snapshot()
	byID := map[string]*otlptrace.Span{}
	for _, sp := range spans {
		byID[fmt.Sprintf("%x", sp.GetSpanId())] = sp
	}
	roots := 0
	for _, sp := range spans {
		if sp.GetName() != "InferRequest" {
			continue
		}
		roots++
		if fmt.Sprintf("%x", sp.GetTraceId()) != traceID {
			t.Errorf("root span trace id %x, want %s", sp.GetTraceId(), traceID)
		}
		if p := fmt.Sprintf("%x", sp.GetParentSpanId()); p != httpParent && p != grpcParent {
			t.Errorf("root span parent %s, want the caller's span", p)
		}
		var model, compute *otlptrace.Span
		for _, c := range spans {
			if string(c.GetParentSpanId()) == string(sp.GetSpanId()) && c.GetName() == "a" {
				model = c
			}
		}
		if model == nil {
			t.Fatalf("no model span under %x", sp.GetSpanId())
		}
		for _, c := range spans {
			if string(c.GetParentSpanId()) == string(model.GetSpanId()) && c.GetName() == "compute" {
				compute = c
			}
		}
		if compute == nil {
			t.Fatal("no compute span")
		}
		names := func(s *otlptrace.Span) []string {
			var out []string
			for _, e := range s.GetEvents() {
				out = append(out, e.GetName())
			}
			return out
		}
		if got := names(model); !slices.Equal(got, []string{"REQUEST_START", "QUEUE_START", "REQUEST_END"}) {
			t.Errorf("model span events %v", got)
		}
		// The frontend's timestamps are the root's events, as in Triton.
		rootHTTP := []string{"HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"}
		rootGRPC := []string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"}
		if got := names(sp); !slices.Equal(got, rootHTTP) && !slices.Equal(got, rootGRPC) {
			t.Errorf("root span events %v, want %v or %v", got, rootHTTP, rootGRPC)
		}
		if got := names(compute); !slices.Equal(got, []string{"COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"}) {
			t.Errorf("compute span events %v", got)
		}
		attrs := map[string]string{}
		for _, kv := range model.GetAttributes() {
			attrs[kv.GetKey()] = fmt.Sprint(kv.GetValue().GetValue())
		}
		if !strings.Contains(attrs["triton.model_name"], "a") || !strings.Contains(attrs["triton.model_version"], "1") {
			t.Errorf("model span attributes %v", attrs)
		}
	}
	if roots != 2 {
		t.Errorf("%d traced requests exported, want 2 (HTTP and gRPC with a trace context):\n%v", roots, spans)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
