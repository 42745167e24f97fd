package httpapi

import (
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
