package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// errorJSON is Triton's error body for msg.
func errorJSON(msg string) string { return `{"error":"` + msg + `"}` }

// TestJSONDataErrors: an input's JSON "data" is refused with Triton's
// texts and codes (http_server.cc, ReadDataFromJson and
// JsonBytesArrayByteSize behind "Unable to parse ...", INTERNAL so 500):
// a count of elements other than the shape's, whichever way, checked
// before each element is read; an element of the wrong JSON type for the
// data type, in its JSON library's words. BYTES data is counted by
// core's check (400, core's text). An integer beyond the range of a type
// narrower than 64 bits, which Triton stores truncated, is refused with
// our text (400).
func TestJSONDataErrors(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel, "ident": frontendtest.Ident}, 0)
	const (
		mismatch = "Unable to parse 'data': Shape does not match true shape of 'data' field"
		signed   = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
		unsigned = "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
		number   = "Unable to parse 'data': attempt to access JSON non-number as double"
		boolean  = "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
		str      = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
	)
	in := func(name, dt, shape, data string) string {
		return `{"inputs":[{"name":"` + name + `","shape":` + shape + `,"datatype":"` + dt + `","data":` + data + `}]}`
	}
	for _, c := range []struct {
		what, model, body string
		status            int
		msg               string
	}{
		{"too few", "half", in("X", "INT32", "[3]", "[1,2]"), 500, mismatch},
		{"too many", "half", in("X", "INT32", "[3]", "[1,2,3,4]"), 500, mismatch},
		{"nested, too many", "half", in("X", "INT32", "[3]", "[[1,2],[3,4]]"), 500, mismatch},
		{"one past the shape, of the wrong type", "half", in("X", "INT32", "[2]", `[1,2,"x"]`), 500, mismatch},
		{"a shape the data cannot fill", "half", in("X", "INT32", "[1000000000]", "[1]"), 500, mismatch},
		{"first element of the wrong type", "half", in("X", "INT32", "[1000000000]", `["x"]`), 500, signed},
		{"string for INT32", "half", in("X", "INT32", "[3]", `[1,"2",3]`), 500, signed},
		{"fraction for INT32", "half", in("X", "INT32", "[1]", `[1.5]`), 500, signed},
		{"exponent for INT32", "half", in("X", "INT32", "[1]", `[1e2]`), 500, signed},
		{"null for INT32", "half", in("X", "INT32", "[1]", `[null]`), 500, signed},
		{"beyond int64", "ident", in("L", "INT64", "[1]", `[9223372036854775808]`), 500, signed},
		{"negative for UINT8", "ident", in("U", "UINT8", "[3]", `[1,-1,3]`), 500, unsigned},
		{"string for FP64", "ident", in("D", "FP64", "[1]", `["1.5"]`), 500, number},
		{"boolean for FP64", "ident", in("D", "FP64", "[1]", `[true]`), 500, number},
		{"number for BOOL", "ident", in("B", "BOOL", "[2]", `[true,1]`), 500, boolean},
		{"number for BYTES", "ident", in("S", "BYTES", "[2]", `["a",5]`), 500, str},
		{"null for BYTES", "ident", in("S", "BYTES", "[1]", `[null]`), 500, str},
		{"too few strings", "ident", `{"inputs":[{"name":"S","shape":[3],"datatype":"BYTES","data":["a","b"]},{"name":"I","shape":[2,2],"datatype":"INT32","data":[1,2,3,4]},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}]}`, 400,
			"[request id: <id_unknown>] expected 3 string elements for inference input 'S' for model 'ident', got 2"},
		{"beyond INT32", "half", in("X", "INT32", "[2]", `[1,3000000000]`), 400, "input 'X': data element 1, 3000000000, is out of the range of INT32"},
		{"beyond UINT8", "ident", in("U", "UINT8", "[3]", `[1,2,256]`), 400, "input 'U': data element 2, 256, is out of the range of UINT8"},
	} {
		r, b := e.do(t, "POST", "/v2/models/"+c.model+"/infer", []byte(c.body), nil)
		// Triton's text first; ours then names the input (and the element
		// or the count) in parentheses, which Triton's leaves out.
		var er struct{ Error string }
		_ = json.Unmarshal(b, &er)
		_, rest, _ := strings.Cut(c.body, `"name":"`)
		input, _, _ := strings.Cut(rest, `"`)
		if r.StatusCode != c.status || !strings.HasPrefix(er.Error, c.msg) || !strings.Contains(er.Error, "'"+input+"'") {
			t.Errorf("%s: %d %s, want %d %q naming input '%s'", c.what, r.StatusCode, b, c.status, c.msg, input)
		}
	}
	for body, where := range map[string]string{
		in("X", "INT32", "[3]", `[1,"2",3]`): "(input 'X', element 1)",
		in("X", "INT32", "[3]", "[1,2]"):     "(input 'X': 2 elements for a shape of 3)",
		in("X", "INT32", "[3]", "[1,2,3,4]"): "(input 'X': more than 3 elements for its shape)",
	} {
		if _, b := e.do(t, "POST", "/v2/models/half/infer", []byte(body), nil); !strings.HasSuffix(string(b), where+`"}`) {
			t.Errorf("%s: %s, want the error to end %s", body, b, where)
		}
	}
	// Within the range of each type, served as given.
	r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(in("X", "INT32", "[2]", `[-2147483648,2147483647]`)), nil)
	if r.StatusCode != 200 || !strings.Contains(string(b), `"data":[-2147483648,2147483647]`) {
		t.Errorf("INT32 extremes: %d %s", r.StatusCode, b)
	}
}

// TestInputContentType: an input gives its data exactly one way, "data",
// binary_data_size or shared_memory_region, as Triton checks first
// (http_server.cc, ValidateInputContentType: 400 with its text, the ways
// given listed in its order). The other shared-memory parameters without
// a region do not count, as in Triton.
func TestInputContentType(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel}, 0)
	const prefix = "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
	five := []byte{5, 0, 0, 0}
	for _, c := range []struct {
		what, input string
		binary      bool
		want        string
	}{
		{"nothing", `{"name":"X","shape":[1],"datatype":"INT32"}`, false, " no field is set"},
		{"nothing, before the name", `{"shape":[1],"datatype":"INT32"}`, false, " no field is set"},
		{"data and binary", `{"name":"X","shape":[1],"datatype":"INT32","data":[5],"parameters":{"binary_data_size":4}}`, true, " set 'data' 'binary_data_size'"},
		{"data and shared memory", `{"name":"X","shape":[1],"datatype":"INT32","data":[5],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}`, false, " set 'data' 'shared_memory_region'"},
		{"binary and shared memory", `{"name":"X","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4,"shared_memory_region":"r"}}`, true, " set 'binary_data_size' 'shared_memory_region'"},
		{"all three", `{"name":"X","shape":[1],"datatype":"INT32","data":null,"parameters":{"shared_memory_region":"r","binary_data_size":4}}`, true, " set 'data' 'binary_data_size' 'shared_memory_region'"},
	} {
		body, h := []byte(`{"inputs":[`+c.input+`]}`), map[string]string(nil)
		if c.binary {
			body, h = binaryBody(string(body), five)
		}
		r, b := e.do(t, "POST", "/v2/models/half/infer", body, h)
		if want := errorJSON(prefix + c.want); r.StatusCode != 400 || string(b) != want {
			t.Errorf("%s: %d %s, want 400 %s", c.what, r.StatusCode, b, want)
		}
	}
	r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":[5],"parameters":{"shared_memory_byte_size":4,"shared_memory_offset":0}}]}`), nil)
	if r.StatusCode != 200 || !strings.Contains(string(b), `"data":[5]`) {
		t.Errorf("data with shared memory sizes but no region: %d %s", r.StatusCode, b)
	}
}

// TestInferParameterType: a request parameter whose value is an object,
// an array or null is refused as Triton refuses it
// (SetTritonParameterFromJsonParameter, 400), before the inputs are read.
func TestInferParameterType(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel}, 0)
	const input = `"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":[5]}]`
	for _, v := range []string{`{"a":1}`, `[1]`, `null`} {
		r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"parameters":{"ok":1,"p":`+v+`,"q":null},`+input+`}`), nil)
		if want := errorJSON("parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."); r.StatusCode != 400 || string(b) != want {
			t.Errorf(`"p": %s: %d %s, want 400 %s`, v, r.StatusCode, b, want)
		}
	}
	// The parameter is refused before an input that would be.
	r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"parameters":{"p":null},"inputs":[{"name":"X","shape":[1],"datatype":"INT32"}]}`), nil)
	if r.StatusCode != 400 || !strings.Contains(string(b), "parameter 'p' has invalid type") {
		t.Errorf("bad parameter and bad input: %d %s", r.StatusCode, b)
	}
	r, b = e.do(t, "POST", "/v2/models/half/infer", []byte(`{"parameters":{"p":1.5,"s":"x","b":true},`+input+`}`), nil)
	if r.StatusCode != 200 {
		t.Errorf("scalar parameters: %d %s", r.StatusCode, b)
	}
}

// TestGenerateRequestConversion: generate's members become inputs or
// parameters as Triton's conversion makes them (ConvertGenerateRequest,
// ExactMappingInput), in document order: a parameter value that is an
// object, an array or null is refused (400), within "parameters" behind
// "Converting keyword: 'parameters'"; "parameters" must be an object and
// the body one (INTERNAL, Triton's JSON library's words); a member of
// "parameters" named like an input is that input.
func TestGenerateRequestConversion(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo}, 0)
	const invalid = "parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'."
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"IN":"x","temperature":{"a":1}}`, 400, fmt.Sprintf(invalid, "temperature")},
		{`{"IN":"x","stop":null}`, 400, fmt.Sprintf(invalid, "stop")},
		{`{"IN":"x","stop":["a"]}`, 400, fmt.Sprintf(invalid, "stop")},
		{`{"IN":"x","parameters":{"n":1,"stop":["a"]}}`, 400, "Converting keyword: 'parameters': " + fmt.Sprintf(invalid, "stop")},
		{`{"IN":"x","parameters":5}`, 500, "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"},
		{`{"IN":"x","parameters":null}`, 500, "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"},
		{`["IN","x"]`, 500, "attempt to get members for non-object"},
		{`{"parameters":{"IN":5}}`, 500, "Converting keyword: 'parameters': Unable to parse JSON bytes array: attempt to access JSON non-string as string (input 'IN', element 0)"},
	} {
		r, b := e.do(t, "POST", "/v2/models/echo/generate", []byte(c.body), nil)
		if want := errorJSON(c.msg); r.StatusCode != c.status || string(b) != want {
			t.Errorf("%s: %d %s, want %d %s", c.body, r.StatusCode, b, c.status, want)
		}
	}
	// Document order decides which of two bad members is named.
	for range 20 {
		r, b := e.do(t, "POST", "/v2/models/echo/generate", []byte(`{"IN":"x","b":[1],"a":null}`), nil)
		if want := errorJSON(fmt.Sprintf(invalid, "b")); r.StatusCode != 400 || string(b) != want {
			t.Fatalf("two bad parameters: %d %s, want 400 %s", r.StatusCode, b, want)
		}
	}
	r, b := e.do(t, "POST", "/v2/models/echo/generate", []byte(`{"parameters":{"IN":"hi","temperature":0.5}}`), nil)
	if r.StatusCode != 200 || string(b) != `{"model_name":"echo","model_version":"2","OUT":"hi"}` {
		t.Errorf("an input within parameters: %d %s", r.StatusCode, b)
	}
}

// TestGenerateResponseCount: generate carries exactly one response of a
// decoupled model. Otherwise Triton (GenerateRequestClass) has already
// sent the status the first response set, 200 when there was none or it
// was not an error, and the body is its error for the count.
func TestGenerateResponseCount(t *testing.T) {
	e := newEnv(t, map[string]string{"repeat": frontendtest.Repeat}, 0)
	count := errorJSON("generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
	for _, c := range []struct {
		in     string
		status int
		body   string
	}{
		{`[9]`, 200, `{"model_name":"repeat","model_version":"2","OUT":9}`},
		{`[]`, 200, count},
		{`[1, 2]`, 200, count},
		{fmt.Sprintf(`[2, %d]`, fake.FailValue), 200, count},
		{fmt.Sprintf(`[%d, 2]`, fake.FailValue), 500, count},
		{fmt.Sprintf(`[%d]`, fake.FailValue), 500, errorJSON("fake repeat: element 0 asked to fail")},
	} {
		r, b := e.do(t, "POST", "/v2/models/repeat/generate", []byte(`{"IN": `+c.in+`}`), nil)
		if r.StatusCode != c.status || string(b) != c.body || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("IN %s: %d %s %s, want %d %s", c.in, r.StatusCode, r.Header.Get("Content-Type"), b, c.status, c.body)
		}
	}
}

// TestGenerateStreamRunError: generate_stream to an ordinary model sends
// an error its run ends in as its first event, under the error's status,
// as Triton's response callback does; a request refused before it runs is
// a JSON error.
func TestGenerateStreamRunError(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	r, b := e.do(t, "POST", "/v2/models/linear/generate_stream", []byte(fmt.Sprintf(`{"INPUT__0": [%d, 1, 2, 3]}`, fake.FailValue)), nil)
	if want := "data: " + errorJSON("fake linear: request asked to fail") + "\n\n"; r.StatusCode != 500 || string(b) != want || r.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Errorf("model error: %d %s %q, want 500 %q", r.StatusCode, r.Header.Get("Content-Type"), b, want)
	}
	// 36 elements are a batch of 9 rows of 4 (generate's shape), over
	// max_batch_size 8: refused by validation.
	r, b = e.do(t, "POST", "/v2/models/linear/generate_stream", []byte(`{"INPUT__0": [`+strings.Repeat("1, ", 35)+`1]}`), nil)
	if r.StatusCode != 400 || r.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), "batch-size must be <= 8") {
		t.Errorf("invalid request: %d %s %s", r.StatusCode, r.Header.Get("Content-Type"), b)
	}
	r, b = e.do(t, "POST", "/v2/models/linear/generate_stream", []byte(`{"INPUT__0": [1, 2, 3, 4]}`), nil)
	if evs := sseEvents(t, b); r.StatusCode != 200 || len(evs) != 1 || evs[0]["OUTPUT__0"] == nil {
		t.Errorf("served: %d %s", r.StatusCode, b)
	}
	// Failures count either way.
	m, err := e.mgr.Get("linear", -1)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Scheduler.Stats(); st.Fail.Count != 2 {
		t.Errorf("failures counted: %d, want 2", st.Fail.Count)
	}
}

// TestInferServerParameterTypes: the parameters Triton consumes must
// have their types, or its JSON library's reading fails behind "Unable
// to parse 'X'" (http_server.cc, ParseJsonTritonParams, INTERNAL so
// 500); keys starting with "triton_" are refused (400); an "id" that is
// not a string is refused before any parameter (ParseJsonTritonRequestID,
// 500); the first refused parameter in document order is named.
func TestInferServerParameterTypes(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel}, 0)
	const (
		input    = `"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":[5]}]`
		str      = "attempt to access JSON non-string as string"
		boolean  = "attempt to access JSON non-boolean as boolean"
		unsigned = "attempt to access JSON non-unsigned-integer as unsigned-integer"
		reserved = "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
	)
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"parameters":{"sequence_id":true},` + input + `}`, 500, "Unable to parse 'sequence_id': " + str},
		{`{"parameters":{"sequence_id":-3},` + input + `}`, 500, "Unable to parse 'sequence_id': " + str},
		{`{"parameters":{"sequence_id":{}},` + input + `}`, 500, "Unable to parse 'sequence_id': " + str},
		{`{"parameters":{"sequence_start":1},` + input + `}`, 500, "Unable to parse 'sequence_start': " + boolean},
		{`{"parameters":{"sequence_end":null},` + input + `}`, 500, "Unable to parse 'sequence_end': " + boolean},
		{`{"parameters":{"binary_data_output":"yes"},` + input + `}`, 500, "Unable to parse 'binary_data_output': " + boolean},
		{`{"parameters":{"priority":-1},` + input + `}`, 500, "Unable to parse 'priority': " + unsigned},
		{`{"parameters":{"priority":"high"},` + input + `}`, 500, "Unable to parse 'priority': " + unsigned},
		{`{"parameters":{"timeout":1.5},` + input + `}`, 500, "Unable to parse 'timeout': " + unsigned},
		{`{"parameters":{"triton_enable_empty_final_response":true},` + input + `}`, 400, reserved},
		{`{"parameters":{"triton_mine":1},` + input + `}`, 400, reserved},
		// Document order decides, whatever the kind of refusal.
		{`{"parameters":{"triton_mine":1,"timeout":"x"},` + input + `}`, 400, reserved},
		{`{"parameters":{"timeout":"x","triton_mine":1},` + input + `}`, 500, "Unable to parse 'timeout': " + unsigned},
		{`{"parameters":{"p":null,"priority":-1},` + input + `}`, 400, "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."},
		// The id comes first, wherever it is.
		{`{"parameters":{"priority":-1},"id":7,` + input + `}`, 500, "Unable to parse 'id': " + str},
		{`{"id":null,` + input + `}`, 500, "Unable to parse 'id': " + str},
	} {
		r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(c.body), nil)
		if want := errorJSON(c.msg); r.StatusCode != c.status || string(b) != want {
			t.Errorf("%s: %d %s, want %d %s", c.body, r.StatusCode, b, c.status, want)
		}
	}
	r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"id":"a","parameters":{"priority":18446744073709551615,"timeout":0,"binary_data_output":false,"x":-1.5},`+input+`}`), nil)
	if r.StatusCode != 200 || !strings.Contains(string(b), `"id":"a"`) {
		t.Errorf("parameters of their types: %d %s", r.StatusCode, b)
	}
}

// TestGenerateRequestID: generate's member "id" is the request's id
// (ParseJsonTritonRequestID, before the conversion: a non-string is
// refused first, 500) and also a parameter for the model, as the
// conversion makes every member that names no input; each response
// echoes it (GenerateRequestClass::FinalizeResponse).
func TestGenerateRequestID(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo, "repeat": frontendtest.Repeat}, 0)
	r, b := e.do(t, "POST", "/v2/models/echo/generate", []byte(`{"IN":"x","id":"req \"1\""}`), nil)
	if want := `{"id":"req \"1\"","model_name":"echo","model_version":"2","OUT":"x"}`; r.StatusCode != 200 || string(b) != want {
		t.Errorf("generate with an id: %d %s, want %s", r.StatusCode, b, want)
	}
	r, b = e.do(t, "POST", "/v2/models/repeat/generate_stream", []byte(`{"id":"s","IN":[1,2]}`), nil)
	if evs := sseEvents(t, b); r.StatusCode != 200 || len(evs) != 2 || evs[0]["id"] != "s" || evs[1]["id"] != "s" {
		t.Errorf("generate_stream with an id: %d %v", r.StatusCode, evs)
	}
	for _, body := range []string{`{"IN":"x","id":5}`, `{"stop":null,"id":["a"]}`, `{"parameters":{"IN":5},"id":false}`} {
		r, b := e.do(t, "POST", "/v2/models/echo/generate", []byte(body), nil)
		if want := errorJSON("Unable to parse 'id': attempt to access JSON non-string as string"); r.StatusCode != 500 || string(b) != want {
			t.Errorf("%s: %d %s, want 500 %s", body, r.StatusCode, b, want)
		}
	}
	m, err := e.mgr.Get("echo", -1)
	if err != nil {
		t.Fatal(err)
	}
	req, err := generateRequest([]byte(`{"IN":"x","id":"abc"}`), m)
	if err != nil || req.ID != "abc" || req.Parameters["id"] != "abc" {
		t.Errorf("generate request: %v, id %q, parameters %v", err, req.ID, req.Parameters)
	}
}

// TestGenerateInputShape: a generate member carries only a count of
// elements (an array's length, 1 for a lone value), which fills the
// input's dims as Triton's ExactMappingInput fills them: fixed
// dimensions from the innermost out take their share, the innermost
// variable one the rest, other variable ones (a batching model's batch
// dimension among them) 1; a count that does not fit is refused (400).
// Nested arrays count as their outer length, so their elements overflow
// it (Triton's shape mismatch, 500).
func TestGenerateInputShape(t *testing.T) {
	const batchVar = `backend: "fake"
max_batch_size: 4
input [{ name: "V" data_type: TYPE_INT32 dims: [-1, 2] }]
output [{ name: "V_OUT" data_type: TYPE_INT32 dims: [-1, 2] }]
parameters { key: "fake_mode" value { string_value: "identity" } }
`
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident, "echo": frontendtest.Echo, "half": halfModel, "bv": batchVar})
	unfit := func(name string) string {
		return fmt.Sprintf("The schema can not convert input '%s' to tensor with proper shape", name)
	}
	for _, c := range []struct {
		model, body string
		shape       []int64
		err         string
	}{
		{"linear", `{"INPUT__0":[1,2,3,4]}`, []int64{1, 4}, ""},
		{"linear", `{"INPUT__0":[1,2,3,4,5,6,7,8]}`, []int64{2, 4}, ""}, // the batch dimension takes the rest
		{"linear", `{"INPUT__0":[1,2,3]}`, nil, unfit("INPUT__0")},
		{"linear", `{"INPUT__0":1}`, nil, unfit("INPUT__0")},
		{"ident", `{"I":[1,2,3,4]}`, []int64{2, 2}, ""},
		{"ident", `{"I":[[1,2],[3,4]]}`, nil, unfit("I")},
		{"ident", `{"D":2.5}`, []int64{1}, ""},
		{"echo", `{"IN":"x"}`, []int64{1}, ""},
		{"echo", `{"IN":["a","b","c"]}`, []int64{3}, ""},
		{"echo", `{"IN":[]}`, []int64{0}, ""},
		{"bv", `{"V":[1,2,3,4,5,6]}`, []int64{1, 3, 2}, ""},
		{"bv", `{"V":[1,2,3]}`, nil, unfit("V")},
		{"half", `{"X":[[1,2],[3,4]]}`, nil, "Unable to parse 'data': Shape does not match true shape of 'data' field"},
	} {
		m, err := repo.Manager.Get(c.model, -1)
		if err != nil {
			t.Fatal(err)
		}
		req, err := generateRequest([]byte(c.body), m)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s %s: %v, want %q", c.model, c.body, err, c.err)
			}
			continue
		}
		if err != nil || len(req.Inputs) != 1 || fmt.Sprint(req.Inputs[0].Shape) != fmt.Sprint(c.shape) {
			t.Errorf("%s %s: %v %+v, want shape %v", c.model, c.body, err, req, c.shape)
		}
	}
}
