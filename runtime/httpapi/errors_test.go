package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// TestTritonErrors sends the requests of frontendtest.ErrorCases and checks
// Triton's HTTP status and its whole message in {"error": ...}.
func TestTritonErrors(t *testing.T) {
	e := newEnv(t, frontendtest.ErrorModels(), 0)
	for _, c := range frontendtest.ErrorCases() {
		t.Run(c.Name, func(t *testing.T) {
			var ins, outs []string
			var parts [][]byte
			for _, in := range c.Inputs {
				shape, _ := json.Marshal(in.Shape)
				ins = append(ins, fmt.Sprintf(`{"name":%q,"shape":%s,"datatype":%q,"parameters":{"binary_data_size":%d}}`, in.Name, shape, in.DataType, len(in.Data)))
				parts = append(parts, in.Data)
			}
			for _, o := range c.Outputs {
				outs = append(outs, fmt.Sprintf(`{"name":%q}`, o))
			}
			hdr := fmt.Sprintf(`{"id":%q,"inputs":[%s]`, c.ID, strings.Join(ins, ","))
			if len(outs) > 0 {
				hdr += `,"outputs":[` + strings.Join(outs, ",") + "]"
			}
			body, h := binaryBody(hdr+"}", parts...)
			path := "/v2/models/" + c.Model
			if c.Version != "" {
				path += "/versions/" + c.Version
			}
			r, b := e.do(t, "POST", path+"/infer", body, h)
			var er struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(b, &er); err != nil {
				t.Fatalf("error body is not JSON: %q", b)
			}
			if r.StatusCode != c.HTTP || er.Error != c.Want(false) {
				t.Errorf("got %d %q\nwant %d %q", r.StatusCode, er.Error, c.HTTP, c.Want(false))
			}
		})
	}
}

// TestJSONNestingLimit is Triton's limit of 100 levels for the request
// JSON (server's L0_http test_json_recursion_depth_limit: data nested 50
// deep is served, 120 deep refused with its text).
func TestJSONNestingLimit(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo}, 0)
	nested := func(depth int) []byte {
		return []byte(`{"inputs":[{"name":"IN","shape":[1],"datatype":"BYTES","data":` +
			strings.Repeat("[", depth) + `"hello"` + strings.Repeat("]", depth) + `}]}`)
	}
	if r, b := e.do(t, "POST", "/v2/models/echo/infer", nested(50), nil); r.StatusCode != 200 {
		t.Errorf("50 levels: %d %s", r.StatusCode, b)
	}
	r, b := e.do(t, "POST", "/v2/models/echo/infer", nested(120), nil)
	if want := `{"error":"JSON nesting depth exceeds maximum allowed limit (100)"}`; r.StatusCode != 400 || string(b) != want {
		t.Errorf("120 levels: %d %s, want 400 %s", r.StatusCode, b, want)
	}
}

// TestConfigServesFilledFields: the configuration endpoint shows the
// fields Triton serves for a config that sets few of them: the reshape,
// pinned memory (enabled unless set), preferred_batch_size defaulting to
// max_batch_size, instance groups named and counted, the version policy;
// metadata shows the dims clients send, not the reshape.
func TestConfigServesFilledFields(t *testing.T) {
	e := newEnv(t, map[string]string{"r": `backend: "fake"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 2] } }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [2, 2] }]
dynamic_batching { }
parameters { key: "fake_mode" value { string_value: "identity" } }
`}, 0)
	_, b := e.do(t, "GET", "/v2/models/r/config", nil, nil)
	for _, want := range []string{
		`"reshape":{"shape":[2,2]}`,
		`"input_pinned_memory":{"enable":true}`, `"output_pinned_memory":{"enable":true}`,
		`"preferred_batch_size":[4]`,
		`"instance_group":[{"name":"r","kind":"KIND_CPU","count":1`,
		`"version_policy":{"latest":{"num_versions":1}}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %s: %s", want, b)
		}
	}
	_, b = e.do(t, "GET", "/v2/models/r", nil, nil)
	if !strings.Contains(string(b), `"shape":[-1,4]`) {
		t.Errorf("metadata shows the reshape instead of dims: %s", b)
	}
}

// TestRequestTimeoutParameter: the request's "timeout" parameter
// (microseconds) applies under allow_timeout_override, and a request
// queued past it gets Triton's 503 "Request timeout expired".
func TestRequestTimeoutParameter(t *testing.T) {
	e := newEnv(t, map[string]string{"slow": `backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
dynamic_batching { default_queue_policy { default_timeout_microseconds: 60000000 allow_timeout_override: true } }
parameters { key: "fake_delay_us" value { string_value: "3000000" } }
`}, 0)
	body := func(params string) []byte {
		return []byte(`{"parameters":{` + params + `},"inputs":[{"name":"INPUT__0","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	}
	busy := make(chan int, 1)
	go func() {
		r, _ := e.do(t, "POST", "/v2/models/slow/infer", body(`"x":1`), nil)
		busy <- r.StatusCode
	}()
	// The busy request runs 3 s; on a loaded machine its call may take a
	// while to reach the server, and the timed one must queue behind it.
	time.Sleep(500 * time.Millisecond)
	r, b := e.do(t, "POST", "/v2/models/slow/infer", body(`"timeout":50000,"priority":1`), nil)
	if r.StatusCode != 503 || string(b) != `{"error":"Request timeout expired"}` {
		t.Errorf("queued request with timeout 50ms: %d %s", r.StatusCode, b)
	}
	if c := <-busy; c != 200 {
		t.Errorf("the busy request: %d", c)
	}
	if r, b := e.do(t, "POST", "/v2/models/slow/infer", body(`"timeout":"soon"`), nil); r.StatusCode != 500 || string(b) != errorJSON("Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer") {
		t.Errorf("a string timeout: %d %s", r.StatusCode, b)
	}
}

// halfModel copies each of its optional inputs (INT32, FP16, BF16, any
// length) to the output of the same position.
const halfModel = `backend: "fake"
max_batch_size: 0
input [
  { name: "X" data_type: TYPE_INT32 dims: [-1] optional: true },
  { name: "H" data_type: TYPE_FP16 dims: [-1] optional: true },
  { name: "G" data_type: TYPE_BF16 dims: [-1] optional: true }
]
output [
  { name: "X_OUT" data_type: TYPE_INT32 dims: [-1] },
  { name: "H_OUT" data_type: TYPE_FP16 dims: [-1] },
  { name: "G_OUT" data_type: TYPE_BF16 dims: [-1] }
]
parameters { key: "fake_mode" value { string_value: "identity" } }
`

// TestJSONHalfPrecision: FP16 and BF16 have no JSON spelling. Triton's
// http_server.cc refuses them as JSON input data (ReadDataFromJson) and
// as JSON output data (WriteDataToJson), 400 with its words; as binary
// data both ways they are served.
func TestJSONHalfPrecision(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel}, 0)
	errBody := func(msg string) string { return `{"error":"` + msg + `"}` }
	for _, dt := range []string{"FP16", "BF16"} {
		name := map[string]string{"FP16": "H", "BF16": "G"}[dt]
		r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"inputs":[{"name":"`+name+`","shape":[2],"datatype":"`+dt+`","data":[1.5,2]}]}`), nil)
		if want := errBody("receiving " + dt + " data via JSON is not supported. Please use the binary data format for input " + name); r.StatusCode != 400 || string(b) != want {
			t.Errorf("%s input as JSON: %d %s, want 400 %s", dt, r.StatusCode, b, want)
		}

		// 1.5 and 2 in the type's 16 bits.
		data := map[string][]byte{"FP16": {0x00, 0x3e, 0x00, 0x40}, "BF16": {0xc0, 0x3f, 0x00, 0x40}}[dt]
		in := `{"name":"` + name + `","shape":[2],"datatype":"` + dt + `","parameters":{"binary_data_size":4}}`
		refused := errBody("sending " + dt + " data via JSON is not supported. Please use the binary data format for output")
		for _, c := range []struct{ what, rest string }{
			{"output not named, JSON by default", ``},
			{"output named, JSON by default", `,"outputs":[{"name":"` + name + `_OUT"}]`},
			{"output named with binary_data false", `,"parameters":{"binary_data_output":true},"outputs":[{"name":"` + name + `_OUT","parameters":{"binary_data":false}}]`},
		} {
			body, h := binaryBody(`{"inputs":[`+in+`]`+c.rest+`}`, data)
			if r, b := e.do(t, "POST", "/v2/models/half/infer", body, h); r.StatusCode != 400 || string(b) != refused {
				t.Errorf("%s, %s: %d %s, want 400 %s", dt, c.what, r.StatusCode, b, refused)
			}
		}
		body, h := binaryBody(`{"parameters":{"binary_data_output":true},"inputs":[`+in+`]}`, data)
		r, b = e.do(t, "POST", "/v2/models/half/infer", body, h)
		n, _ := strconv.Atoi(r.Header.Get(HeaderLength))
		if r.StatusCode != 200 || n <= 0 || n > len(b) || !bytes.Equal(b[n:], data) {
			t.Errorf("%s output as binary data: %d %q", dt, r.StatusCode, b)
		}
	}
}

// TestJSONDataNotArray: Triton reads an input's "data" member as an array
// (http_server.cc: MemberAsArray("data") behind "Unable to parse 'data'")
// and refuses anything else, null included, with its JSON library's
// INTERNAL error; an input with no elements has no data read at all.
func TestJSONDataNotArray(t *testing.T) {
	e := newEnv(t, map[string]string{"half": halfModel}, 0)
	const want = `{"error":"Unable to parse 'data': attempt to access JSON non-array as array (input 'X')"}`
	for _, data := range []string{`5`, `"5"`, `null`, `{"a":5}`, `true`} {
		r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":`+data+`}]}`), nil)
		if r.StatusCode != 500 || string(b) != want {
			t.Errorf(`"data": %s: %d %s, want 500 %s`, data, r.StatusCode, b, want)
		}
	}
	// The same value in an array is served.
	r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":[5]}]}`), nil)
	if r.StatusCode != 200 || !strings.Contains(string(b), `"data":[5]`) {
		t.Errorf(`"data": [5]: %d %s`, r.StatusCode, b)
	}
	// No elements: whatever "data" holds is not read.
	for _, data := range []string{`5`, `[1,2]`, `null`} {
		r, b := e.do(t, "POST", "/v2/models/half/infer", []byte(`{"inputs":[{"name":"X","shape":[0],"datatype":"INT32","data":`+data+`}]}`), nil)
		if r.StatusCode != 200 || !strings.Contains(string(b), `"shape":[0],"data":[]`) {
			t.Errorf(`shape [0] with "data": %s: %d %s`, data, r.StatusCode, b)
		}
	}
	// "data": null beside binary data is data given twice.
	body, h := binaryBody(`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","data":null,"parameters":{"binary_data_size":4}}]}`, []byte{5, 0, 0, 0})
	if r, b := e.do(t, "POST", "/v2/models/half/infer", body, h); r.StatusCode != 400 {
		t.Errorf(`"data": null with binary_data_size: %d %s`, r.StatusCode, b)
	}
}
