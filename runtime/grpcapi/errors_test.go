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

// TestParameterTypes: ModelInfer's parameters are refused as Triton's
// SetInferenceRequestMetadata refuses them (grpc/infer_handler.cc,
// INVALID_ARGUMENT, before the inputs are read): the parameters it
// consumes must have their types, keys starting with "triton_" are its
// own but for triton_enable_empty_final_response (a bool), and any other
// parameter is an int64, a bool, a string or a double.
func TestParameterTypes(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear})
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	u64 := func(v uint64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: v}}
	}
	bl := &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}
	str := &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "x"}}
	dbl := &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 0.5}}
	req := func(name string, p *pb.InferParameter) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "linear", Parameters: map[string]*pb.InferParameter{name: p},
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}},
			RawInputContents: [][]byte{make([]byte, 16)}}
	}
	for _, c := range []struct {
		name string
		p    *pb.InferParameter
		msg  string
	}{
		{"sequence_id", bl, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"sequence_id", u64(3), "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"sequence_start", i64(1), "invalid value type for 'sequence_start' parameter, expected bool_param."},
		{"sequence_end", str, "invalid value type for 'sequence_end' parameter, expected bool_param."},
		{"priority", i64(-1), "invalid value for 'priority', expected value >= 0."},
		{"priority", dbl, "invalid value type for 'priority' parameter, expected int64_param or uint64_param."},
		{"timeout", u64(5), "invalid value type for 'timeout' parameter, expected int64_param."},
		{"triton_mine", bl, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"},
		{"triton_final_response", bl, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"},
		{"triton_enable_empty_final_response", i64(1), "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."},
		{"p", u64(1), "invalid value type for 'p' parameter, expected int64_param, bool_param, or string_param."},
		{"p", &pb.InferParameter{}, "invalid value type for 'p' parameter, expected int64_param, bool_param, or string_param."},
	} {
		r := req(c.name, c.p)
		r.Inputs[0].Datatype = "NOPE" // the parameters are read first
		_, err := e.client.ModelInfer(context.Background(), r)
		if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != c.msg {
			t.Errorf("%s %v: %v, want InvalidArgument %q", c.name, c.p, err, c.msg)
		}
	}
	for _, c := range []struct {
		name string
		p    *pb.InferParameter
	}{{"priority", u64(1)}, {"priority", i64(1)}, {"timeout", i64(-1)}, {"triton_enable_empty_final_response", bl}, {"p", dbl}, {"p", str}, {"p", i64(-2)}} {
		if _, err := e.client.ModelInfer(context.Background(), req(c.name, c.p)); err != nil {
			t.Errorf("%s %v: %v", c.name, c.p, err)
		}
	}
}
