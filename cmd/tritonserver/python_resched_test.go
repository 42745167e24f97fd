package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// Request rescheduling (python_backend's set_release_flags with
// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) under the sequence batcher's
// iterative_sequence: the models under testdata/pyexamples/iter_* count
// their requests' iterations, the client sends plain requests without a
// correlation id.

// TestPythonReschedulingStreamsOneResponsePerIteration: a decoupled
// iterative model answers a request of n with responses 1..n, one per
// execute, over gRPC ModelStreamInfer (several clients at once over the
// model's single slot, so each request must free it when it ends) and
// HTTP generate_stream; a client that leaves mid-way ends its request's
// iterations, so the slot serves the next client.
func TestPythonReschedulingStreamsOneResponsePerIteration(t *testing.T) {
	s := startExamples(t, []string{"iter_stream"})
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for c := int32(1); c <= 5; c++ {
		wg.Add(1)
		go func(n int32) {
			defer wg.Done()
			var got []int32
			for _, r := range streamInfer(t, s, "iter_stream", n) {
				got = append(got, int32(binary.LittleEndian.Uint32(r.RawOutputContents[0])))
			}
			if want := fmt.Sprint(seqTo(n)); fmt.Sprint(got) != want {
				errs <- fmt.Errorf("iter_stream(%d) over gRPC: %v, want %s", n, got, want)
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	resp, err := http.Post(s.http+"/v2/models/iter_stream/generate_stream", "application/json", strings.NewReader(`{"IN": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := strings.Count(string(body), "data: ")
	if resp.StatusCode != 200 || events != 3 || !strings.Contains(string(body), `"OUT":1`) || !strings.Contains(string(body), `"OUT":3`) {
		t.Errorf("generate_stream: %d %s", resp.StatusCode, body)
	}

	// A request that would run for a billion iterations; its client goes
	// away after two responses.
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := s.client().ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&inference.ModelInferRequest{ModelName: "iter_stream",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, 1_000_000_000)}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if r, err := stream.Recv(); err != nil || r.ErrorMessage != "" {
			t.Fatalf("long request, response %d: %v %v", i, r, err)
		}
	}
	cancel()
	if got := streamInfer(t, s, "iter_stream", 2); len(got) != 2 {
		t.Errorf("after a client left mid-sequence: %d responses, want 2", len(got))
	}
}

func seqTo(n int32) []int32 {
	var out []int32
	for i := int32(1); i <= n; i++ {
		out = append(out, i)
	}
	return out
}

// TestPythonReschedulingAnswersOnceWhenNotDecoupled: a model that is not
// decoupled returns None for each rescheduled request and answers it
// once, after its last iteration, over HTTP and gRPC; a response returned
// for a rescheduled request fails it.
func TestPythonReschedulingAnswersOnceWhenNotDecoupled(t *testing.T) {
	s := startExamples(t, []string{"iter_count"})
	var wg sync.WaitGroup
	for n := int32(1); n <= 4; n++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			code, out := s.inferHTTP(t, "iter_count", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}, Data: []int32{n}}}})
			if code != 200 || out.output(t, "OUT")[0] != float64(n) {
				t.Errorf("iter_count(%d) over HTTP: %d %+v", n, code, out)
			}
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			g, err := s.client().ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "iter_count",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
				RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(n))}})
			if err != nil || int32(binary.LittleEndian.Uint32(rawOutput(t, g, "OUT"))) != n {
				t.Errorf("iter_count(%d) over gRPC: %v %v", n, g, err)
			}
		}()
	}
	wg.Wait()
	code, out := s.inferHTTP(t, "iter_count", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}, Data: []int32{-1}}}})
	if code != 500 || !strings.Contains(out.Error, "must have None in the returned list") {
		t.Errorf("a response for a rescheduled request: %d %q", code, out.Error)
	}
}

// TestPythonReschedulingRefusedWithoutIterativeSequence: set_release_flags
// with RESCHEDULE raises in a model without iterative_sequence.
func TestPythonReschedulingRefusedWithoutIterativeSequence(t *testing.T) {
	s := startExamples(t, []string{"resched_refused"})
	code, out := s.inferHTTP(t, "resched_refused", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}, Data: []int32{1}}}})
	if code != 500 || !strings.Contains(out.Error, "refused: ") || !strings.Contains(out.Error, "iterative_sequence: true") {
		t.Errorf("reschedule without iterative_sequence: %d %q", code, out.Error)
	}
}

// TestPythonReschedulingKeepsInitialState: the runs of a rescheduled
// request all see its sequence's initial implicit state, since a
// rescheduled run returns no response to take a state output from (as on
// Triton, whose python backend never updates a sequence's state).
func TestPythonReschedulingKeepsInitialState(t *testing.T) {
	s := startExamples(t, []string{"iter_state"})
	for _, n := range []int32{1, 3} {
		code, out := s.inferHTTP(t, "iter_state", map[string]any{"inputs": []jsonTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}, Data: []int32{n}}}})
		if code != 200 || !slices.Equal(out.output(t, "OUT"), []float64{float64(n), 0}) {
			t.Errorf("iter_state(%d): %d %+v, want OUT [%d 0]", n, code, out, n)
		}
	}
}
