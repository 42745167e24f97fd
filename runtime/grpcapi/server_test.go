package grpcapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/health"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

type env struct {
	mgr    *repository.Manager
	client pb.GRPCInferenceServiceClient
	health healthpb.HealthClient
	srv    *Server
	root   string
	conn   *grpc.ClientConn
	addr   string
}

// newEnv serves a repository with the fake backend over a real loopback
// listener and returns a client generated from the same .proto.
func newEnv(t testing.TB, models map[string]string) *env {
	t.Helper()
	repo := frontendtest.NewRepo(t, models)
	return serve(t, repo, Options{Manager: repo.Manager, ID: "test-id", Version: "9.9", Extensions: []string{"statistics"}, ModelControl: true})
}

// serve starts the service with opts over repo until the test ends.
func serve(t testing.TB, repo *frontendtest.Repo, opts Options) *env {
	t.Helper()
	srv := New(opts)
	g := srv.NewGRPCServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return &env{mgr: repo.Manager, client: pb.NewGRPCInferenceServiceClient(conn), health: healthpb.NewHealthClient(conn), srv: srv, root: repo.Root, conn: conn, addr: ln.Addr().String()}
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func rows(n int, base float32) []float32 {
	x := make([]float32, 4*n)
	for i := range x {
		x[i] = base + float32(i)/2
	}
	return x
}

func linearRequest(id string, x []float32, raw bool) *pb.ModelInferRequest {
	in := &pb.ModelInferRequest_InferInputTensor{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{int64(len(x) / 4), 4}}
	r := &pb.ModelInferRequest{ModelName: "linear", Id: id, Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
	if raw {
		r.RawInputContents = [][]byte{frontendtest.F32Bytes(x)}
	} else {
		in.Contents = &pb.InferTensorContents{Fp32Contents: x}
	}
	return r
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := grpcstatus.Code(err); got != code {
		t.Fatalf("got code %v (%v), want %v", got, err, code)
	}
}

// TestReadiness answers the table the HTTP frontend answers too.
func TestReadiness(t *testing.T) {
	ctx := context.Background()
	for _, c := range frontendtest.Readiness() {
		t.Run(c.Name, func(t *testing.T) {
			repo, hs := c.Setup(t)
			e := serve(t, repo, Options{Manager: repo.Manager, Health: hs})
			live, err := e.client.ServerLive(ctx, &pb.ServerLiveRequest{})
			if err != nil || live.Live != c.Live {
				t.Errorf("ServerLive = %v, %v; want %v", live, err, c.Live)
			}
			ready, err := e.client.ServerReady(ctx, &pb.ServerReadyRequest{})
			if err != nil || ready.Ready != c.Ready {
				t.Errorf("ServerReady = %v, %v; want %v", ready, err, c.Ready)
			}
			// grpc.health.v1, which Kubernetes gRPC probes use, says the same.
			want := healthpb.HealthCheckResponse_NOT_SERVING
			if c.Ready {
				want = healthpb.HealthCheckResponse_SERVING
			}
			for _, svc := range []string{"", "inference.GRPCInferenceService"} {
				h, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
				if err != nil || h.Status != want {
					t.Errorf("health Check(%q) = %v, %v; want %v", svc, h, err, want)
				}
			}
		})
	}
}

// TestHealthWatchSeesDrain: a Watch stream opened on a ready server reports
// NOT_SERVING once the server starts draining, without anyone calling Check.
func TestHealthWatchSeesDrain(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	hs := health.New(repo.Manager, true)
	e := serve(t, repo, Options{Manager: repo.Manager, Health: hs})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch message = %v, %v; want SERVING", m, err)
	}
	hs.Drain()
	if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after Drain = %v, %v; want NOT_SERVING", m, err)
	}
}

func TestHealthAndMetadata(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident})
	ctx := context.Background()
	live, err := e.client.ServerLive(ctx, &pb.ServerLiveRequest{})
	if err != nil || !live.Live {
		t.Fatalf("ServerLive = %v, %v", live, err)
	}
	ready, err := e.client.ServerReady(ctx, &pb.ServerReadyRequest{})
	if err != nil || !ready.Ready {
		t.Fatalf("ServerReady = %v, %v", ready, err)
	}
	md, err := e.client.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || md.Name != "test-id" || md.Version != "9.9" || !slices.Equal(md.Extensions, []string{"statistics"}) {
		t.Fatalf("ServerMetadata = %v, %v", md, err)
	}
	for _, c := range []struct {
		name, version string
		ready         bool
	}{{"linear", "", true}, {"linear", "2", true}, {"linear", "3", false}, {"nope", "", false}, {"linear", "x", false}} {
		r, err := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: c.name, Version: c.version})
		if err != nil || r.Ready != c.ready {
			t.Errorf("ModelReady(%s, %q) = %v, %v; want %v", c.name, c.version, r, err, c.ready)
		}
	}
	mm, err := e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "linear"})
	if err != nil {
		t.Fatal(err)
	}
	if mm.Name != "linear" || !slices.Equal(mm.Versions, []string{"1", "2"}) || len(mm.Inputs) != 1 ||
		mm.Inputs[0].Datatype != "FP32" || !slices.Equal(mm.Inputs[0].Shape, []int64{-1, 4}) || !slices.Equal(mm.Outputs[0].Shape, []int64{-1, 3}) {
		t.Fatalf("ModelMetadata = %v", mm)
	}
	mm, err = e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "linear", Version: "1"})
	if err != nil || !slices.Equal(mm.Versions, []string{"1"}) {
		t.Fatalf("ModelMetadata(version 1) = %v, %v", mm, err)
	}
	_, err = e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound)
	_, err = e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "linear", Version: "-3"})
	wantCode(t, err, codes.InvalidArgument)

	cfg, err := e.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "linear"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.GetName() != "linear" || cfg.Config.GetMaxBatchSize() != 8 || cfg.Config.GetInput()[0].GetDataType() != pb.DataType_TYPE_FP32 {
		t.Fatalf("ModelConfig = %v", cfg.Config)
	}
	_, err = e.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound)

	h, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
	e.srv.Shutdown()
	h, err = e.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after Shutdown = %v, %v", h, err)
	}
}

func TestInferTypedAndRawAgree(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	ctx := context.Background()
	x := rows(3, -1.5)
	want := fake.Linear(x, 4, 3)
	var outs [][]byte
	for _, raw := range []bool{false, true} {
		resp, err := e.client.ModelInfer(ctx, linearRequest("req-7", x, raw))
		if err != nil {
			t.Fatalf("raw=%v: %v", raw, err)
		}
		if resp.ModelName != "linear" || resp.ModelVersion != "2" || resp.Id != "req-7" || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 {
			t.Fatalf("raw=%v: response %v", raw, resp)
		}
		o := resp.Outputs[0]
		if o.Name != "OUTPUT__0" || o.Datatype != "FP32" || !slices.Equal(o.Shape, []int64{3, 3}) {
			t.Fatalf("raw=%v: output %v", raw, o)
		}
		if got := bytesF32(resp.RawOutputContents[0]); !slices.Equal(got, want) {
			t.Fatalf("raw=%v: got %v, want %v", raw, got, want)
		}
		outs = append(outs, resp.RawOutputContents[0])
	}
	if string(outs[0]) != string(outs[1]) {
		t.Fatal("typed and raw contents gave different outputs")
	}
	// A specific version and an explicitly requested output.
	r := linearRequest("", x[:4], true)
	r.ModelVersion = "1"
	r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0"}}
	resp, err := e.client.ModelInfer(ctx, r)
	if err != nil || resp.ModelVersion != "1" || !slices.Equal(bytesF32(resp.RawOutputContents[0]), want[:3]) {
		t.Fatalf("version 1: %v, %v", resp, err)
	}
}

func TestInferAllTypesTypedAndRaw(t *testing.T) {
	e := newEnv(t, map[string]string{"ident": frontendtest.Ident})
	ctx := context.Background()
	typed := &pb.ModelInferRequest{ModelName: "ident", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "S", Datatype: "BYTES", Shape: []int64{3}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a"), {}, []byte("héllo\x00")}}},
		{Name: "I", Datatype: "INT32", Shape: []int64{2, 2}, Contents: &pb.InferTensorContents{IntContents: []int32{1, -2, math.MaxInt32, math.MinInt32}}},
		{Name: "B", Datatype: "BOOL", Shape: []int64{2}, Contents: &pb.InferTensorContents{BoolContents: []bool{true, false}}},
		{Name: "D", Datatype: "FP64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp64Contents: []float64{math.Pi}}},
		{Name: "U", Datatype: "UINT8", Shape: []int64{3}, Contents: &pb.InferTensorContents{UintContents: []uint32{0, 7, 255}}},
		{Name: "L", Datatype: "INT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Int64Contents: []int64{math.MinInt64}}},
	}}
	tr, err := e.client.ModelInfer(ctx, typed)
	if err != nil {
		t.Fatal(err)
	}
	// The same request in raw form, built from the typed response's raw
	// outputs (identity model: output i == input i).
	raw := &pb.ModelInferRequest{ModelName: "ident", RawInputContents: tr.RawOutputContents}
	for _, in := range typed.Inputs {
		raw.Inputs = append(raw.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape})
	}
	rr, err := e.client.ModelInfer(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(tr, rr) {
		t.Fatalf("typed and raw responses differ:\n%v\n%v", tr, rr)
	}
	wantRaw := map[string][]byte{
		"S_OUT": {1, 0, 0, 0, 'a', 0, 0, 0, 0, 7, 0, 0, 0, 'h', 0xc3, 0xa9, 'l', 'l', 'o', 0},
		"B_OUT": {1, 0},
		"U_OUT": {0, 7, 255},
	}
	for i, o := range tr.Outputs {
		if w, ok := wantRaw[o.Name]; ok && string(tr.RawOutputContents[i]) != string(w) {
			t.Errorf("%s = %v, want %v", o.Name, tr.RawOutputContents[i], w)
		}
		if o.Name == "I_OUT" {
			b := tr.RawOutputContents[i]
			if int32(binary.LittleEndian.Uint32(b[8:])) != math.MaxInt32 || int32(binary.LittleEndian.Uint32(b[12:])) != math.MinInt32 {
				t.Errorf("I_OUT = %v", b)
			}
		}
		if o.Name == "D_OUT" && math.Float64frombits(binary.LittleEndian.Uint64(tr.RawOutputContents[i])) != math.Pi {
			t.Errorf("D_OUT = %v", tr.RawOutputContents[i])
		}
	}
}

func TestInferErrors(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident, "broken": frontendtest.Broken})
	ctx := context.Background()
	x := rows(1, 0)
	mut := func(f func(r *pb.ModelInferRequest)) *pb.ModelInferRequest {
		r := linearRequest("", x, false)
		f(r)
		return r
	}
	cases := []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
	}{
		{"unknown model", mut(func(r *pb.ModelInferRequest) { r.ModelName = "nope" }), codes.NotFound},
		{"no model name", mut(func(r *pb.ModelInferRequest) { r.ModelName = "" }), codes.InvalidArgument},
		{"unknown version", mut(func(r *pb.ModelInferRequest) { r.ModelVersion = "7" }), codes.NotFound},
		// Triton: NOT_FOUND, the model has no available versions.
		{"model failed to load", mut(func(r *pb.ModelInferRequest) { r.ModelName = "broken" }), codes.NotFound},
		{"wrong datatype", mut(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "INT32" }), codes.InvalidArgument},
		{"bad datatype", mut(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FLOAT" }), codes.InvalidArgument},
		{"wrong shape", mut(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 5} }), codes.InvalidArgument},
		{"too few elements", mut(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents.Fp32Contents = x[:3] }), codes.InvalidArgument},
		{"contents of another type", mut(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1, 2, 3, 4}}
		}), codes.InvalidArgument},
		{"typed and raw", mut(func(r *pb.ModelInferRequest) { r.RawInputContents = [][]byte{frontendtest.F32Bytes(x)} }), codes.InvalidArgument},
		{"raw count", mut(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = nil
			r.RawInputContents = [][]byte{frontendtest.F32Bytes(x), frontendtest.F32Bytes(x)}
		}), codes.InvalidArgument},
		{"raw size", mut(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = nil
			r.RawInputContents = [][]byte{frontendtest.F32Bytes(x)[:15]}
		}), codes.InvalidArgument},
		{"batch too large", mut(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Shape = []int64{9, 4}
			r.Inputs[0].Contents.Fp32Contents = rows(9, 0)
		}), codes.InvalidArgument},
		{"unknown output", mut(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}
		}), codes.InvalidArgument},
		{"classification as a string", mut(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0",
				Parameters: map[string]*pb.InferParameter{"classification": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "2"}}}}}
		}), codes.InvalidArgument},
		{"backend error", mut(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents.Fp32Contents = []float32{fake.FailValue, 0, 0, 0} }), codes.Internal},
		{"int out of range", &pb.ModelInferRequest{ModelName: "ident", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "U", Datatype: "UINT8", Shape: []int64{3}, Contents: &pb.InferTensorContents{UintContents: []uint32{0, 256, 1}}}}}, codes.InvalidArgument},
		{"fp16 typed", &pb.ModelInferRequest{ModelName: "ident", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "U", Datatype: "FP16", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}}}, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.client.ModelInfer(ctx, c.req)
			wantCode(t, err, c.code)
		})
	}
	// Requests that reached a model and failed count as failures there.
	st, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "linear", Version: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if f := st.ModelStats[0].InferenceStats.Fail.Count; f < 9 {
		t.Fatalf("fail count %d, want at least 9", f)
	}
}

func TestStreamInfer(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	want := map[string][]float32{}
	go func() {
		for i := 0; i < n; i++ {
			x := rows(1+i%4, float32(i))
			id := fmt.Sprint("s", i)
			req := linearRequest(id, x, i%2 == 0)
			if i == 17 {
				req.Inputs[0].Shape = []int64{1, 5} // fails in band
			}
			if err := stream.Send(req); err != nil {
				t.Error(err)
				return
			}
		}
		_ = stream.CloseSend()
	}()
	for i := 0; i < n; i++ {
		want[fmt.Sprint("s", i)] = fake.Linear(rows(1+i%4, float32(i)), 4, 3)
	}
	got := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		id := resp.InferResponse.GetId()
		if id == "s17" {
			if resp.ErrorMessage == "" {
				t.Errorf("s17 should fail in band")
			}
			continue
		}
		if resp.ErrorMessage != "" {
			t.Errorf("%s: %s", id, resp.ErrorMessage)
			continue
		}
		if out := bytesF32(resp.InferResponse.RawOutputContents[0]); !slices.Equal(out, want[id]) {
			t.Errorf("%s: got %v, want %v", id, out, want[id])
		}
	}
	if got != n {
		t.Fatalf("got %d responses, want %d", got, n)
	}
}

func TestStatisticsAndIndex(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "broken": frontendtest.Broken})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := e.client.ModelInfer(ctx, linearRequest("", rows(2, 1), true)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "linear"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ModelStats) != 2 {
		t.Fatalf("want stats for 2 versions, got %v", st)
	}
	v2 := st.ModelStats[1]
	is := v2.InferenceStats
	if v2.Version != "2" || v2.InferenceCount != 6 || v2.ExecutionCount != 3 || v2.LastInference == 0 ||
		is.Success.Count != 3 || is.Success.Ns == 0 || is.Queue.Count != 3 || is.ComputeInfer.Count != 3 || is.ComputeOutput.Count != 3 {
		t.Fatalf("stats = %v", v2)
	}
	if len(v2.BatchStats) != 1 || v2.BatchStats[0].BatchSize != 2 || v2.BatchStats[0].ComputeInfer.Count != 3 {
		t.Fatalf("batch stats = %v", v2.BatchStats)
	}
	if st.ModelStats[0].InferenceCount != 0 {
		t.Fatalf("version 1 ran nothing: %v", st.ModelStats[0])
	}
	all, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil || len(all.ModelStats) != 2 {
		t.Fatalf("all stats: %v, %v", all, err)
	}
	_, err = e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound)

	idx, err := e.client.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var rowsSeen []string
	for _, m := range idx.Models {
		rowsSeen = append(rowsSeen, m.Name+"/"+m.Version+"/"+m.State)
		if m.Name == "broken" && m.Reason == "" {
			t.Errorf("broken model without a reason: %v", m)
		}
	}
	// broken has the default policy (latest 1); linear serves all versions.
	want := []string{"broken/2/UNAVAILABLE", "linear/1/READY", "linear/2/READY"}
	if !slices.Equal(rowsSeen, want) {
		t.Fatalf("index = %v, want %v", rowsSeen, want)
	}
	idx, err = e.client.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: true})
	if err != nil || len(idx.Models) != 2 {
		t.Fatalf("ready index = %v, %v", idx, err)
	}
}

func TestLoadUnload(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	ctx := context.Background()
	if _, err := e.client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "linear"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.ModelInfer(ctx, linearRequest("", rows(1, 0), true))
	wantCode(t, err, codes.NotFound)
	r, _ := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "linear"})
	if r.Ready {
		t.Fatal("unloaded model is ready")
	}
	// Reload with a configuration override: max_batch_size 2 instead of 8.
	cfg := `{"backend": "fake", "max_batch_size": 2, "version_policy": {"latest": {"num_versions": 1}},
	  "input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [4]}],
	  "output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [3]}]}`
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear",
		Parameters: map[string]*pb.ModelRepositoryParameter{"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: cfg}}}})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := e.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "linear"})
	if err != nil || mc.Config.GetMaxBatchSize() != 2 {
		t.Fatalf("config after override: %v, %v", mc, err)
	}
	if _, err := e.client.ModelInfer(ctx, linearRequest("", rows(2, 0), true)); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.ModelInfer(ctx, linearRequest("", rows(3, 0), true))
	wantCode(t, err, codes.InvalidArgument) // over the overridden max_batch_size
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear",
		Parameters: map[string]*pb.ModelRepositoryParameter{"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: `{"max_batch_size": "x"}`}}}})
	wantCode(t, err, codes.Internal) // Triton: "failed to poll from model repository"
	// Without the override the repository's config.pbtxt applies again.
	if _, err := e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ModelInfer(ctx, linearRequest("", rows(3, 0), true)); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "nope"})
	wantCode(t, err, codes.Internal) // as Triton: a model no repository holds fails its poll
	// File overrides need a config; with one, the model serves from them
	// (version 4 here, which the repository lacks).
	file := &pb.ModelRepositoryParameter{ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte{1}}}
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear",
		Parameters: map[string]*pb.ModelRepositoryParameter{"file:1/model.pt": file}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear",
		Parameters: map[string]*pb.ModelRepositoryParameter{"file:4/model.pt": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: "AQ=="}},
			"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: cfg}}}})
	wantCode(t, err, codes.InvalidArgument) // gRPC carries a file as bytes
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear",
		Parameters: map[string]*pb.ModelRepositoryParameter{"file:4/model.pt": file,
			"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: cfg}}}})
	if err != nil {
		t.Fatal(err)
	}
	if md, err := e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "linear"}); err != nil || !slices.Equal(md.Versions, []string{"4"}) {
		t.Fatalf("after a load with files: %v %v", md, err)
	}
	_, err = e.client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{})
	wantCode(t, err, codes.InvalidArgument)

	// Without a ModelControl (model control mode none) both are refused.
	e.srv.opts.ModelControl = false
	_, err = e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear"})
	wantCode(t, err, codes.Unavailable)
	_, err = e.client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "linear"})
	wantCode(t, err, codes.Unavailable)
}

// TestSharedMemoryDisabled: a server without a shared-memory registry
// (no --allow-client-shm) lists no regions and refuses registrations and
// shared-memory tensors; CUDA registrations are refused on this CPU-only
// server either way.
func TestSharedMemoryDisabled(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	ctx := context.Background()
	st, err := e.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.GetRegions()) != 0 {
		t.Errorf("status: %v %v", st, err)
	}
	_, err = e.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/k", ByteSize: 4})
	wantCode(t, err, codes.Unavailable)
	req := linearRequest("s", rows(1, 0), false)
	req.Inputs[0].Contents = nil
	req.Inputs[0].Parameters = map[string]*pb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "r"}},
		"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 16}},
	}
	_, err = e.client.ModelInfer(ctx, req)
	wantCode(t, err, codes.Unavailable)
	_, err = e.client.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{Name: "g"})
	wantCode(t, err, codes.InvalidArgument)
	// Without a trace manager (no Options.Tracing) the settings say so.
	_, err = e.client.TraceSetting(ctx, &pb.TraceSettingRequest{})
	wantCode(t, err, codes.Unavailable)
}
