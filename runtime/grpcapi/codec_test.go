package grpcapi

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	grpcstatus "google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// emptyTensors is the wire form of a ModelInferRequest listing n empty
// input tensors: two bytes each.
func emptyTensors(n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, 5<<3|2, 0) // inputs (field 5), length 0
	}
	return b
}

// TestInferCodecBoundsElements: an inference request whose wire form
// lists more empty tensors (or strings) than the bounds is refused before
// it is decoded, allocating next to nothing, where decoding it would
// allocate a struct per two bytes; requests within the bounds decode as
// the proto codec decodes them.
func TestInferCodecBoundsElements(t *testing.T) {
	c := newInferCodec()
	over := emptyTensors(maxRequestMessages + 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(over)}, new(pb.ModelInferRequest))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than 65536 tensors") {
		t.Fatalf("%d empty tensors: %v", maxRequestMessages+1, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing %d bytes allocated %d", len(over), got)
	}

	var strs []byte
	for range maxRequestStrings + 1 {
		strs = append(strs, 7<<3|2, 0) // raw_input_contents (field 7), empty
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(strs)}, new(pb.ModelInferRequest)); err == nil || !strings.Contains(err.Error(), "BYTES elements") {
		t.Errorf("%d raw contents: %v", maxRequestStrings+1, err)
	}
	// Strings nested in a tensor's contents count as well.
	nested := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "S", Contents: &pb.InferTensorContents{BytesContents: make([][]byte, maxRequestStrings+1)}}}}
	b, err := protov2.Marshal(nested)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, new(pb.ModelInferRequest)); err == nil || !strings.Contains(err.Error(), "BYTES elements") {
		t.Errorf("%d BYTES contents: %v", maxRequestStrings+1, err)
	}

	// At the bound, and an ordinary request split over buffers: decoded.
	var at pb.ModelInferRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(emptyTensors(maxRequestMessages))}, &at); err != nil || len(at.Inputs) != maxRequestMessages {
		t.Errorf("%d empty tensors: %v, %d decoded", maxRequestMessages, err, len(at.Inputs))
	}
	want := &pb.ModelInferRequest{ModelName: "m", Id: "7", Parameters: map[string]*pb.InferParameter{"p": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}}},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawInputContents: [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}}}
	b, err = protov2.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.ModelInferRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:5]), mem.SliceBuffer(b[5:])}, &got); err != nil || !protov2.Equal(&got, want) {
		t.Errorf("ordinary request: %v, got %v", err, &got)
	}
}

// TestManyEmptyTensorsRefused: through the server, a request of many
// empty input tensors is refused naming the bound, and the server goes on.
func TestManyEmptyTensorsRefused(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	r := &pb.ModelInferRequest{ModelName: "linear", Inputs: make([]*pb.ModelInferRequest_InferInputTensor, maxRequestMessages+1)}
	for i := range r.Inputs {
		r.Inputs[i] = &pb.ModelInferRequest_InferInputTensor{}
	}
	// grpc-go answers a message its codec refuses INTERNAL, naming why.
	if _, err := e.client.ModelInfer(context.Background(), r); grpcstatus.Code(err) != codes.Internal || !strings.Contains(err.Error(), "more than 65536 tensors") {
		t.Errorf("%d empty tensors: %v", len(r.Inputs), err)
	}
	ok := &pb.ModelInferRequest{ModelName: "linear", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}},
	}}}
	if _, err := e.client.ModelInfer(context.Background(), ok); err != nil {
		t.Errorf("an ordinary request after it: %v", err)
	}
}

// BenchmarkInferCodecCount times the wire count of a typical inference
// request (one FP32 input in raw contents, one requested output) against
// decoding it, the work the count adds to every ModelInfer.
func BenchmarkInferCodecCount(b *testing.B) {
	r := &pb.ModelInferRequest{ModelName: "simple_linear_batched",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 10}}},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0"}},
		RawInputContents: [][]byte{make([]byte, 40)}}
	w, err := protov2.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	c := newInferCodec()
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			var n elementCount
			if err := n.count(w, c.plan); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var m pb.ModelInferRequest
			if err := protov2.Unmarshal(w, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
