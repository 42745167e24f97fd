package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

func seqRequest(model string, id *pb.InferParameter, start, end bool, v int32) *pb.ModelInferRequest {
	b := func(v bool) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
	}
	return &pb.ModelInferRequest{
		ModelName:  model,
		Parameters: map[string]*pb.InferParameter{"sequence_id": id, "sequence_start": b(start), "sequence_end": b(end)},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}, Contents: &pb.InferTensorContents{IntContents: []int32{v}},
		}},
	}
}

func uintID(v uint64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: v}}
}

func int64ID(v int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
}

func strID(v string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
}

// TestSequenceBatching is the HTTP test's counterpart over gRPC: int64
// (beyond the int64 range too, as Triton reads their bits) and string
// correlation ids, interleaved sequences from many clients, Triton's
// refusals (a uint64_param id among them) and the idle release.
func TestSequenceBatching(t *testing.T) {
	e := newEnv(t, map[string]string{"direct": frontendtest.SeqDirect, "oldest": frontendtest.SeqOldest})
	ctx := context.Background()
	ids := []func(c int) *pb.InferParameter{
		// Triton takes an int64_param's bits as the unsigned id: these
		// are the ids 1<<63 + c.
		func(c int) *pb.InferParameter { return int64ID(math.MinInt64 + int64(c)) },
		func(c int) *pb.InferParameter { return int64ID(int64(500 + c)) },
		func(c int) *pb.InferParameter { return strID(fmt.Sprint("g-", c)) },
	}
	for _, model := range []string{"direct", "oldest"} {
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for c := 0; c < 12; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				id := ids[c%3](c)
				sum := int32(0)
				for i := 0; i < 5; i++ {
					v := int32(c*10 + i)
					sum += v
					resp, err := e.client.ModelInfer(ctx, seqRequest(model, id, i == 0, i == 4, v))
					if err == nil {
						raw := resp.GetRawOutputContents()
						if len(raw) != 1 || len(raw[0]) != 4 || int32(binary.LittleEndian.Uint32(raw[0])) != sum {
							got := raw
							err = fmt.Errorf("got %v, want %d", got, sum)
						}
					}
					if err != nil {
						errs <- fmt.Errorf("%s client %d step %d: %w", model, c, i, err)
						return
					}
				}
			}(c)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}

	refused := func(req *pb.ModelInferRequest, want string) {
		t.Helper()
		_, err := e.client.ModelInfer(ctx, req)
		if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want InvalidArgument with %q", err, want)
		}
	}
	refused(seqRequest("direct", uintID(5), true, false, 1), "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
	refused(seqRequest("direct", int64ID(0), true, false, 1), "inference request to model 'direct' must specify a non-zero or non-empty correlation ID")
	refused(seqRequest("direct", int64ID(77), false, false, 1), "inference request for sequence 77 to model 'direct' must specify the START flag on the first request of the sequence")
	refused(seqRequest("oldest", strID("nope"), false, false, 1), "inference request for sequence nope to model 'oldest' must specify the START flag on the first request of the sequence")

	if _, err := e.client.ModelInfer(ctx, seqRequest("oldest", strID("idle"), true, false, 3)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the 1 s idle timeout and the reaper's round, with room
	refused(seqRequest("oldest", strID("idle"), false, false, 1), "inference request for sequence idle to model 'oldest' must specify the START flag on the first request of the sequence")
}
