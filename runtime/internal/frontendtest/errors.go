package frontendtest

import (
	"encoding/binary"

	"google.golang.org/grpc/codes"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// ErrorCase is one request both frontends must refuse as Triton does: the
// HTTP status and gRPC code of Triton's answer and its whole message.
// They are written down here as facts from Triton's sources (core's
// infer_request.cc, model.cc and model_lifecycle.cc, server's
// http_server.cc and its L0_http and L0_input_validation tests), not
// derived from this server's mapping, so that the tests fail when either
// drifts.
type ErrorCase struct {
	Name    string
	Model   string // the model the request names (served by ErrorModels)
	Version string // "" for the highest ready version
	ID      string // the request's id
	// Inputs are sent with their data as binary tensors (HTTP) or raw
	// contents (gRPC), so that the data reaches the model's checks as is.
	Inputs  []backend.Tensor
	Outputs []string // requested outputs
	HTTP    int
	GRPC    codes.Code
	// Message is Triton's text on both protocols; HTTPMessage and
	// GRPCMessage, when set, replace it on one of them (Triton's frontends
	// refuse some requests themselves, in their own words).
	Message, HTTPMessage, GRPCMessage string
}

// Want returns the message expected on HTTP (grpc false) or gRPC.
func (c ErrorCase) Want(grpc bool) string {
	switch {
	case grpc && c.GRPCMessage != "":
		return c.GRPCMessage
	case !grpc && c.HTTPMessage != "":
		return c.HTTPMessage
	}
	return c.Message
}

// ErrorModels are the models the error cases name, for NewRepo: Linear,
// Ident, Broken and the decoupled Repeat.
func ErrorModels() map[string]string {
	return map[string]string{"linear": Linear, "ident": Ident, "broken": Broken, "repeat": Repeat}
}

// batchNote is what Triton appends to a shape error of a batching model.
const batchNote = "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."

// ErrorCases is the table of Triton's answers both frontends are tested
// against.
func ErrorCases() []ErrorCase {
	f32 := func(name string, shape []int64, n int) backend.Tensor {
		return backend.Tensor{Name: name, DataType: backend.FP32, Shape: shape, Data: make([]byte, 4*n)}
	}
	row := f32("INPUT__0", []int64{1, 4}, 4)
	strs := func(shape []int64, elems ...string) backend.Tensor {
		var b []byte
		for _, e := range elems {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
			b = append(b, e...)
		}
		return backend.Tensor{Name: "S", DataType: backend.Bytes, Shape: shape, Data: b}
	}
	identRest := []backend.Tensor{
		{Name: "I", DataType: backend.Int32, Shape: []int64{2, 2}, Data: make([]byte, 16)},
		{Name: "B", DataType: backend.Bool, Shape: []int64{2}, Data: make([]byte, 2)},
	}
	ident := func(s backend.Tensor) []backend.Tensor { return append([]backend.Tensor{s}, identRest...) }
	const unknownID = "[request id: <id_unknown>] "
	bad := codes.InvalidArgument
	return []ErrorCase{
		{Name: "unknown model", Model: "nope", Inputs: []backend.Tensor{row}, HTTP: 404, GRPC: codes.NotFound,
			Message: "Request for unknown model: 'nope' is not found"},
		{Name: "unknown version", Model: "linear", Version: "7", Inputs: []backend.Tensor{row}, HTTP: 404, GRPC: codes.NotFound,
			Message: "Request for unknown model: 'linear' version 7 is not found"},
		{Name: "no ready version", Model: "broken", Inputs: []backend.Tensor{row}, HTTP: 404, GRPC: codes.NotFound,
			Message: "Request for unknown model: 'broken' has no available versions"},
		{Name: "version not ready", Model: "broken", Version: "2", Inputs: []backend.Tensor{row}, HTTP: 503, GRPC: codes.Unavailable,
			Message: "Request for unknown model: 'broken' version 2 is not at ready state"},
		{Name: "wrong datatype", Model: "linear", Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP64, Shape: []int64{1, 4}, Data: make([]byte, 32)}},
			HTTP: 400, GRPC: bad, Message: unknownID + "inference input 'INPUT__0' data-type is 'FP64', but model 'linear' expects 'FP32'"},
		{Name: "request id in the message", Model: "linear", ID: "req-7", Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP64, Shape: []int64{1, 4}, Data: make([]byte, 32)}},
			HTTP: 400, GRPC: bad, Message: "[request id: req-7] inference input 'INPUT__0' data-type is 'FP64', but model 'linear' expects 'FP32'"},
		{Name: "no inputs", Model: "linear", HTTP: 400, GRPC: bad,
			Message: unknownID + "expected 1 inputs but got 0 inputs for model 'linear'. Got input(s) [], but missing required input(s) ['INPUT__0']. Please provide all required input(s)."},
		{Name: "missing required among optional", Model: "ident", Inputs: identRest[1:], HTTP: 400, GRPC: bad,
			Message: unknownID + "expected number of inputs between 3 and 6 but got 1 inputs for model 'ident'. Got input(s) ['B'], but missing required input(s) ['S','I']. Please provide all required input(s)."},
		// Triton's rendering of an empty missing list is "]".
		{Name: "too many inputs", Model: "linear", Inputs: []backend.Tensor{row, f32("EXTRA", []int64{1, 4}, 4)}, HTTP: 400, GRPC: bad,
			Message: unknownID + "expected 1 inputs but got 2 inputs for model 'linear'. Got input(s) ['INPUT__0','EXTRA'], but missing required input(s) ]. Please provide all required input(s)."},
		{Name: "unknown input", Model: "linear", Inputs: []backend.Tensor{f32("EXTRA", []int64{1, 4}, 4)}, HTTP: 400, GRPC: bad,
			Message: "unexpected inference input 'EXTRA' for model 'linear'"},
		{Name: "unknown output", Model: "linear", Inputs: []backend.Tensor{row}, Outputs: []string{"NOPE"}, HTTP: 400, GRPC: bad,
			Message: "unexpected inference output 'NOPE' for model 'linear'"},
		{Name: "duplicate input", Model: "linear", Inputs: []backend.Tensor{row, row}, HTTP: 400, GRPC: bad,
			Message: unknownID + "input 'INPUT__0' already exists in request"},
		{Name: "duplicate output", Model: "linear", Inputs: []backend.Tensor{row}, Outputs: []string{"OUTPUT__0", "OUTPUT__0"}, HTTP: 400, GRPC: bad,
			HTTPMessage: "Duplicate output name 'OUTPUT__0' is not allowed in a request",
			GRPCMessage: "output 'OUTPUT__0' already exists in request"},
		{Name: "wrong shape, batching", Model: "linear", Inputs: []backend.Tensor{f32("INPUT__0", []int64{1, 5}, 5)}, HTTP: 400, GRPC: bad,
			Message: unknownID + "unexpected shape for input 'INPUT__0' for model 'linear'. Expected [-1,4], got [1,5]. " + batchNote},
		{Name: "wrong shape, not batching", Model: "ident", Inputs: []backend.Tensor{strs([]int64{1}, "a"),
			{Name: "I", DataType: backend.Int32, Shape: []int64{2, 3}, Data: make([]byte, 24)}, identRest[1]}, HTTP: 400, GRPC: bad,
			Message: unknownID + "unexpected shape for input 'I' for model 'ident'. Expected [2,2], got [2,3]. "},
		{Name: "no batch dimension", Model: "linear", Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{}, Data: make([]byte, 4)}},
			HTTP: 400, GRPC: bad, Message: unknownID + "input 'INPUT__0' has no shape but model requires batch dimension for 'linear'"},
		{Name: "batch too large", Model: "linear", Inputs: []backend.Tensor{f32("INPUT__0", []int64{9, 4}, 36)}, HTTP: 400, GRPC: bad,
			Message: unknownID + "inference request batch-size must be <= 8 for 'linear'"},
		{Name: "byte size mismatch", Model: "linear", Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{1, 4}, Data: make([]byte, 12)}},
			HTTP: 400, GRPC: bad, Message: unknownID + "input byte size mismatch for input 'INPUT__0' for model 'linear'. Expected 16, got 12"},
		{Name: "too few strings", Model: "ident", Inputs: ident(strs([]int64{3}, "a", "b")), HTTP: 400, GRPC: bad,
			Message: unknownID + "expected 3 string elements for inference input 'S' for model 'ident', got 2"},
		{Name: "too many strings", Model: "ident", Inputs: ident(strs([]int64{1}, "a", "b")), HTTP: 400, GRPC: bad,
			Message: unknownID + "unexpected number of string elements 2 for inference input 'S' for model 'ident', expecting 1"},
		{Name: "cut string length", Model: "ident", Inputs: ident(backend.Tensor{Name: "S", DataType: backend.Bytes, Shape: []int64{1}, Data: []byte{1, 0}}), HTTP: 400, GRPC: bad,
			Message: unknownID + "incomplete string length indicator for inference input 'S' for model 'ident', expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is in one buffer."},
		{Name: "decoupled model", Model: "repeat", Inputs: []backend.Tensor{{Name: "IN", DataType: backend.Int32, Shape: []int64{1}, Data: make([]byte, 4)}},
			HTTP: 501, GRPC: codes.Unimplemented,
			HTTPMessage: "HTTP end point doesn't support models with decoupled transaction policy",
			GRPCMessage: "ModelInfer RPC doesn't support models with decoupled transaction policy"},
	}
}
