package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// decodeData converts a JSON "data" value (a flat or nested array of
// numbers, booleans or strings, or one such element) into the
// little-endian tensor encoding. It scans the bytes directly instead of
// going through []any.
//
// Its refusals are Triton's (http_server.cc, ReadDataFromJson and
// JsonBytesArrayByteSize), INTERNAL errors with its JSON library's words:
// an element of the wrong JSON type, and for every type but BYTES a count
// of elements other than n, which Triton checks before reading each
// element, so that data with more elements than the shape is refused
// before any element past the shape is looked at. BYTES data is not
// counted here: Triton sizes it from its strings, and the count is
// core's check (the repository's validation, with core's texts). An
// integer that is an integer in JSON but beyond the range of a type
// narrower than 64 bits is refused with a text of ours: Triton stores it
// truncated to the type's width (a FIXME in its code).
func decodeData(raw []byte, dt backend.DataType, n int64, name string) ([]byte, error) {
	size := int64(dt.Size())
	if dt == backend.FP16 || dt == backend.BF16 {
		// JSON has no half-precision numbers: Triton's http_server.cc
		// (ReadDataFromJson) refuses them with these words.
		return nil, backend.Errorf(backend.InvalidArg, "receiving %s data via JSON is not supported. Please use the binary data format for input %s", dt, name)
	}
	var out []byte
	if dt != backend.Bytes {
		// Every element takes at least one byte of JSON, so a shape the
		// data cannot fill gets no more room than the data can use, and
		// the count check below refuses it.
		out = make([]byte, 0, max(0, min(n, int64(len(raw))))*size)
	}
	var count int64
	i := 0
	for i < len(raw) {
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r', ',', '[', ']':
			i++
			continue
		}
		if dt != backend.Bytes && count >= n {
			return nil, shapeMismatch(fmt.Sprintf("input '%s': more than %d elements for its shape", name, n))
		}
		// One scalar token.
		j := i
		if c == '"' {
			j++
			esc := false
			for j < len(raw) && raw[j] != '"' {
				if raw[j] == '\\' {
					esc = true
					j++
				}
				j++
			}
			if j >= len(raw) {
				return nil, backend.Errorf(backend.InvalidArg, "input '%s': unterminated string in data", name)
			}
			j++
			if dt != backend.Bytes {
				return nil, dataError(jsonTypeText(dt), name, count)
			}
			tok := raw[i+1 : j-1]
			if esc {
				var s string
				if err := json.Unmarshal(raw[i:j], &s); err != nil {
					return nil, backend.Errorf(backend.InvalidArg, "input '%s': bad string element: %w", name, err)
				}
				tok = []byte(s)
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(len(tok)))
			out = append(out, tok...)
			count++
			i = j
			continue
		}
		for j < len(raw) && raw[j] != ',' && raw[j] != ']' && raw[j] != ' ' && raw[j] != '\n' && raw[j] != '\t' && raw[j] != '\r' && raw[j] != '[' {
			j++
		}
		tok := raw[i:j]
		if dt == backend.Bytes {
			// Triton sizes BYTES data from its strings before reading it.
			return nil, backend.Errorf(backend.Internal, "Unable to parse JSON bytes array: %s (input '%s', element %d)", jsonTypeText(dt), name, count)
		}
		var err error
		if out, err = appendScalar(out, dt, tok); err != nil {
			if errors.Is(err, errOutOfRange) {
				return nil, backend.Errorf(backend.InvalidArg, "input '%s': data element %d, %s, is out of the range of %s", name, count, tok, dt)
			}
			return nil, dataError(jsonTypeText(dt), name, count)
		}
		count++
		i = j
	}
	if dt != backend.Bytes && count != n {
		return nil, shapeMismatch(fmt.Sprintf("input '%s': %d elements for a shape of %d", name, count, n))
	}
	return out, nil
}

// dataError is Triton's refusal of an input's JSON "data" (http_server.cc:
// its JSON library's complaint behind "Unable to parse 'data'"), an
// INTERNAL error, so 500; the input and the element follow in
// parentheses, which Triton's text leaves out.
func dataError(msg, name string, elem int64) error {
	return backend.Errorf(backend.Internal, "Unable to parse 'data': %s (input '%s', element %d)", msg, name, elem)
}

// shapeMismatch is Triton's refusal of JSON data with more or fewer
// elements than the input's shape (ReadDataFromJson), the same text
// either way, followed by what was found in parentheses.
func shapeMismatch(found string) error {
	return backend.Errorf(backend.Internal, "Unable to parse 'data': Shape does not match true shape of 'data' field (%s)", found)
}

// jsonTypeText is what Triton's JSON library (triton_json.h) says of an
// element that is not of the JSON type the data type dt is read as:
// BOOL with AsBool, unsigned integers with AsUInt, signed ones with AsInt,
// FP32 and FP64 with AsDouble, BYTES with AsString.
func jsonTypeText(dt backend.DataType) string {
	switch dt {
	case backend.Bool:
		return "attempt to access JSON non-boolean as boolean"
	case backend.Uint8, backend.Uint16, backend.Uint32, backend.Uint64:
		return "attempt to access JSON non-unsigned-integer as unsigned-integer"
	case backend.Int8, backend.Int16, backend.Int32, backend.Int64:
		return "attempt to access JSON non-signed-integer as signed-integer"
	case backend.Bytes:
		return "attempt to access JSON non-string as string"
	}
	return "attempt to access JSON non-number as double"
}

type tokenError string

func (e tokenError) Error() string { return string(e) }

// appendScalar's errors: a token that is not of the JSON type dt is read
// as, and an integer beyond the range of a type narrower than 64 bits.
const (
	errWrongType  tokenError = "wrong JSON type"
	errOutOfRange tokenError = "out of range"
)

// appendScalar appends the element tok, a JSON token that is not a
// string, as data type dt.
func appendScalar(out []byte, dt backend.DataType, tok []byte) ([]byte, error) {
	if len(tok) == 0 {
		return nil, errWrongType
	}
	// The token is only parsed, never retained, so no copy is needed.
	s := unsafe.String(&tok[0], len(tok))
	switch dt {
	case backend.Bool:
		switch s {
		case "true":
			return append(out, 1), nil
		case "false":
			return append(out, 0), nil
		}
		return nil, errWrongType
	case backend.FP32:
		// Beyond float32's range ParseFloat reports ErrRange with the
		// infinity of the number's sign, which is what Triton stores (it
		// reads a double and converts it to float).
		f, err := strconv.ParseFloat(s, 32)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, errWrongType
		}
		return binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(f))), nil
	case backend.FP64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, errWrongType
		}
		return binary.LittleEndian.AppendUint64(out, math.Float64bits(f)), nil
	case backend.Uint8, backend.Uint16, backend.Uint32, backend.Uint64:
		// Triton reads every unsigned type as a JSON unsigned integer of
		// 64 bits: anything else (a negative number, a fraction, an
		// exponent, a string) is of the wrong type.
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, errWrongType
		}
		if bits := dt.Size() * 8; bits < 64 && v>>bits != 0 {
			return nil, errOutOfRange
		}
		return dt.AppendUint(out, v), nil
	case backend.Int8, backend.Int16, backend.Int32, backend.Int64:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, errWrongType
		}
		if bits := dt.Size() * 8; bits < 64 && (v < -1<<(bits-1) || v >= 1<<(bits-1)) {
			return nil, errOutOfRange
		}
		return dt.AppendUint(out, uint64(v)), nil
	}
	return nil, errWrongType
}

// refuseJSONOutput is Triton's refusal (http_server.cc, WriteDataToJson)
// of an output that would be sent as JSON numbers but has no JSON
// spelling: FP16 and BF16 go only as binary data (or shared memory). nil
// for every other datatype.
func refuseJSONOutput(t *backend.Tensor) error {
	if t.DataType == backend.FP16 || t.DataType == backend.BF16 {
		return backend.Errorf(backend.InvalidArg, "sending %s data via JSON is not supported. Please use the binary data format for output", t.DataType)
	}
	return nil
}

// appendData renders tensor data as a flat JSON array (Triton's responses
// use flat arrays). ok is false when the data does not match its type.
// FP16 and BF16 have no JSON spelling: callers refuse them first
// (refuseJSONOutput), and any of their elements here is not ok.
func appendData(b []byte, t *backend.Tensor) ([]byte, bool) {
	b = append(b, '[')
	d := t.Data
	size := t.DataType.Size()
	if t.DataType != backend.Bytes && (size == 0 || len(d)%size != 0) {
		return b, false
	}
	first := true
	for len(d) > 0 {
		if !first {
			b = append(b, ',')
		}
		first = false
		switch t.DataType {
		case backend.Bool:
			b = strconv.AppendBool(b, d[0] != 0)
		case backend.Uint8:
			b = strconv.AppendUint(b, uint64(d[0]), 10)
		case backend.Uint16:
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint16(d)), 10)
		case backend.Uint32:
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(d)), 10)
		case backend.Uint64:
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(d), 10)
		case backend.Int8:
			b = strconv.AppendInt(b, int64(int8(d[0])), 10)
		case backend.Int16:
			b = strconv.AppendInt(b, int64(int16(binary.LittleEndian.Uint16(d))), 10)
		case backend.Int32:
			b = strconv.AppendInt(b, int64(int32(binary.LittleEndian.Uint32(d))), 10)
		case backend.Int64:
			b = strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(d)), 10)
		case backend.FP32:
			b = appendFloat(b, float64(math.Float32frombits(binary.LittleEndian.Uint32(d))), 32)
		case backend.FP64:
			b = appendFloat(b, math.Float64frombits(binary.LittleEndian.Uint64(d)), 64)
		case backend.Bytes:
			if len(d) < 4 {
				return b, false
			}
			l := binary.LittleEndian.Uint32(d)
			if uint64(len(d)-4) < uint64(l) {
				return b, false
			}
			b = appendJSONString(b, d[4:4+l])
			d = d[4+l:]
			continue
		default:
			return b, false
		}
		d = d[size:]
	}
	return append(b, ']'), true
}

// jsonBound is the most bytes appendData can write for t: the longest
// spelling of each element plus its separator, and for BYTES six bytes
// per input byte (a \u00XX escape) plus quotes and separator per element.
func jsonBound(t *backend.Tensor) int64 {
	n := int64(len(t.Data))
	var per int64
	switch t.DataType {
	case backend.Bytes:
		return 2 + 6*n // each 4-byte length prefix covers an element's quotes and comma
	case backend.Bool:
		per = 6 // "false,"
	case backend.Uint8, backend.Int8:
		per = 5
	case backend.Uint16, backend.Int16:
		per = 7
	case backend.Uint32, backend.Int32:
		per = 12
	case backend.Uint64, backend.Int64:
		per = 21
	case backend.FP32:
		per = 17 // "-1.1754944e-38" or a quoted "NaN", and a comma
	case backend.FP64:
		per = 25
	default:
		return 2
	}
	size := int64(t.DataType.Size())
	return 2 + n/size*per
}

func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		// JSON has no NaN or infinity; Triton's clients read these spellings.
		return strconv.AppendQuote(b, strconv.FormatFloat(f, 'g', -1, bits))
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string; bytes that are not UTF-8
// become U+FFFD, since JSON cannot carry them.
func appendJSONString(b []byte, s []byte) []byte {
	b = append(b, '"')
	for len(s) > 0 {
		// A run of bytes that need no escaping (names and ids usually
		// are one) is appended at once.
		n := 0
		for n < len(s) && s[n] >= 0x20 && s[n] < utf8.RuneSelf && s[n] != '"' && s[n] != '\\' {
			n++
		}
		b = append(b, s[:n]...)
		if s = s[n:]; len(s) == 0 {
			break
		}
		c := s[0]
		if c < utf8.RuneSelf {
			if c == '"' || c == '\\' {
				b = append(b, '\\', c)
			} else {
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
	return append(b, '"')
}
