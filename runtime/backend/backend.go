// Package backend defines the small contract between the serving core
// (repository, scheduler, frontends) and the code that actually runs a model
// (libtorch through cgo, python stub processes, or a pure-Go fake in tests).
//
// The core never imports a concrete backend: cmd/tritonserver registers the
// backends it was built with, keyed by Triton's backend name ("pytorch",
// "python").
package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"
)

// DataType is a tensor element type as named on Triton's wire ("FP32",
// "INT64", "BYTES", ...), without the config's "TYPE_" prefix.
type DataType string

// Wire data types. BYTES is TYPE_STRING in config.pbtxt.
const (
	Bool   DataType = "BOOL"
	Uint8  DataType = "UINT8"
	Uint16 DataType = "UINT16"
	Uint32 DataType = "UINT32"
	Uint64 DataType = "UINT64"
	Int8   DataType = "INT8"
	Int16  DataType = "INT16"
	Int32  DataType = "INT32"
	Int64  DataType = "INT64"
	FP16   DataType = "FP16"
	FP32   DataType = "FP32"
	FP64   DataType = "FP64"
	BF16   DataType = "BF16"
	Bytes  DataType = "BYTES"
)

// Size returns the element size in bytes, or 0 for BYTES (variable length)
// and unknown types.
func (d DataType) Size() int {
	switch d {
	case Bool, Uint8, Int8:
		return 1
	case Uint16, Int16, FP16, BF16:
		return 2
	case Uint32, Int32, FP32:
		return 4
	case Uint64, Int64, FP64:
		return 8
	}
	return 0
}

// AppendUint appends the low d.Size() bytes of v to b in the tensor data
// layout (little-endian): the encoding of one integer element of d, signed
// ones passed as their two's complement. Types other than 1, 2 or 4 bytes
// get all 8 bytes, so callers pass only fixed-size integer types.
func (d DataType) AppendUint(b []byte, v uint64) []byte {
	switch d.Size() {
	case 1:
		return append(b, byte(v))
	case 2:
		return binary.LittleEndian.AppendUint16(b, uint16(v))
	case 4:
		return binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return binary.LittleEndian.AppendUint64(b, v)
}

// Valid reports whether d is one of the wire data types.
func (d DataType) Valid() bool { return d == Bytes || d.Size() > 0 }

// Tensor is one named tensor. Data holds the elements in row-major,
// little-endian order; for BYTES each element is a 4-byte little-endian length
// followed by that many bytes (Triton's binary encoding). Backends must not
// keep references to Data after Execute returns unless they copied it.
type Tensor struct {
	Name     string
	DataType DataType
	Shape    []int64
	Data     []byte
}

// NumElements is the product of Shape (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// TensorSpec is an input or output as declared in config.pbtxt. Dims exclude
// the batch dimension when the model's MaxBatchSize > 0.
type TensorSpec struct {
	Name     string
	DataType DataType
	Dims     []int64
	Optional bool
	// Ragged is allow_ragged_batch: requests whose shapes of this input
	// differ may be batched together; a backend that runs a batch at once
	// concatenates their elements into one 1-D tensor (Triton's libtorch
	// backend does the same).
	Ragged bool
}

// ModelSpec is everything a backend needs to load one version of a model,
// already resolved by the repository (paths absolute, config validated).
type ModelSpec struct {
	Name         string
	Version      int64
	ModelDir     string // <repo>/<model>
	VersionDir   string // <repo>/<model>/<version>; the working directory for python models
	Repository   string // <repo>
	Filename     string // default_model_filename or the backend's default (model.pt, model.py)
	MaxBatchSize int
	Inputs       []TensorSpec
	Outputs      []TensorSpec
	// Parameters are config.pbtxt's parameters {key, value: {string_value}}.
	Parameters map[string]string
	// BackendConfig holds --backend-config=<this backend>,k=v settings.
	BackendConfig map[string]string
	// InstancePolicies holds, per instance index, its instance group's
	// host policy (--host-policy=<policy>,cpu-cores=...,numa-node=...);
	// nil, or a zero entry, applies nothing (InstancePolicy). Only a
	// backend that is a CPUPlacer is given a model with any.
	InstancePolicies []HostPolicy
	// OpLibraries are model_operations.op_library_filename entries, absolute.
	OpLibraries []string
	// ConfigJSON is the model config in Triton's JSON form, as handed to
	// python models in initialize(args["model_config"]).
	ConfigJSON []byte
	// BatchInputs and BatchOutputs are the config's batch_input and
	// batch_output, validated (sources are required inputs, targets of
	// batch outputs are outputs).
	BatchInputs  []BatchInput
	BatchOutputs []BatchOutput
	// SequenceInputs are the tensors the sequence batcher adds to every
	// request of a sequence model: its control inputs (shape [1] per row)
	// and implicit state inputs, in config order. SequenceOutputs are the
	// implicit state outputs the config does not list under output. A
	// backend that binds tensors by position (pytorch) places them after
	// the config's inputs and outputs; others can ignore them.
	SequenceInputs  []TensorSpec
	SequenceOutputs []TensorSpec
	// SequenceControls is how many of SequenceInputs, from the first, are
	// control inputs; the rest are state inputs (pytorch names them by
	// different rules).
	SequenceControls int
}

// Request is one inference request as seen by a backend. With dynamic
// batching an instance receives several at once.
type Request struct {
	// ID is the client's request id ("" when it sent none); the python
	// backend hands it to model.py as request_id().
	ID string
	// Trace, when not nil, receives the request's trace activities from
	// the serving core (see Trace); backends ignore it.
	Trace  Trace
	Inputs []Tensor
	// Outputs names the requested outputs; empty means all declared outputs.
	Outputs []string
	// Parameters are the request's parameters (Triton's InferParameter
	// and the JSON "parameters" object) other than those the server
	// consumes itself; values are string, int64 (uint64 for integers over
	// the int64 range), bool or float64. nil when
	// the request has none.
	Parameters map[string]any
	// Sender, set by the scheduler for a model with the decoupled
	// transaction policy only, takes the request's responses (see Sender).
	Sender Sender
	// Ctx, set by the scheduler, is the context of the client's call: it
	// ends when the client cancels or disconnects, which a python model
	// sees as request.is_cancelled(). nil outside a scheduled request.
	Ctx context.Context
	// Sequence is the request's correlation id and flags (the sequence_id,
	// sequence_start and sequence_end parameters), used by the sequence
	// batcher; the zero value is a request outside any sequence.
	Sequence Sequence
	// Priority and Timeout are Triton's request priority (1 is the
	// highest level; 0, or a level the model lacks, means its default
	// level) and timeout parameter: the scheduler applies them with the
	// model's queue policy. Backends ignore them.
	Priority uint64
	Timeout  time.Duration
}

// Input is the request's input called name, or nil when it carries none.
func (r *Request) Input(name string) *Tensor {
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

// Sequence identifies the sequence a request belongs to. A correlation id
// is either an unsigned integer (ID) or a string (StrID), never both.
type Sequence struct {
	ID         uint64
	StrID      string
	Start, End bool
}

// InSequence reports whether a correlation id is set (Triton: non-zero or
// non-empty).
func (q Sequence) InSequence() bool { return q.ID != 0 || q.StrID != "" }

// String is the correlation id as Triton prints it in messages.
func (q Sequence) String() string {
	if q.StrID != "" {
		return q.StrID
	}
	return strconv.FormatUint(q.ID, 10)
}

// Trace receives a traced request's activities with Triton's names
// (QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
// COMPUTE_END, ...). It may be called from another goroutine than the
// request's, so implementations synchronize.
type Trace interface {
	Activity(name string, at time.Time)
}

// Response carries the outputs for one request, or the error for it alone.
type Response struct {
	Outputs []Tensor
	Err     error
	// Parameters are the response's parameters (a python model's
	// InferenceResponse(parameters=...)): values are string, int64, bool
	// or float64. nil when it has none.
	Parameters map[string]any
	// Reschedule says the model released the request with Triton's
	// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (a model with the sequence
	// batcher's iterative_sequence only): the request is not answered but
	// executed again, and the response carries nothing else.
	Reschedule bool
}

// Backend loads model instances. One Backend value serves every model that
// names it; it must be safe for concurrent use.
type Backend interface {
	// NewInstance loads instance number idx (0-based, across the model's
	// instance groups) of the model described by spec.
	NewInstance(ctx context.Context, spec *ModelSpec, idx int) (Instance, error)
}

// AutoCompleter is implemented by backends that can produce or complete a
// model configuration from the model itself (Triton's auto-complete). The
// repository asks it for every model of the backend unless auto-completion
// is off (--disable-auto-complete-config, --strict-model-config).
type AutoCompleter interface {
	// AutoComplete returns the completed configuration in Triton's JSON
	// form, or nil when the model leaves it as it is.
	AutoComplete(ctx context.Context, req AutoCompleteRequest) ([]byte, error)
}

// AutoCompleteRequest is what a backend needs to complete one model's
// configuration.
type AutoCompleteRequest struct {
	ModelDir   string // <repo>/<model>, resolved
	VersionDir string // the highest version directory, resolved
	// BackendConfig holds --backend-config settings of the backend.
	BackendConfig map[string]string
	// ConfigJSON is the configuration so far (config.pbtxt, the load
	// request's override, or only name and backend) in Triton's JSON form.
	ConfigJSON []byte
}

// CPUPlacer is implemented by backends that apply each instance's host
// policy (ModelSpec.InstancePolicies): its CPUs and its memory's NUMA
// nodes. Triton applies a host policy to the thread that creates an
// instance, and what that thread starts inherits it; here only an
// instance with a thread or process of its own (a python stub, a pytorch
// instance's forward thread) can be confined, so a model with a host
// policy loads only on a backend whose PlacesInstances is true.
type CPUPlacer interface {
	PlacesInstances() bool
}

// Instance is one loaded copy of a model. The scheduler never calls Execute
// concurrently on the same Instance.
type Instance interface {
	// Execute runs the requests as one batch and returns exactly one
	// Response per Request, in order. A non-nil error fails every request of
	// the batch (for example a crashed python stub).
	Execute(ctx context.Context, reqs []*Request) ([]*Response, error)
	// Close releases the instance (Triton's finalize).
	Close() error
}

// Error is a backend or request error that carries the status class the
// frontends map to HTTP and gRPC codes in one place. Err, when set, is the
// cause: errors.Is and errors.As see through an *Error to it (a cancelled
// context, an *os.PathError, an *exec.ExitError), while Code alone decides
// the status.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// Code classifies errors like Triton does.
type Code int

// Error classes; frontends map them to HTTP 400/404/503/501/500 (413 for
// TooLarge, 415 for UnsupportedMedia, 403 for Forbidden) and to the
// corresponding gRPC codes (runtime/status).
const (
	InvalidArg Code = iota
	NotFound
	Unavailable
	Unsupported
	Internal
	AlreadyExists
	// TooLarge: a request over a configured size limit
	// (--http-max-input-size), or one whose response would be over
	// --max-response-size.
	TooLarge
	// UnsupportedMedia: a request body in an encoding the server does not
	// read (an unknown Content-Encoding).
	UnsupportedMedia
	// Forbidden: a request to an API restricted to clients that send a
	// header this one lacks (--http-restricted-api and
	// --grpc-restricted-protocol).
	Forbidden
	// Unknown and Cancelled are the classes of pb_utils.TritonError's
	// UNKNOWN and CANCELLED codes (Triton's TRITONSERVER_ERROR_UNKNOWN and
	// _CANCELLED): HTTP 400, gRPC UNKNOWN and CANCELLED.
	Unknown
	Cancelled
)

// Errorf builds an *Error with a message formatted like fmt.Errorf's:
// operands of %w become its cause (several are joined).
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Msg: err.Error(), Err: errors.Unwrap(err)}
	// errors.Unwrap sees only a single %w; fmt.Errorf's result for several
	// has Unwrap() []error instead.
	var multi interface{ Unwrap() []error }
	if e.Err == nil && errors.As(err, &multi) {
		e.Err = errors.Join(multi.Unwrap()...)
	}
	return e
}

// Confine resolves name, a file a model's configuration names (relative
// names are taken from base), following symlinks, and returns its absolute
// path if it lies inside root (the model directory, itself resolved);
// otherwise, or when it does not exist, it returns an InvalidArg error
// that names the file as the configuration gave it and no server path.
// Every file a config or a load request names goes through here, so that a
// config override cannot make the server load, run or read files outside
// the model's directory.
func Confine(root, base, name, what string) (string, error) {
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", Errorf(InvalidArg, "%s '%s': the model directory cannot be resolved", what, name)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Code: InvalidArg, Msg: fmt.Sprintf("%s '%s' not found in the model directory", what, name), Err: fs.ErrNotExist}
		}
		return "", Errorf(InvalidArg, "%s '%s' cannot be resolved", what, name)
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(rel) {
		return "", Errorf(InvalidArg, "%s '%s' resolves outside the model directory; only files inside it may be named", what, name)
	}
	return real, nil
}
