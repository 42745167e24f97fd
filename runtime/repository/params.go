package repository

import "github.com/tritonbuild/tritonbuild/runtime/backend"

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
