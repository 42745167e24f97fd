package grpcapi

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/access"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestDuplicatesRefused is issue 17's case 1 over gRPC: a request naming
// an output (or an input) twice is refused with Triton's text instead of
// being answered with a copy per name.
func TestDuplicatesRefused(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo})
	data := frontendtest.BytesElems(1000, 4000)
	in := &pb.ModelInferRequest_InferInputTensor{Name: "IN", Datatype: "BYTES", Shape: []int64{1000}}
	req := &pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{data}}
	for i := 0; i < 400; i++ {
		req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "OUT"})
	}
	_, err := e.client.ModelInfer(context.Background(), req)
	if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "output 'OUT' already exists in request" {
		t.Errorf("duplicate outputs: %v", err)
	}
	req.Outputs = nil
	req.Inputs = append(req.Inputs, in)
	req.RawInputContents = append(req.RawInputContents, data)
	_, err = e.client.ModelInfer(context.Background(), req)
	if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "input 'IN' already exists in request") {
		t.Errorf("duplicate inputs: %v", err)
	}
}

// TestMessageSizeBounded is issue 17's case 3: gRPC accepted messages up
// to 2 GiB with no way to lower it. A request over MaxRecvMsgSize is
// refused by gRPC itself, before any model sees it, and the server goes on.
func TestMessageSizeBounded(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"echo": frontendtest.Echo})
	e := serve(t, repo, Options{Manager: repo.Manager, Limits: Limits{MaxRecvMsgSize: 1 << 20, MaxSendMsgSize: 1 << 20}})
	req := func(size int) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "echo",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "BYTES", Shape: []int64{1}}},
			RawInputContents: [][]byte{frontendtest.BytesElems(1, size)}}
	}
	_, err := e.client.ModelInfer(context.Background(), req(2<<20))
	if st := grpcstatus.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("2 MiB message to a 1 MiB limit: %v", err)
	}
	if _, err := e.client.ModelInfer(context.Background(), req(1000)); err != nil {
		t.Errorf("a small request after the refused one: %v", err)
	}
}

// TestMessagesBeyondTheFlowWindow: the flow-control windows are fixed
// (no bandwidth-delay estimation), so a request and a response larger
// than them move only through the window updates both sides send as they
// read; a window that never reopened would stall this call.
func TestMessagesBeyondTheFlowWindow(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo})
	data := frontendtest.BytesElems(1, 2*flowWindow+12345)
	resp, err := e.client.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "echo",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{data}}, grpc.MaxCallRecvMsgSize(2*len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 1 || !bytes.Equal(resp.RawOutputContents[0], data) {
		t.Errorf("echo of a %d-byte element: %d outputs", len(data), len(resp.RawOutputContents))
	}
}

// TestIdleConnectionGoesAway: a connection without calls is closed with a
// GOAWAY after MaxConnectionIdle, which clients recover from on their next
// call.
func TestIdleConnectionGoesAway(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"echo": frontendtest.Echo})
	e := serve(t, repo, Options{Manager: repo.Manager, Limits: Limits{MaxConnectionIdle: 200 * time.Millisecond}})
	if _, err := e.client.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.conn.GetState() != connectivity.Idle {
		if time.Now().After(deadline) {
			t.Fatalf("connection still %v after the idle bound", e.conn.GetState())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.client.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("the next call after GOAWAY: %v", err)
	}
}

// TestRestrictedProtocol: with --grpc-restricted-protocol the load RPC
// fails UNAVAILABLE with Triton's text unless the call carries
// triton-grpc-protocol-<key>; inference stays open.
func TestRestrictedProtocol(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	rules := access.Rules{}
	if err := rules.Add("grpc-restricted-protocol", "model-repository:admin=k"); err != nil {
		t.Fatal(err)
	}
	e := serve(t, repo, Options{Manager: repo.Manager, ModelControl: true, Restricted: rules})
	_, err := e.client.RepositoryModelLoad(context.Background(), &pb.RepositoryModelLoadRequest{ModelName: "linear"})
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || st.Message() != "This protocol is restricted, expecting header 'triton-grpc-protocol-admin'" {
		t.Errorf("load without the header: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "triton-grpc-protocol-admin", "k")
	if _, err := e.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "linear"}); err != nil {
		t.Errorf("load with the header: %v", err)
	}
	if _, err := e.client.ModelInfer(context.Background(), linearRequest("", rows(1, 0), true)); err != nil {
		t.Errorf("inference, not restricted: %v", err)
	}
}

// TestRestrictedInference: restricting the inference category closes
// both ModelInfer (served by its own handler, past the unary
// interceptors) and ModelStreamInfer to calls without the header, with
// Triton's text, and opens them to calls that carry it.
func TestRestrictedInference(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	rules := access.Rules{}
	if err := rules.Add("grpc-restricted-protocol", "inference:infer-key=v"); err != nil {
		t.Fatal(err)
	}
	e := serve(t, repo, Options{Manager: repo.Manager, Restricted: rules})
	const want = "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
	_, err := e.client.ModelInfer(context.Background(), linearRequest("", rows(1, 0), true))
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || st.Message() != want {
		t.Errorf("ModelInfer without the header: %v", err)
	}
	stream, err := e.client.ModelStreamInfer(context.Background())
	if err == nil {
		_, err = stream.Recv()
	}
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || st.Message() != want {
		t.Errorf("ModelStreamInfer without the header: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "triton-grpc-protocol-infer-key", "v")
	if r, err := e.client.ModelInfer(ctx, linearRequest("i1", rows(1, 0), true)); err != nil || r.GetId() != "i1" {
		t.Errorf("ModelInfer with the header: %v %v", r, err)
	}
	if _, err := e.client.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("health, not restricted: %v", err)
	}
}

// TestConnectionAgeGoesAway: a connection older than MaxConnectionAge is
// sent GOAWAY even while a call runs on it (so it is not the idle
// bound), the client moves on, and the running stream still completes
// within MaxConnectionAgeGrace.
func TestConnectionAgeGoesAway(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	e := serve(t, repo, Options{Manager: repo.Manager, Limits: Limits{MaxConnectionAge: 200 * time.Millisecond, MaxConnectionAgeGrace: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := e.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := rows(1, 1)
	if err := stream.Send(linearRequest("s1", x, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// GOAWAY moves the client's connection out of READY.
	for s := e.conn.GetState(); s == connectivity.Ready; s = e.conn.GetState() {
		if !e.conn.WaitForStateChange(ctx, s) {
			t.Fatal("the connection stayed READY past its age")
		}
	}
	if err := stream.Send(linearRequest("s2", x, true)); err != nil {
		t.Fatalf("the running stream within the grace period: %v", err)
	}
	if r, err := stream.Recv(); err != nil || r.GetInferResponse().GetId() != "s2" {
		t.Fatalf("the running stream within the grace period: %v %v", r, err)
	}
	_ = stream.CloseSend()
	if _, err := e.client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("a call after GOAWAY (on a new connection): %v", err)
	}
}
