package backend

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// JSONParameter converts a JSON value decoded with UseNumber to a
// parameter value (Request.Parameters, Response.Parameters): strings and
// bools as they are, integers as int64 (uint64 above its range), other
// numbers as float64; nil for objects, arrays and null, which are not
// parameters.
func JSONParameter(v any) any {
	switch x := v.(type) {
	case string, bool:
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(x.String(), 10, 64); err == nil {
			return u
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
	}
	return nil
}

// JSONParameters is a parameters object read from JSON with its integers
// kept as integers (plain decoding would make every number a float64,
// and an int64 parameter a double one).
type JSONParameters map[string]any

// UnmarshalJSON decodes an object of parameters, dropping members that
// are not parameter values.
func (p *JSONParameters) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if raw == nil {
		*p = nil
		return nil
	}
	out := make(JSONParameters, len(raw))
	for k, v := range raw {
		if pv := JSONParameter(v); pv != nil {
			out[k] = pv
		}
	}
	*p = out
	return nil
}
