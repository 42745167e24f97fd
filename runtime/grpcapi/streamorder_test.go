package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestStreamSequencesPipelined sends sequences on one stream without
// waiting for responses, interleaved, as Triton's stream sequence client
// example does: the requests reach the sequence batcher in the order they
// were sent, and each response comes back in that order with the running
// sum of its sequence, while the requests still run concurrently.
func TestStreamSequencesPipelined(t *testing.T) {
	e := newEnv(t, map[string]string{"direct": frontendtest.SeqDirect, "oldest": frontendtest.SeqOldest})
	for _, model := range []string{"direct", "oldest"} {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := e.client.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const seqs, steps = 3, 12
		var want []int32
		sums := make([]int32, seqs)
		for i := 0; i < steps; i++ {
			for s := 0; s < seqs; s++ {
				v := int32(100*s + i + 1)
				sums[s] += v
				want = append(want, sums[s])
				r := seqRequest(model, strID(fmt.Sprint(model, "-", s)), i == 0, i == steps-1, v)
				r.Id = fmt.Sprint(s, "/", i)
				if err := stream.Send(r); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("%s: response %d: %v", model, k, err)
			}
			if msg := resp.GetErrorMessage(); msg != "" {
				t.Errorf("%s: response %d (%s): %s", model, k, resp.GetInferResponse().GetId(), msg)
				continue
			}
			ir := resp.GetInferResponse()
			if wantID := fmt.Sprint(k%seqs, "/", k/seqs); ir.GetId() != wantID {
				t.Errorf("%s: response %d is request %s's, want %s's (responses in request order)", model, k, ir.GetId(), wantID)
				continue
			}
			raw := ir.GetRawOutputContents()
			if len(raw) != 1 || len(raw[0]) != 4 || int32(binary.LittleEndian.Uint32(raw[0])) != w {
				t.Errorf("%s: response %d (%s): %v, want the sum %d", model, k, ir.GetId(), raw, w)
			}
		}
		cancel()
		// Queued in order is not run one at a time: the stream's requests
		// still run concurrently, and the sequences' steps share batches.
		st, err := e.client.ModelStatistics(context.Background(), &pb.ModelStatisticsRequest{Name: model})
		if err != nil {
			t.Fatal(err)
		}
		ms := st.GetModelStats()[0]
		if n := ms.GetExecutionCount(); n >= seqs*steps {
			t.Errorf("%s: %d requests in %d executions, want fewer (requests of a stream run one at a time)", model, seqs*steps, n)
		}
	}
}

// TestStreamResponsesInRequestOrder: responses to an ordinary model come
// back in the order of their requests on the stream, as from Triton's
// stream handler, even when a later request finishes first.
func TestStreamResponsesInRequestOrder(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		r := &pb.ModelInferRequest{ModelName: "linear", Id: fmt.Sprint(i), Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, float32(i)}},
		}}}
		if i%7 == 3 {
			r.Inputs[0].Name = "NOPE" // refused at once, ahead of the requests before it
		}
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := resp.GetInferResponse().GetId(); got != fmt.Sprint(i) {
			t.Fatalf("response %d is request %s's", i, got)
		}
		if failed := resp.GetErrorMessage() != ""; failed != (i%7 == 3) {
			t.Errorf("response %d: error %q", i, resp.GetErrorMessage())
		}
	}
}
