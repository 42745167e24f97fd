package grpcapi

import (
	"context"
	"testing"

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
