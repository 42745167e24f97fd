package httpapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestParseHeaderRejects(t *testing.T) {
	for _, s := range []string{
		`{"a\x":1}`, `{"id":"\u12"}`, `{"inputs":[{"name":"I","shape":[1.5]}]}`, `{"inputs":[{"data":[1,]}]}`,
		`{"id":"x"`, `{"id":"x"} {}`, `[]`, ``, `{"parameters":{"binary_data_output":1}}`, `{"inputs":[{"data":01}]}`,
		"{\"id\":\"a\tb\"}",
		`{"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`,
	} {
		var ir inferRequest
		if err := parseHeader([]byte(s), &ir, nil); err == nil {
			t.Errorf("%q: accepted", s)
		}
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
