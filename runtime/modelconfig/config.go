package modelconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// ParseError is a config.pbtxt syntax or schema error at a position.
// Line and Col are 1-based; both are 0 when the parser gave no position.
type ParseError struct {
	Path string
	Line int
	Col  int
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Col, e.Msg)
}

// prototext reports "proto: (line L:C): msg"; the separator after "proto:"
// may be a space or U+00A0 (the library varies it on purpose so that nobody
// matches on exact text), hence the loose pattern.
var prototextPos = regexp.MustCompile(`^proto:[\s\x{00a0}]*(?:\(line (\d+):(\d+)\):[\s\x{00a0}]*)?(.*)$`)

// Parse decodes config.pbtxt text. path only names the source in errors.
func Parse(path string, data []byte) (*ModelConfig, error) {
	cfg := &ModelConfig{}
	if err := prototext.Unmarshal(data, cfg); err != nil {
		return nil, positioned(path, data, err)
	}
	return cfg, nil
}

// LoadFile reads and parses a config.pbtxt file.
func LoadFile(path string) (*ModelConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading model config: %w", err)
	}
	return Parse(path, data)
}

func positioned(path string, data []byte, err error) *ParseError {
	msg := err.Error()
	m := prototextPos.FindStringSubmatch(msg)
	if m == nil {
		return &ParseError{Path: path, Msg: msg}
	}
	pe := &ParseError{Path: path, Msg: strings.TrimSpace(m[3])}
	if m[1] != "" {
		pe.Line, _ = strconv.Atoi(m[1])
		pe.Col, _ = strconv.Atoi(m[2])
		return pe
	}
	// Errors such as "unexpected EOF" carry no position: point at the end.
	pe.Line = bytes.Count(data, []byte("\n")) + 1
	pe.Col = len(data) - bytes.LastIndexByte(data, '\n')
	return pe
}

// WireType converts a config data type to its wire name (TYPE_STRING is
// BYTES). It returns "" for TYPE_INVALID and unknown values.
func WireType(t DataType) backend.DataType {
	switch t {
	case DataType_TYPE_BOOL:
		return backend.Bool
	case DataType_TYPE_UINT8:
		return backend.Uint8
	case DataType_TYPE_UINT16:
		return backend.Uint16
	case DataType_TYPE_UINT32:
		return backend.Uint32
	case DataType_TYPE_UINT64:
		return backend.Uint64
	case DataType_TYPE_INT8:
		return backend.Int8
	case DataType_TYPE_INT16:
		return backend.Int16
	case DataType_TYPE_INT32:
		return backend.Int32
	case DataType_TYPE_INT64:
		return backend.Int64
	case DataType_TYPE_FP16:
		return backend.FP16
	case DataType_TYPE_FP32:
		return backend.FP32
	case DataType_TYPE_FP64:
		return backend.FP64
	case DataType_TYPE_BF16:
		return backend.BF16
	case DataType_TYPE_STRING:
		return backend.Bytes
	}
	return ""
}

// ConfigType converts a wire data type name to the config enum; it returns
// TYPE_INVALID for names it does not know.
func ConfigType(d backend.DataType) DataType {
	if d == backend.Bytes {
		return DataType_TYPE_STRING
	}
	if v, ok := DataType_value["TYPE_"+string(d)]; ok {
		return DataType(v)
	}
	return DataType_TYPE_INVALID
}

// JSON renders cfg the way Triton's model configuration endpoint and the
// python backend's args["model_config"] show it: proto field names, every
// scalar field present (defaults included), enums by name and 64-bit integers
// as JSON numbers rather than protojson's strings.
func JSON(cfg *ModelConfig) []byte {
	var b []byte
	return appendMessage(b, cfg.ProtoReflect())
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		// Unset members of a oneof and unset sub-messages are left out, as
		// protobuf's JSON printer does even when printing defaults.
		if (fd.ContainingOneof() != nil || (fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap())) && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, string(fd.Name()))
		b = append(b, ':')
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			b = append(b, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendValue(b, fd, l.Get(j))
			}
			b = append(b, ']')
		case fd.IsMap():
			mp := v.Map()
			keys := make([]protoreflect.MapKey, 0, mp.Len())
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			sortMapKeys(keys)
			b = append(b, '{')
			for j, k := range keys {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendString(b, k.String())
				b = append(b, ':')
				b = appendValue(b, fd.MapValue(), mp.Get(k))
			}
			b = append(b, '}')
		default:
			b = appendValue(b, fd, v)
		}
	}
	return append(b, '}')
}

func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		return appendString(b, string(v.Bytes()))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return appendString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		return strconv.AppendFloat(b, f, 'g', -1, bits)
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	default:
		return strconv.AppendInt(b, v.Int(), 10)
	}
}

// sortMapKeys orders map keys as protobuf's JSON printer does, in
// O(n log n): configs may carry tens of thousands of parameters.
func sortMapKeys(keys []protoreflect.MapKey) {
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
		switch a.Interface().(type) {
		case string:
			return strings.Compare(a.String(), b.String())
		case bool:
			return cmp.Compare(b2i(a.Bool()), b2i(b.Bool()))
		case uint32, uint64:
			return cmp.Compare(a.Uint(), b.Uint())
		default:
			return cmp.Compare(a.Int(), b.Int())
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendString writes s as a JSON string (encoding/json's escaping, which
// also turns invalid UTF-8 into U+FFFD).
func appendString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		return append(b, `""`...)
	}
	return append(b, q...)
}
