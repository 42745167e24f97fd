package repository

import (
	"math"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// reservedParameters are request parameters the server consumes itself
// (Triton turns them into properties of the request or of its response
// handling), so they are not handed to the model as parameters.
var reservedParameters = map[string]bool{
	"sequence_id":                        true,
	"sequence_start":                     true,
	"sequence_end":                       true,
	"priority":                           true,
	"timeout":                            true,
	"binary_data_output":                 true,
	"triton_enable_empty_final_response": true,
}

// ReservedParameter reports whether the request parameter name is one the
// server consumes (sequence ids and flags, priority, timeout, response
// formatting) rather than one for the model.
func ReservedParameter(name string) bool { return reservedParameters[name] }

// SequenceParameters reads a request's correlation id and flags from its
// parameters (sequence_id: an unsigned integer or a string; sequence_start
// and sequence_end: booleans), as both frontends carry them.
func SequenceParameters(params map[string]any) (backend.Sequence, error) {
	var seq backend.Sequence
	switch v := params["sequence_id"].(type) {
	case nil:
	case int64:
		if v < 0 {
			return seq, backend.Errorf(backend.InvalidArg, "parameter 'sequence_id' must be an unsigned integer or a string, got %d", v)
		}
		seq.ID = uint64(v)
	case uint64:
		seq.ID = v
	case string:
		seq.StrID = v
	default:
		return seq, backend.Errorf(backend.InvalidArg, "parameter 'sequence_id' must be an unsigned integer or a string")
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"sequence_start", &seq.Start}, {"sequence_end", &seq.End}} {
		switch v := params[f.name].(type) {
		case nil:
		case bool:
			*f.dst = v
		default:
			return seq, backend.Errorf(backend.InvalidArg, "parameter '%s' must be a boolean", f.name)
		}
	}
	return seq, nil
}

// Schedule sets req's Priority or Timeout from the request parameter name
// ("priority", or "timeout" in microseconds) with value v as a frontend
// decoded it (int64 or uint64); other names are left alone. A value of
// another kind, or negative, is refused.
func Schedule(req *backend.Request, name string, v any) error {
	if name != "priority" && name != "timeout" {
		return nil
	}
	var n uint64
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return backend.Errorf(backend.InvalidArg, "parameter '%s' must not be negative, got %d", name, x)
		}
		n = uint64(x)
	case uint64:
		n = x
	default:
		return backend.Errorf(backend.InvalidArg, "parameter '%s' must be an integer, got %v", name, v)
	}
	if name == "priority" {
		req.Priority = n
	} else {
		req.Timeout = time.Duration(min(n, uint64(math.MaxInt64/1000))) * time.Microsecond
	}
	return nil
}
