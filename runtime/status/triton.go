package status

import (
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Text is one of Triton's error messages: the class Triton gives it, which
// decides its HTTP status and gRPC code (HTTPStatus, GRPCCode), and its
// wording as a fmt format. Clients match on these, so every validation
// error both frontends produce is built from one of them.
type Text struct {
	Code   backend.Code
	Format string
}

// New builds the error from t with args.
func (t Text) New(args ...any) *backend.Error { return backend.Errorf(t.Code, t.Format, args...) }

// The texts, each with where Triton produces it (triton-inference-server/
// core unless said otherwise). Formats that start with %s take
// RequestPrefix first, as core's InferenceRequest::LogRequest prefixes
// them.
var (
	// ModelRepositoryManager::GetModel around ModelLifeCycle::GetModel:
	// NOT_FOUND for a name or version the server does not know, and for a
	// model with no ready version; UNAVAILABLE for a version that exists
	// but is not ready.
	UnknownModel       = Text{backend.NotFound, "Request for unknown model: '%s' is not found"}
	UnknownVersion     = Text{backend.NotFound, "Request for unknown model: '%s' version %d is not found"}
	NoAvailableVersion = Text{backend.NotFound, "Request for unknown model: '%s' has no available versions"}
	VersionNotReady    = Text{backend.Unavailable, "Request for unknown model: '%s' version %d is not at ready state"}

	// Model::GetInput and Model::GetOutput (no request prefix).
	UnexpectedInput  = Text{backend.InvalidArg, "unexpected inference input '%s' for model '%s'"}
	UnexpectedOutput = Text{backend.InvalidArg, "unexpected inference output '%s' for model '%s'"}

	// InferenceRequest::AddOriginalInput.
	DuplicateInput = Text{backend.InvalidArg, "%sinput '%s' already exists in request"}
	// A gRPC request naming an output twice, in the project's facts'
	// wording of Triton's answer (the HTTP frontend has its own text,
	// DuplicateOutputHTTP).
	DuplicateOutput = Text{backend.InvalidArg, "output '%s' already exists in request"}

	// InferenceRequest::Normalize, in the order it checks.
	InputCount      = Text{backend.InvalidArg, "%sexpected %d inputs but got %d inputs for model '%s'. Got input(s) %s, but missing required input(s) %s. Please provide all required input(s)."}
	InputCountRange = Text{backend.InvalidArg, "%sexpected number of inputs between %d and %d but got %d inputs for model '%s'. Got input(s) %s, but missing required input(s) %s. Please provide all required input(s)."}
	NoBatchDim      = Text{backend.InvalidArg, "%sinput '%s' has no shape but model requires batch dimension for '%s'"}
	BatchMismatch   = Text{backend.InvalidArg, "%sinput '%s' batch size does not match other inputs for '%s'"}
	BatchTooLarge   = Text{backend.InvalidArg, "%sinference request batch-size must be <= %d for '%s'"}
	InputDataType   = Text{backend.InvalidArg, "%sinference input '%s' data-type is '%s', but model '%s' expects '%s'"}
	WildcardDim     = Text{backend.InvalidArg, "%sAll input dimensions should be specified for input '%s' for model '%s', got %s"}
	// The last operand is BatchNote for a batching model, "" otherwise
	// (Triton then ends the message with ". ").
	InputShape = Text{backend.InvalidArg, "%sunexpected shape for input '%s' for model '%s'. Expected %s, got %s. %s"}

	// The input byte-size checks of InferenceRequest (core's
	// input_byte_size_test and server's L0_input_validation).
	ByteSizeMismatch = Text{backend.InvalidArg, "%sinput byte size mismatch for input '%s' for model '%s'. Expected %d, got %d"}
	StringsTooFew    = Text{backend.InvalidArg, "%sexpected %d string elements for inference input '%s' for model '%s', got %d"}
	// Triton counts up to the first element past the shape, so the first
	// number is the expected count plus one.
	StringsTooMany  = Text{backend.InvalidArg, "%sunexpected number of string elements %d for inference input '%s' for model '%s', expecting %d"}
	StringIndicator = Text{backend.InvalidArg, "%sincomplete string length indicator for inference input '%s' for model '%s', expecting 4 bytes but only %d bytes available. Please make sure the string length indicator is in one buffer."}
	// Ours in Triton's style: the sources at hand do not show Triton's
	// text for an element whose bytes run past the data.
	StringTruncated = Text{backend.InvalidArg, "%sincomplete string for inference input '%s' for model '%s', expecting string of length %d but only %d bytes available"}
	// Triton's test (server's L0_http test_buffer_size_overflow) shows
	// only "causes total element count to exceed maximum size of"; the
	// rest is ours.
	ElementCountOverflow = Text{backend.InvalidArg, "%sinput '%s' with shape %s causes total element count to exceed maximum size of %d"}

	// The dynamic batcher's queue (PriorityQueue::PolicyQueue::Enqueue and
	// FinishStagingRejectedRequests) and its timeouts.
	QueueFull = Text{backend.Unavailable, "%sExceeds maximum queue size"}
	// A queued request past its queue policy's timeout (REJECT), in the
	// words of server's L0_dynamic_batcher timeout test.
	RequestTimeout = Text{backend.Unavailable, "Request timeout expired"}

	// InferenceRequest::Normalize for a raw binary request (HTTP with
	// Inference-Header-Content-Length: 0).
	RawInputCount   = Text{backend.InvalidArg, "%sRaw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration"}
	RawVariableDims = Text{backend.InvalidArg, "%sThe shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension"}
	RawBytesShape   = Text{backend.InvalidArg, "%sFor BYTE datatype raw input '%s', the model must have input shape [1]"}

	// server's src/http_server.cc: infer request parsing.
	DuplicateOutputHTTP = Text{backend.InvalidArg, "Duplicate output name '%s' is not allowed in a request"}
	JSONTooDeep         = Text{backend.InvalidArg, "JSON nesting depth exceeds maximum allowed limit (%d)"}
	DecoupledHTTP       = Text{backend.Unsupported, "HTTP end point doesn't support models with decoupled transaction policy"}

	// server's src/grpc/infer_handler.cc.
	DecoupledGRPC = Text{backend.Unsupported, "ModelInfer RPC doesn't support models with decoupled transaction policy"}
)

// BatchNote is the note Triton appends to InputShape for a model with a
// non-zero max_batch_size.
const BatchNote = "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."

// MaxJSONDepth is Triton's limit on the nesting of an HTTP request's JSON.
const MaxJSONDepth = 100

// RequestPrefix is what Triton puts before the messages of a request's
// errors: "[request id: <id>] ", with <id_unknown> for a request without
// an id.
func RequestPrefix(id string) string {
	if id == "" {
		id = "<id_unknown>"
	}
	return "[request id: " + id + "] "
}
