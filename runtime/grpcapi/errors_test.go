package grpcapi

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestTritonErrors sends the requests of frontendtest.ErrorCases as
// ModelInfer calls with raw contents and checks Triton's gRPC code and its
// whole message.
func TestTritonErrors(t *testing.T) {
	e := newEnv(t, frontendtest.ErrorModels())
	for _, c := range frontendtest.ErrorCases() {
		t.Run(c.Name, func(t *testing.T) {
			req := &pb.ModelInferRequest{ModelName: c.Model, ModelVersion: c.Version, Id: c.ID}
			for _, in := range c.Inputs {
				req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: string(in.DataType), Shape: in.Shape})
				req.RawInputContents = append(req.RawInputContents, in.Data)
			}
			for _, o := range c.Outputs {
				req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o})
			}
			_, err := e.client.ModelInfer(context.Background(), req)
			st := grpcstatus.Convert(err)
			if st.Code() != c.GRPC || st.Message() != c.Want(true) {
				t.Errorf("got %v %q\nwant %v %q", st.Code(), st.Message(), c.GRPC, c.Want(true))
			}
		})
	}
}

// TestRequestTimeoutParameter: ModelInfer's "timeout" int64_param applies
// under allow_timeout_override: a request queued past it gets
// UNAVAILABLE "Request timeout expired".
func TestRequestTimeoutParameter(t *testing.T) {
	e := newEnv(t, map[string]string{"slow": `backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
dynamic_batching { default_queue_policy { default_timeout_microseconds: 60000000 allow_timeout_override: true } }
parameters { key: "fake_delay_us" value { string_value: "3000000" } }
`})
	req := func(params map[string]*pb.InferParameter) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "slow", Parameters: params,
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{4}}},
			RawInputContents: [][]byte{make([]byte, 16)}}
	}
	busy := make(chan error, 1)
	go func() {
		_, err := e.client.ModelInfer(context.Background(), req(nil))
		busy <- err
	}()
	// The busy request runs 3 s; on a loaded machine its call may take a
	// while to reach the server, and the timed one must queue behind it.
	time.Sleep(500 * time.Millisecond)
	_, err := e.client.ModelInfer(context.Background(), req(map[string]*pb.InferParameter{
		"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 50000}}}))
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || st.Message() != "Request timeout expired" {
		t.Errorf("queued request with timeout 50ms: %v", err)
	}
	if err := <-busy; err != nil {
		t.Errorf("the busy request: %v", err)
	}
}
