package modelconfig

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// countUnset lists message fields (walking set sub-messages) that the
// fixture leaves unset, so the "every field parses" claim is checked.
func countUnset(m protoreflect.Message, prefix string, seen map[string]bool) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		path := prefix + string(fd.Name())
		if m.Has(fd) {
			seen[path] = true
		} else if _, ok := seen[path]; !ok {
			seen[path] = false
		}
		if !m.Has(fd) || fd.Kind() != protoreflect.MessageKind {
			continue
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				m.Get(fd).Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
					countUnset(v.Message(), path+".", seen)
					return true
				})
			}
		case fd.IsList():
			l := m.Get(fd).List()
			for j := 0; j < l.Len(); j++ {
				countUnset(l.Get(j).Message(), path+".", seen)
			}
		default:
			countUnset(m.Get(fd).Message(), path+".", seen)
		}
	}
}

func TestEveryFieldParses(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range []string{"full.pbtxt", "sequence.pbtxt", "ensemble.pbtxt"} {
		cfg, err := LoadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		countUnset(cfg.ProtoReflect(), "", seen)
		var v map[string]any
		if err := json.Unmarshal(JSON(cfg), &v); err != nil {
			t.Fatalf("%s: JSON rendering is not JSON: %v\n%s", f, err, JSON(cfg))
		}
	}
	// A path counts as covered when any fixture sets it (oneof members
	// are spread over the fixtures).
	var missing []string
	for path, set := range seen {
		if !set {
			missing = append(missing, path)
		}
	}
	allowedUnset := map[string]bool{
		// Enums whose only value is 0: proto3 cannot tell "set to 0" from unset.
		"instance_group.secondary_devices.kind": true,
		"batch_output.kind":                     true,
		// The other member of the strategy oneof is set in sequence.pbtxt.
		"sequence_batching.direct": true,
		// Members of the scheduling oneof, each set by one fixture.
		"dynamic_batching":    true,
		"sequence_batching":   true,
		"ensemble_scheduling": true,
		// The CPU accelerator is given without parameters; the GPU one has them.
		"optimization.execution_accelerators.cpu_execution_accelerator.parameters": true,
	}
	for _, p := range missing {
		if !allowedUnset[p] {
			t.Errorf("field %s is set by no fixture", p)
		}
	}
}

func TestFullConfigValues(t *testing.T) {
	cfg, err := LoadFile("testdata/full.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetMaxBatchSize() != 8 || cfg.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize() != 16 ||
		cfg.GetInstanceGroup()[0].GetKind() != ModelInstanceGroup_KIND_CPU || cfg.GetParameters()["INTRA_OP_THREAD_COUNT"].GetStringValue() != "1" {
		t.Fatalf("unexpected values: %v", cfg)
	}
	var v map[string]any
	if err := json.Unmarshal(JSON(cfg), &v); err != nil {
		t.Fatal(err)
	}
	in := v["input"].([]any)[0].(map[string]any)
	if dims := in["dims"].([]any); dims[1].(float64) != -1 {
		t.Errorf("int64 dims should be JSON numbers, got %#v", dims)
	}
	if in["data_type"] != "TYPE_FP32" {
		t.Errorf("data_type = %v", in["data_type"])
	}
	// Defaults are printed, as Triton's config endpoint does.
	if _, ok := in["is_shape_tensor"]; !ok {
		t.Errorf("default-valued field is_shape_tensor missing from JSON")
	}
	if v["max_batch_size"].(float64) != 8 {
		t.Errorf("max_batch_size = %v", v["max_batch_size"])
	}
}

func TestParseErrorsArePositioned(t *testing.T) {
	cases := []struct {
		text, want string
	}{
		{"name: \"x\"\nmax_batch_size: 3\n  bogus_field: 1\n", "cfg.pbtxt:3:3: unknown field: bogus_field"},
		{"name: \"x\"\ninput [{ name: \"a\" data_type: TYPE_FOO }]", "cfg.pbtxt:2:31: invalid value for enum type: TYPE_FOO"},
		{"name: \"x\"\ninput [{ name: \"a\" ", "cfg.pbtxt:2:"},
		{"max_batch_size: \"eight\"", "cfg.pbtxt:1:17:"},
	}
	for _, c := range cases {
		_, err := Parse("cfg.pbtxt", []byte(c.text))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("%q: want *ParseError, got %v", c.text, err)
		}
		if pe.Line == 0 || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %q, want prefix %q", c.text, err, c.want)
		}
	}
}

func TestDataTypeNames(t *testing.T) {
	for name, v := range DataType_value {
		dt := DataType(v)
		if dt == DataType_TYPE_INVALID {
			if WireType(dt) != "" {
				t.Errorf("TYPE_INVALID maps to %q", WireType(dt))
			}
			continue
		}
		w := WireType(dt)
		if !w.Valid() {
			t.Errorf("%s maps to invalid wire type %q", name, w)
		}
		if ConfigType(w) != dt {
			t.Errorf("%s -> %s -> %s", name, w, ConfigType(w))
		}
	}
	if WireType(DataType_TYPE_STRING) != backend.Bytes {
		t.Errorf("TYPE_STRING should be BYTES on the wire")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name: \"m\"\nmax_batch_size: 4\ninput [{ name: \"x\" data_type: TYPE_FP32 dims: [2] }]",
		"dynamic_batching { preferred_batch_size: [2, 4] }",
		"parameters { key: \"k\" value { string_value: \"v\" } }",
		"input [{",
		"version_policy { latest { num_versions: 2 } }",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.pbtxt", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.pbtxt") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if !json.Valid(JSON(cfg)) {
			t.Fatalf("invalid JSON for %q", data)
		}
	})
}
