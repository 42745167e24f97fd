package httpapi

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

// scalar reads a parameter value: a string, a boolean or a number
// (int64, uint64 past the int64 range, else float64), as Triton's
// parameters are; any other value is skipped and reads as nil, for the
// caller to refuse.
func (p *scanner) scalar() (any, error) {
	c, err := p.next()
	if err != nil {
		return nil, err
	}
	switch {
	case c == '"':
		return p.str()
	case c == 't' || c == 'f':
		var b bool
		err := p.boolean(&b)
		return b, err
	case c == '-' || (c >= '0' && c <= '9'):
		tok, err := p.number()
		if err != nil {
			return nil, err
		}
		text := unsafe.String(&tok[0], len(tok))
		if v, err := strconv.ParseInt(text, 10, 64); err == nil {
			return v, nil
		}
		if v, err := strconv.ParseUint(text, 10, 64); err == nil {
			return v, nil
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, p.errorf("invalid number")
		}
		return v, nil
	}
	// Objects, arrays and null are not parameter values.
	return nil, p.skip()
}

// invalidParameter is Triton's refusal of a request parameter whose value
// is not a string, a boolean or a number (http_server.cc,
// SetTritonParameterFromJsonParameter, for /infer's "parameters" and
// generate's members alike), 400. Its text names only 'int', 'bool' and
// 'string', though Triton takes other numbers as double parameters.
func invalidParameter(name string) error {
	return backend.Errorf(backend.InvalidArg, "parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", name)
}

// parameterError is Triton's refusal of the /infer request parameter
// name whose value scalar read as v (nil for an object, an array or
// null), nil when Triton takes it (http_server.cc, ParseJsonTritonParams).
// A parameter the server consumes must have its type, or Triton's JSON
// library fails to read it, INTERNAL (500), behind "Unable to parse
// 'name'": sequence_id an unsigned integer or else a string (read
// second, so its words are the string's), sequence_start, sequence_end
// and binary_data_output booleans, priority and timeout unsigned
// integers. Keys starting with "triton_" are Triton's own (400, none
// allowed over HTTP). Any other value must be a string, a boolean or a
// number (400).
func parameterError(name string, v any) error {
	var ok bool
	var got string
	switch name {
	case "sequence_id":
		switch x := v.(type) {
		case int64:
			ok = x >= 0
		case uint64, string:
			ok = true
		}
		got = "attempt to access JSON non-string as string"
	case "sequence_start", "sequence_end", "binary_data_output":
		_, ok = v.(bool)
		got = "attempt to access JSON non-boolean as boolean"
	case "priority", "timeout":
		switch x := v.(type) {
		case int64:
			ok = x >= 0
		case uint64:
			ok = true
		}
		got = "attempt to access JSON non-unsigned-integer as unsigned-integer"
	default:
		if strings.HasPrefix(name, "triton_") {
			return backend.Errorf(backend.InvalidArg, "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
		}
		if v == nil {
			return invalidParameter(name)
		}
		return nil
	}
	if ok {
		return nil
	}
	return backend.Errorf(backend.Internal, "Unable to parse '%s': %s", name, got)
}

// modelParameters are the request parameters for the model: all but the
// ones the server consumes.
func modelParameters(all map[string]any) map[string]any {
	var out map[string]any
	for k, v := range all {
		if repository.ReservedParameter(k) {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(all))
		}
		out[k] = v
	}
	return out
}

// badID is Triton's refusal of a request "id" that is not a string
// (http_server.cc, ParseJsonTritonRequestID, on /infer and generate
// alike): its JSON library's error, INTERNAL (500), behind "Unable to
// parse 'id'".
func badID() error {
	return backend.Errorf(backend.Internal, "Unable to parse 'id': attempt to access JSON non-string as string")
}
