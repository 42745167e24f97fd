package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// getJSON GETs url and decodes its body into v, returning the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %d %s is not JSON: %v", url, resp.StatusCode, b, err)
	}
	return resp.StatusCode
}

// TestSystemSharedMemoryAsDocumented walks the calls of Triton's
// extension_shared_memory.md that TestSystemSharedMemory does not: the
// gRPC Register, a region at an offset into its memory object, the
// status of all regions (HTTP) and of an unknown one (an error object),
// unregistering one region over HTTP and all over gRPC, and the
// document's two refusals of an input (one of region and byte size
// alone; shared memory and data together).
func TestSystemSharedMemoryAsDocumented(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm on this machine")
	}
	root := t.TempDir()
	writeFakeModel(t, root, "a") // INPUT__0 [4] -> OUTPUT__0 [3]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--allow-client-shm=true")
	base := "http://" + s.addrs["HTTPService"]
	key := "/tb_doc_" + strconv.Itoa(os.Getpid())
	x := []float32{1, 2, 3, 4}
	shmObject(t, key, 256, x) // another process creates and fills it

	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	// One object, two regions: the input at its start, the output 64
	// bytes in.
	for _, r := range []*pb.SystemSharedMemoryRegisterRequest{
		{Name: "in", Key: key, Offset: 0, ByteSize: 16},
		{Name: "out", Key: key, Offset: 64, ByteSize: 64},
	} {
		if _, err := client.SystemSharedMemoryRegister(ctx, r); err != nil {
			t.Fatalf("register %s: %v", r.GetName(), err)
		}
	}
	_, err = client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "in", Key: key, ByteSize: 16})
	if grpcstatus.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "shared memory region 'in' already in manager") {
		t.Errorf("registering 'in' again: %v", err)
	}

	str := func(v string) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
	}
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	resp, err := client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "a",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4},
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("in"), "shared_memory_byte_size": i64(16)}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0",
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("out"), "shared_memory_byte_size": i64(12)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The output region starts 64 bytes into the object.
	if got, want := readShmFloats(t, key, 64, 3), fake.Linear(x, 4, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("output in region 'out': %v, want %v", got, want)
	}
	if o := resp.GetOutputs()[0]; o.GetParameters()["shared_memory_region"].GetStringParam() != "out" || len(resp.GetRawOutputContents()[0]) != 0 {
		t.Errorf("gRPC output in shared memory: %v", resp)
	}

	// The document's $system_shared_memory_status_response, every region.
	var all []map[string]any
	if code := getJSON(t, base+"/v2/systemsharedmemory/status", &all); code != 200 || len(all) != 2 {
		t.Fatalf("status of all regions: %d %v", code, all)
	}
	byName := map[string]map[string]any{}
	for _, r := range all {
		byName[r["name"].(string)] = r
		if len(r) != 4 {
			t.Errorf("region status %v: want exactly name, key, offset, byte_size", r)
		}
	}
	if r := byName["out"]; r == nil || r["key"] != key || r["offset"] != float64(64) || r["byte_size"] != float64(64) {
		t.Errorf("status of 'out': %v", byName["out"])
	}
	var bad map[string]any
	if code := getJSON(t, base+"/v2/systemsharedmemory/region/nope/status", &bad); code < 400 || bad["error"] != "Unable to find system shared memory region: 'nope'" {
		t.Errorf("status of an unknown region: %d %v", code, bad)
	}
	if _, err := client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "nope"}); grpcstatus.Code(err) != codes.NotFound {
		t.Errorf("gRPC status of an unknown region: %v", err)
	}

	// The document's two refusals of an input.
	for body, why := range map[string]string{
		`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"shared_memory_region":"in"}}]}`:                                               "must be given together",
		`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":16}}]}`: "But set 'data' 'shared_memory_region'",
	} {
		code, got := post(t, base+"/v2/models/a/infer", body)
		var e map[string]any
		if code != 400 || json.Unmarshal([]byte(got), &e) != nil || !strings.Contains(fmt.Sprint(e["error"]), why) {
			t.Errorf("%s: %d %s, want 400 with an error object saying %q", body, code, got, why)
		}
	}

	// Unregister one region (HTTP, empty body), then all (gRPC, no name).
	if code, got := post(t, base+"/v2/systemsharedmemory/region/out/unregister", ""); code != 200 {
		t.Errorf("unregister 'out': %d %s", code, got)
	}
	var left []map[string]any
	if getJSON(t, base+"/v2/systemsharedmemory/status", &left); len(left) != 1 || left[0]["name"] != "in" {
		t.Errorf("after unregistering 'out': %v", left)
	}
	if _, err := client.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
	st, err := client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.GetRegions()) != 0 {
		t.Errorf("gRPC status after unregistering all: %v %v", st, err)
	}
	if getJSON(t, base+"/v2/systemsharedmemory/status", &left); len(left) != 0 {
		t.Errorf("HTTP status after unregistering all: %v", left)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}

// TestTraceSettingGRPCUpdate: extension_trace.md's gRPC TraceSetting
// updates (TestTritonTraceFile drives the HTTP ones): global values set,
// a model's own setting set and then cleared by sending it with no
// value, after which the model follows the global one again; a bad value
// is INVALID_ARGUMENT. HTTP reports what gRPC set.
func TestTraceSettingGRPCUpdate(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--trace-config", "triton,file="+t.TempDir()+"/t.json", "--trace-config", "rate=1000")
	base := "http://" + s.addrs["HTTPService"]
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	values := func(v ...string) *pb.TraceSettingRequest_SettingValue {
		return &pb.TraceSettingRequest_SettingValue{Value: v}
	}
	got := func(r *pb.TraceSettingResponse, k string) string {
		return strings.Join(r.GetSettings()[k].GetValue(), ",")
	}
	r, err := client.TraceSetting(ctx, &pb.TraceSettingRequest{Settings: map[string]*pb.TraceSettingRequest_SettingValue{
		"trace_level": values("TIMESTAMPS", "TENSORS"), "trace_rate": values("7"), "trace_count": values("20"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got(r, "trace_level") != "TIMESTAMPS,TENSORS" || got(r, "trace_rate") != "7" || got(r, "trace_count") != "20" {
		t.Errorf("global update: %v", r.GetSettings())
	}
	r, err = client.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "a", Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_rate": values("3")}})
	if err != nil || got(r, "trace_rate") != "3" || got(r, "trace_count") != "20" {
		t.Errorf("model a's rate (the rest follows the global setting): %v %v", r.GetSettings(), err)
	}
	var hs map[string]any
	if getJSON(t, base+"/v2/models/a/trace/setting", &hs); hs["trace_rate"] != "3" || fmt.Sprint(hs["trace_level"]) != "[TIMESTAMPS TENSORS]" {
		t.Errorf("HTTP after the gRPC update: %v", hs)
	}
	r, err = client.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "a", Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_rate": values()}})
	if err != nil || got(r, "trace_rate") != "7" {
		t.Errorf("model a's rate cleared: %v %v", r.GetSettings(), err)
	}
	_, err = client.TraceSetting(ctx, &pb.TraceSettingRequest{Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_rate": values("often")}})
	if grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("trace_rate 'often': %v", err)
	}
	_, err = client.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "nope"})
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Request for unknown model : nope") {
		t.Errorf("unknown model: %v", err)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}
