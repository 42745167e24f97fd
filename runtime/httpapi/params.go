package httpapi

import (
	"strconv"
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
