package grpcapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

func repeatRequest(id string, vals []int32, emptyFinal bool) *pb.ModelInferRequest {
	r := &pb.ModelInferRequest{ModelName: "repeat", Id: id, Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(vals))}, Contents: &pb.InferTensorContents{IntContents: vals},
	}}}
	if emptyFinal {
		r.Parameters = map[string]*pb.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}
	}
	return r
}

// TestStreamDecoupled streams requests of a decoupled model interleaved
// with ordinary ones over one stream: each decoupled request gets one
// response per element, in order, the final flag only on its last (an
// empty final response only when asked for), and the ordinary ones one
// response each.
func TestStreamDecoupled(t *testing.T) {
	e := newEnv(t, map[string]string{"repeat": frontendtest.Repeat, "linear": frontendtest.Linear})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	_, err := e.client.ModelInfer(ctx, repeatRequest("u", []int32{1}, false))
	wantCode(t, err, codes.Unimplemented)
	if !strings.Contains(err.Error(), "ModelInfer RPC doesn't support models with decoupled transaction policy") {
		t.Errorf("ModelInfer on a decoupled model: %v", err)
	}

	stream, err := e.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	want := map[string][]int32{}
	for i := 0; i < n; i++ {
		id := fmt.Sprint("r", i)
		vals := make([]int32, i%7) // zero responses for some
		for k := range vals {
			vals[k] = int32(100*i + k)
		}
		want[id] = vals
	}
	go func() {
		for i := 0; i < n; i++ {
			id := fmt.Sprint("r", i)
			if err := stream.Send(repeatRequest(id, want[id], i%2 == 0)); err != nil {
				t.Error(err)
				return
			}
			if err := stream.Send(linearRequest(fmt.Sprint("l", i), rows(1, float32(i)), true)); err != nil {
				t.Error(err)
				return
			}
		}
		_ = stream.CloseSend()
	}()
	got := map[string][]int32{}
	finals := map[string]int{}
	linear := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorMessage != "" {
			t.Fatalf("in-band error: %s", resp.ErrorMessage)
		}
		ir := resp.InferResponse
		final, ok := ir.GetParameters()["triton_final_response"]
		if !ok {
			t.Fatalf("response %s has no triton_final_response parameter", ir.GetId())
		}
		if strings.HasPrefix(ir.GetId(), "l") {
			linear++
			if !final.GetBoolParam() {
				t.Errorf("%s: an ordinary model's response is final", ir.GetId())
			}
			continue
		}
		if finals[ir.GetId()] > 0 {
			t.Errorf("%s: a response after the final one", ir.GetId())
		}
		if final.GetBoolParam() {
			finals[ir.GetId()]++
		}
		if len(ir.RawOutputContents) > 0 {
			got[ir.GetId()] = append(got[ir.GetId()], int32(binary.LittleEndian.Uint32(ir.RawOutputContents[0])))
		} else if !final.GetBoolParam() {
			t.Errorf("%s: an empty response that is not final", ir.GetId())
		}
	}
	if linear != n {
		t.Errorf("%d responses of the ordinary model, want %d", linear, n)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprint("r", i)
		if !slices.Equal(got[id], want[id]) && (len(got[id]) != 0 || len(want[id]) != 0) {
			t.Errorf("%s: got %v, want %v", id, got[id], want[id])
		}
		// The repeat model ends every request with the flag alone, which
		// reaches the client only when it asked for empty final responses.
		wantFinal := 0
		if i%2 == 0 {
			wantFinal = 1
		}
		if finals[id] != wantFinal {
			t.Errorf("%s: %d final responses, want %d", id, finals[id], wantFinal)
		}
	}
	st, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "repeat"})
	if err != nil {
		t.Fatal(err)
	}
	var success uint64
	for _, ms := range st.ModelStats {
		success += ms.InferenceStats.Success.Count
	}
	if success != n {
		t.Errorf("repeat: %d successful requests, want %d", success, n)
	}
}

// TestStreamErrorsNameNoServerPaths: the in-band errors of a stream's
// requests, to ordinary and decoupled models alike, carry status.Message's
// text (absolute server paths cut to their last element), as ModelInfer's
// errors do.
func TestStreamErrorsNameNoServerPaths(t *testing.T) {
	e := newEnv(t, map[string]string{"repeat": frontendtest.Repeat, "linear": frontendtest.Linear})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret := e.root + "/secret.bin"
	for _, model := range []string{"linear", "repeat"} {
		r := repeatRequest(model, []int32{1}, false)
		r.ModelName = model
		r.Inputs[0].Name = secret
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg := resp.GetErrorMessage(); msg == "" || strings.Contains(msg, e.root) || !strings.Contains(msg, ".../secret.bin") {
			t.Errorf("%s: error %q names the server path", model, msg)
		}
	}
}
