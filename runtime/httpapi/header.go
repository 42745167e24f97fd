package httpapi

import (
	"encoding/json"
	"strconv"
	"unsafe"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// parseHeader decodes the JSON part of an infer request into ir. It is a
// hand-written scanner for this one document shape, used instead of
// encoding/json because it runs on every request: it allocates only for the
// slices it fills and leaves each input's "data" value as a sub-slice of
// buf for decodeData. Unknown members are skipped after being checked for
// well-formedness; strings with escapes are unescaped by encoding/json.
// An input named as one of inputs (the model's) gets that name's string.
func parseHeader(buf []byte, ir *inferRequest, inputs []backend.TensorSpec) error {
	p := &scanner{b: buf, inputs: inputs}
	if err := p.object(func(key []byte) error {
		switch string(key) {
		case "id":
			if c, err := p.next(); err == nil && c != '"' {
				// Triton refuses it once the document parsed, before
				// the parameters (ParseJsonTritonRequestID).
				ir.badID = true
				return p.skip()
			}
			s, err := p.str()
			ir.ID = s
			return err
		case "parameters":
			return p.object(func(k []byte) error {
				v, err := p.scalar()
				if err != nil {
					return err
				}
				// A value Triton refuses is refused once the whole
				// document parsed (Triton parses it before reading
				// parameters); the first in document order, as Triton
				// reads them in that order.
				if string(k) == "binary_data_output" {
					// Compared without a conversion: the hot path's one
					// parameter allocates nothing.
					b, ok := v.(bool)
					if !ok && ir.Parameters.Refused == nil {
						ir.Parameters.Refused = parameterError("binary_data_output", v)
					}
					ir.Parameters.BinaryDataOutput = b
					return nil
				}
				if ir.Parameters.Refused == nil {
					ir.Parameters.Refused = parameterError(string(k), v)
				}
				if v == nil {
					return nil
				}
				if ir.Parameters.Values == nil {
					ir.Parameters.Values = map[string]any{}
				}
				ir.Parameters.Values[string(k)] = v
				return nil
			})
		case "inputs":
			ir.Inputs = ir.Inputs[:0] // a repeated member replaces the earlier one
			limit := max(maxRequestTensors, len(inputs))
			return p.array(func() error {
				if len(ir.Inputs) >= limit {
					return backend.Errorf(backend.InvalidArg, "request has more than %d inputs", limit)
				}
				ir.Inputs = append(ir.Inputs, inferInput{})
				return p.input(&ir.Inputs[len(ir.Inputs)-1])
			})
		case "outputs":
			ir.Outputs = ir.Outputs[:0]
			return p.array(func() error {
				if len(ir.Outputs) >= maxRequestTensors {
					return backend.Errorf(backend.InvalidArg, "request has more than %d outputs", maxRequestTensors)
				}
				ir.Outputs = append(ir.Outputs, inferOutput{})
				return p.output(&ir.Outputs[len(ir.Outputs)-1])
			})
		}
		return p.skip()
	}); err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) {
		return p.errorf("unexpected data after the top-level object")
	}
	return nil
}

type scanner struct {
	b     []byte
	i     int
	depth int // nesting of objects and arrays, bounded by maxDepth
	// inputs are the model's, whose names inputName hands out.
	inputs []backend.TensorSpec
}

// maxRequestTensors bounds the inputs (beyond the model's own count) and
// the requested outputs one request may list. Each listed tensor costs
// ~150 bytes parsed, an empty one three bytes of body ("{},"), so within
// the default 64 MiB body an unbounded list held gigabytes before
// validation could refuse it; no model takes this many.
const maxRequestTensors = 1 << 14

// maxDepth bounds nesting so that a hostile body cannot exhaust the stack
// (the scanner recurses per level): Triton's limit for the whole document.
const maxDepth = status.MaxJSONDepth

type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string { return e.msg + " at offset " + strconv.Itoa(e.off) }

func (p *scanner) errorf(msg string) error { return &syntaxError{msg: msg, off: p.i} }

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte without consuming it.
func (p *scanner) next() (byte, error) {
	p.ws()
	if p.i >= len(p.b) {
		return 0, p.errorf("unexpected end of JSON")
	}
	return p.b[p.i], nil
}

func (p *scanner) expect(c byte) error {
	got, err := p.next()
	if err != nil {
		return err
	}
	if got != c {
		return p.errorf("expected '" + string(c) + "'")
	}
	p.i++
	return nil
}

// object calls member for every key, positioned before the value.
func (p *scanner) object(member func(key []byte) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.depth++; p.depth > maxDepth {
		return status.JSONTooDeep.New(maxDepth)
	}
	defer func() { p.depth-- }()
	if c, err := p.next(); err != nil {
		return err
	} else if c == '}' {
		p.i++
		return nil
	}
	for {
		key, _, err := p.rawString()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		c, err := p.next()
		if err != nil {
			return err
		}
		p.i++
		switch c {
		case ',':
		case '}':
			return nil
		default:
			p.i--
			return p.errorf("expected ',' or '}'")
		}
	}
}

// array calls elem for every element, positioned before it.
func (p *scanner) array(elem func() error) error {
	if err := p.expect('['); err != nil {
		return err
	}
	if p.depth++; p.depth > maxDepth {
		return status.JSONTooDeep.New(maxDepth)
	}
	defer func() { p.depth-- }()
	if c, err := p.next(); err != nil {
		return err
	} else if c == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		c, err := p.next()
		if err != nil {
			return err
		}
		p.i++
		switch c {
		case ',':
		case ']':
			return nil
		default:
			p.i--
			return p.errorf("expected ',' or ']'")
		}
	}
}

// rawString consumes a string and returns its bytes between the quotes
// (still escaped) and whether it contains escapes.
func (p *scanner) rawString() ([]byte, bool, error) {
	if err := p.expect('"'); err != nil {
		return nil, false, err
	}
	start, esc := p.i, false
	for p.i < len(p.b) {
		// Plain bytes in locals: the loop runs over every byte of every
		// key and name of every request.
		b, i := p.b, p.i
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++
		}
		p.i = i
		if i == len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], esc, nil
		case c == '\\':
			esc = true
			if p.i+1 >= len(p.b) {
				return nil, false, p.errorf("unterminated string")
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) || !isHex4(p.b[p.i+2:p.i+6]) {
					return nil, false, p.errorf("invalid \\u escape")
				}
				p.i += 6
			default:
				return nil, false, p.errorf("invalid escape in string")
			}
		case c < 0x20:
			return nil, false, p.errorf("control character in string")
		}
	}
	return nil, false, p.errorf("unterminated string")
}

func (p *scanner) str() (string, error) {
	start := p.i
	raw, esc, err := p.rawString()
	if err != nil {
		return "", err
	}
	if !esc {
		return string(raw), nil
	}
	var s string
	if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
		return "", p.errorf("invalid string escape")
	}
	return s, nil
}

// dataType reads a string naming a data type: one of the constants when
// it is one (no string allocated per request), else as str does, for
// validation to refuse.
func (p *scanner) dataType() (backend.DataType, error) {
	start := p.i
	raw, esc, err := p.rawString()
	if err != nil {
		return "", err
	}
	if !esc {
		for _, dt := range [...]backend.DataType{backend.Bool, backend.Uint8, backend.Uint16, backend.Uint32, backend.Uint64,
			backend.Int8, backend.Int16, backend.Int32, backend.Int64, backend.FP16, backend.FP32, backend.FP64, backend.BF16, backend.Bytes} {
			if string(raw) == string(dt) {
				return dt, nil
			}
		}
	}
	p.i = start
	s, err := p.str()
	return backend.DataType(s), err
}

// inputName reads an input's name: the model's string for it when it
// names one of the model's inputs (no string allocated per request), else
// as str does, for validation to refuse.
func (p *scanner) inputName() (string, error) {
	start := p.i
	raw, esc, err := p.rawString()
	if err != nil {
		return "", err
	}
	if !esc {
		for i := range p.inputs {
			if string(raw) == p.inputs[i].Name {
				return p.inputs[i].Name, nil
			}
		}
	}
	p.i = start
	return p.str()
}

func (p *scanner) boolean(dst *bool) error {
	c, err := p.next()
	if err != nil {
		return err
	}
	switch {
	case c == 't' && p.literal("true"):
		*dst = true
	case c == 'f' && p.literal("false"):
		*dst = false
	default:
		return p.errorf("expected a boolean")
	}
	return nil
}

func (p *scanner) literal(lit string) bool {
	if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
		p.i += len(lit)
		return true
	}
	return false
}

// number consumes a JSON number and returns its text.
func (p *scanner) number() ([]byte, error) {
	if _, err := p.next(); err != nil {
		return nil, err
	}
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	intStart := p.i
	n := digits()
	if n == 0 || (n > 1 && p.b[intStart] == '0') {
		return nil, p.errorf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	return p.b[start:p.i], nil
}

func (p *scanner) int64(dst *int64) error {
	tok, err := p.number()
	if err != nil {
		return err
	}
	if v, ok := smallInt(tok); ok {
		*dst = v
		return nil
	}
	v, err := strconv.ParseInt(unsafe.String(&tok[0], len(tok)), 10, 64)
	if err != nil {
		return p.errorf("expected an integer")
	}
	*dst = v
	return nil
}

// smallInt converts a number token of at most 18 digits (optionally
// negative) without strconv's general path: shapes and sizes are such
// tokens, several per request. Anything else (fractions, exponents, longer
// numbers) reports false for strconv to judge.
func smallInt(tok []byte) (int64, bool) {
	digits := tok
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if len(digits) < len(tok) {
		v = -v
	}
	return v, true
}

// skip consumes one value of any kind, checking that it is well formed.
func (p *scanner) skip() error {
	c, err := p.next()
	if err != nil {
		return err
	}
	switch {
	case c == '{':
		return p.object(func([]byte) error { return p.skip() })
	case c == '[':
		return p.array(p.skip)
	case c == '"':
		_, _, err := p.rawString()
		return err
	case c == 't' && p.literal("true"), c == 'f' && p.literal("false"), c == 'n' && p.literal("null"):
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := p.number()
		return err
	}
	return p.errorf("unexpected character")
}

func (p *scanner) input(in *inferInput) error {
	return p.object(func(key []byte) error {
		switch string(key) {
		case "name":
			s, err := p.inputName()
			in.Name = s
			return err
		case "datatype":
			var err error
			in.Datatype, err = p.dataType()
			return err
		case "shape":
			in.Shape = in.shape[:0]
			return p.array(func() error {
				var d int64
				err := p.int64(&d)
				in.Shape = append(in.Shape, d)
				return err
			})
		case "parameters":
			return p.object(func(k []byte) error {
				switch string(k) {
				case "binary_data_size":
					in.Parameters.BinaryDataSize = &in.binarySize
					return p.int64(in.Parameters.BinaryDataSize)
				case "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size":
					return p.shmParam(string(k), &in.Parameters.shmParams)
				}
				return p.skip()
			})
		case "data":
			if _, err := p.next(); err != nil {
				return err
			}
			start := p.i
			if err := p.skip(); err != nil {
				return err
			}
			in.Data = p.b[start:p.i]
			return nil
		}
		return p.skip()
	})
}

func (p *scanner) output(out *inferOutput) error {
	return p.object(func(key []byte) error {
		switch string(key) {
		case "name":
			s, err := p.str()
			out.Name = s
			return err
		case "parameters":
			return p.object(func(k []byte) error {
				switch string(k) {
				case "binary_data":
					out.Parameters.BinaryData = new(bool)
					return p.boolean(out.Parameters.BinaryData)
				case "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size":
					return p.shmParam(string(k), &out.Parameters.shmParams)
				case "classification":
					var n int64
					if err := p.int64(&n); err != nil {
						return err
					}
					c := int(n)
					out.Parameters.Classification = &c
					return nil
				}
				return p.skip()
			})
		}
		return p.skip()
	})
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// shmParam reads one of the shared-memory extension's parameters.
func (p *scanner) shmParam(key string, dst *shmParams) error {
	if key == "shared_memory_region" {
		s, err := p.str()
		dst.Region = &s
		return err
	}
	var v int64
	if err := p.int64(&v); err != nil {
		return err
	}
	if key == "shared_memory_offset" {
		dst.Offset = &v
	} else {
		dst.ByteSize = &v
	}
	return nil
}
