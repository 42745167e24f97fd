package grpcapi

import (
	"testing"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

func TestDecodeRequestKeepsID(t *testing.T) {
	for _, id := range []string{"req-42", ""} {
		req, err := decodeRequest(&pb.ModelInferRequest{
			Id:               id,
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "X", Datatype: "FP32", Shape: []int64{1}}},
			RawInputContents: [][]byte{{0, 0, 128, 63}},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if req.ID != id {
			t.Fatalf("request id %q, want %q", req.ID, id)
		}
	}
}
