package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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
