//go:build cgo && libtorch

package grpcapi

// End-to-end test of the report's simple_linear model as a pytorch model
// served over GRPC by the real libtorch backend. It needs libtbtorch.so at
// link time (see runtime/torch) and /usr/bin/python3 with torch to write the
// model and compute reference outputs; TBTORCH_PYTHON overrides the
// interpreter.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/torchtest"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

func TestTorchSimpleLinearGRPC(t *testing.T) {
	py, root, modelPath := torchtest.Repository(t, frontendtest.SimpleLinear(32)+`
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [{ kind: KIND_CPU count: 2 }]
`)
	mgr, err := repository.New(repository.Options{
		Repositories: []string{root}, StrictModelConfig: true,
		Backends: map[string]backend.Backend{"pytorch": torch.New(torch.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close(context.Background())
	if err := mgr.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := New(Options{Manager: mgr}).NewGRPCServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()

	md, err := client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "simple_linear"})
	if err != nil || md.Platform != "pytorch_libtorch" || md.Inputs[0].Name != "INPUT__0" {
		t.Fatalf("metadata = %v, %v", md, err)
	}

	// Three rows; the reference comes from torch itself.
	x := make([]float32, 30)
	nested := make([][]float32, 3)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * 2
	}
	for r := range nested {
		nested[r] = x[10*r : 10*r+10]
	}
	want, err := torchtest.Reference(t.Context(), py, modelPath, nested)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	check := func(what string, got []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 1e-5 {
				t.Fatalf("%s: value %d = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	req := func(raw bool) *pb.ModelInferRequest {
		in := &pb.ModelInferRequest_InferInputTensor{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{3, 10}}
		r := &pb.ModelInferRequest{ModelName: "simple_linear", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
		if raw {
			r.RawInputContents = [][]byte{frontendtest.F32Bytes(x)}
		} else {
			in.Contents = &pb.InferTensorContents{Fp32Contents: x}
		}
		return r
	}
	var results [][]byte
	for _, raw := range []bool{false, true} {
		resp, err := client.ModelInfer(ctx, req(raw))
		if err != nil {
			t.Fatalf("raw=%v: %v", raw, err)
		}
		if o := resp.Outputs[0]; o.Name != "OUTPUT__0" || o.Datatype != "FP32" || len(o.Shape) != 2 || o.Shape[0] != 3 || o.Shape[1] != 5 {
			t.Fatalf("raw=%v: output %v", raw, o)
		}
		check(fmt.Sprint("raw=", raw), bytesF32(resp.RawOutputContents[0]))
		results = append(results, resp.RawOutputContents[0])
	}
	if string(results[0]) != string(results[1]) {
		t.Fatal("typed and raw contents gave different outputs")
	}

	// Streaming: every response matches the reference.
	stream, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	go func() {
		for i := 0; i < n; i++ {
			r := req(i%2 == 0)
			r.Id = fmt.Sprint(i)
			if err := stream.Send(r); err != nil {
				t.Error(err)
				return
			}
		}
		_ = stream.CloseSend()
	}()
	got := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorMessage != "" {
			t.Fatalf("stream response %s: %s", resp.InferResponse.GetId(), resp.ErrorMessage)
		}
		check("stream "+resp.InferResponse.Id, bytesF32(resp.InferResponse.RawOutputContents[0]))
		got++
	}
	if got != n {
		t.Fatalf("%d stream responses, want %d", got, n)
	}
	st, err := client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "simple_linear"})
	if err != nil || st.ModelStats[0].InferenceCount != 3*(n+2) || st.ModelStats[0].InferenceStats.Success.Count != n+2 {
		t.Fatalf("statistics = %v, %v", st, err)
	}
}
