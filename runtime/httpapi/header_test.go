package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestParseHeaderRejects(t *testing.T) {
	for _, s := range []string{
		`{"a\x":1}`, `{"id":"\u12"}`, `{"inputs":[{"name":"I","shape":[1.5]}]}`, `{"inputs":[{"data":[1,]}]}`,
		`{"id":"x"`, `{"id":"x"} {}`, `[]`, ``, `{"inputs":[{"data":01}]}`,
		"{\"id\":\"a\tb\"}",
		`{"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`,
	} {
		var ir inferRequest
		if err := parseHeader([]byte(s), &ir, nil); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
	// A value of the wrong type parses, for decodeRequest to refuse with
	// Triton's text once the whole document did.
	var bdo inferRequest
	if err := parseHeader([]byte(`{"parameters":{"binary_data_output":1}}`), &bdo, nil); err != nil || bdo.Parameters.Refused == nil {
		t.Errorf("binary_data_output 1: %v, refused %v", err, bdo.Parameters.Refused)
	}
	var ir inferRequest
	err := parseHeader([]byte(`{"id":"\u00e9\"","inputs":[{"name":"I","shape":[2,-1],"datatype":"FP32","data":[[1,2],[3,4]],"x":{}}],"outputs":[{"name":"O","parameters":{"binary_data":true}}]}`), &ir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ir.ID != "é\"" || ir.Inputs[0].Name != "I" || len(ir.Inputs[0].Shape) != 2 || ir.Inputs[0].Shape[1] != -1 ||
		string(ir.Inputs[0].Data) != "[[1,2],[3,4]]" || !*ir.Outputs[0].Parameters.BinaryData || strings.Contains(string(ir.Inputs[0].Datatype), "\"") {
		t.Errorf("decoded %+v", ir)
	}
}

// TestAppendJSONStringRoundTrips: what appendJSONString writes decodes, with
// encoding/json, to the string it was given (invalid UTF-8 as U+FFFD, as
// encoding/json writes it), for plain runs, escapes and multi-byte runes
// in any order.
func TestAppendJSONStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", "linear", "OUTPUT__0", `a"b`, `\`, "x\\y\"z", "tab\there", "\x00\x1f", "é and 日本", "end\n", "\xff", "a\xffb", `"`, "mixed \"é\" \x01 ok"} {
		out := appendJSONString(nil, []byte(s))
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q: %s does not decode: %v", s, out, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if got != want {
			t.Errorf("%q: wrote %s, which decodes to %q", s, out, got)
		}
	}
}

// TestSmallIntMatchesStrconv: the fast integer path agrees with
// strconv.ParseInt on every token it accepts and leaves the rest to it.
func TestSmallIntMatchesStrconv(t *testing.T) {
	for _, tok := range []string{"0", "1", "-1", "16", "4096", "123456789012345678", "-123456789012345678", "1234567890123456789", "1.5", "1e3", "-", ""} {
		v, ok := smallInt([]byte(tok))
		want, err := strconv.ParseInt(tok, 10, 64)
		if ok && (err != nil || v != want) {
			t.Errorf("%q: smallInt %d, strconv %d (%v)", tok, v, want, err)
		}
		if !ok && len(strings.TrimPrefix(tok, "-")) <= 18 && err == nil {
			t.Errorf("%q: smallInt refused an integer strconv reads", tok)
		}
	}
}

// TestTensorCountsBounded: a body of empty tensor objects ("{}," three
// bytes each) must not make the parser hold a ~150-byte inferInput (or
// inferOutput) per three bytes of body: within the default 64 MiB input
// limit that is gigabytes. Requests past the bound are refused as they
// are parsed, 400 / INVALID_ARGUMENT.
func TestTensorCountsBounded(t *testing.T) {
	for _, member := range []string{"inputs", "outputs"} {
		body := []byte(`{"` + member + `":[` + strings.Repeat("{},", 200000) + `{}]}`)
		var ir inferRequest
		var err error
		alloc := allocated(func() { err = parseHeader(body, &ir, nil) })
		var be *backend.Error
		if !errors.As(err, &be) || be.Code != backend.InvalidArg || !strings.Contains(err.Error(), "more than "+strconv.Itoa(maxRequestTensors)+" "+member) {
			t.Errorf("%d %s: %v", 200001, member, err)
		}
		if alloc > 32<<20 {
			t.Errorf("%d %s: parsing allocated %d bytes for a %d-byte body", 200001, member, alloc, len(body))
		}
	}
	// Up to the bound, as many as a request gives are parsed.
	var ir inferRequest
	body := []byte(`{"inputs":[` + strings.Repeat("{},", maxRequestTensors-1) + `{}],"outputs":[` + strings.Repeat("{},", maxRequestTensors-1) + `{}]}`)
	if err := parseHeader(body, &ir, nil); err != nil || len(ir.Inputs) != maxRequestTensors || len(ir.Outputs) != maxRequestTensors {
		t.Errorf("at the bound: %v, %d inputs, %d outputs", err, len(ir.Inputs), len(ir.Outputs))
	}
}

// TestFP32DataOutOfRange: a JSON number beyond float32's range is
// accepted for an FP32 input and stored as the infinity of its sign, as
// Triton's HTTP frontend stores it (it reads the number as a double and
// converts it to float); FP64 keeps the value.
func TestFP32DataOutOfRange(t *testing.T) {
	out, err := decodeData([]byte(`[3.5e38,-1e39,1e-50,2.5]`), backend.FP32, 4, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), 0, 2.5}
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != w {
			t.Errorf("element %d: got %v, want %v", i, got, w)
		}
	}
	if _, err := decodeData([]byte(`[1e39]`), backend.FP64, 1, "x"); err != nil {
		t.Errorf("FP64 1e39: %v", err)
	}
}
