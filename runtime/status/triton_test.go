package status

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// TestTritonTexts holds each of Triton's texts to the HTTP status and gRPC
// code Triton answers it with (its server's HttpCodeFromError and
// GrpcStatusUtil::CodeToStatus applied to the core's code), written here
// as facts, and checks that each renders as Triton's does.
func TestTritonTexts(t *testing.T) {
	p := RequestPrefix("")
	cases := []struct {
		name string
		text Text
		args []any
		http int
		grpc codes.Code
		want string
	}{
		{"unknown model", UnknownModel, []any{"m"}, 404, codes.NotFound, "Request for unknown model: 'm' is not found"},
		{"unknown version", UnknownVersion, []any{"m", int64(3)}, 404, codes.NotFound, "Request for unknown model: 'm' version 3 is not found"},
		{"no ready version", NoAvailableVersion, []any{"m"}, 404, codes.NotFound, "Request for unknown model: 'm' has no available versions"},
		{"version not ready", VersionNotReady, []any{"m", int64(3)}, 503, codes.Unavailable, "Request for unknown model: 'm' version 3 is not at ready state"},
		{"unexpected input", UnexpectedInput, []any{"X", "m"}, 400, codes.InvalidArgument, "unexpected inference input 'X' for model 'm'"},
		{"unexpected output", UnexpectedOutput, []any{"Y", "m"}, 400, codes.InvalidArgument, "unexpected inference output 'Y' for model 'm'"},
		{"duplicate input", DuplicateInput, []any{p, "X"}, 400, codes.InvalidArgument, "[request id: <id_unknown>] input 'X' already exists in request"},
		{"input count", InputCount, []any{p, 2, 1, "m", "['A']", "['B']"}, 400, codes.InvalidArgument,
			"[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'm'. Got input(s) ['A'], but missing required input(s) ['B']. Please provide all required input(s)."},
		{"input count range", InputCountRange, []any{p, 3, 4, 0, "m", "[]", "['A','B','C']"}, 400, codes.InvalidArgument,
			"[request id: <id_unknown>] expected number of inputs between 3 and 4 but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['A','B','C']. Please provide all required input(s)."},
		{"data type", InputDataType, []any{RequestPrefix("r1"), "INPUT__0", "FP64", "simple_linear", "FP32"}, 400, codes.InvalidArgument,
			"[request id: r1] inference input 'INPUT__0' data-type is 'FP64', but model 'simple_linear' expects 'FP32'"},
		{"batch", BatchTooLarge, []any{p, 8, "m"}, 400, codes.InvalidArgument, "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'm'"},
		{"byte size", ByteSizeMismatch, []any{p, "INPUT0", "pt_identity", 32, 40}, 400, codes.InvalidArgument,
			"[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'pt_identity'. Expected 32, got 40"},
		{"queue full", QueueFull, []any{p}, 503, codes.Unavailable, "[request id: <id_unknown>] Exceeds maximum queue size"},
		{"duplicate output (HTTP)", DuplicateOutputHTTP, []any{"OUTPUT0"}, 400, codes.InvalidArgument, "Duplicate output name 'OUTPUT0' is not allowed in a request"},
		{"JSON depth", JSONTooDeep, []any{MaxJSONDepth}, 400, codes.InvalidArgument, "JSON nesting depth exceeds maximum allowed limit (100)"},
		{"decoupled (HTTP)", DecoupledHTTP, nil, 501, codes.Unimplemented, "HTTP end point doesn't support models with decoupled transaction policy"},
		{"decoupled (gRPC)", DecoupledGRPC, nil, 501, codes.Unimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy"},
	}
	for _, c := range cases {
		err := c.text.New(c.args...)
		if got := HTTPStatus(err); got != c.http {
			t.Errorf("%s: HTTP %d, want %d", c.name, got, c.http)
		}
		if got := GRPCCode(err); got != c.grpc {
			t.Errorf("%s: gRPC %v, want %v", c.name, got, c.grpc)
		}
		if err.Error() != c.want {
			t.Errorf("%s: %q\nwant %q", c.name, err.Error(), c.want)
		}
	}
}
