package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// inferRoute takes a request the mux's infer patterns take, with the same
// model and version, and leaves every other one (unclean or escaped paths,
// other methods and endpoints) to the mux.
func TestInferRouteAgreesWithMux(t *testing.T) {
	type route struct {
		ok             bool
		model, version string
	}
	mux := http.NewServeMux()
	var got route
	for _, p := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("POST "+p+"/infer", func(w http.ResponseWriter, r *http.Request) {
			got = route{true, r.PathValue("model"), r.PathValue("version")}
		})
	}
	for _, c := range []struct{ method, target string }{
		{"POST", "/v2/models/m/infer"},
		{"POST", "/v2/models/m/versions/3/infer"},
		{"POST", "/v2/models/a%20b/infer"},
		{"POST", "/v2/models/a%2Fb/infer"},
		{"POST", "/v2/models/%41/infer"},
		{"POST", "/v2/models/m/versions/a%2Fb/infer"},
		{"POST", "/v2/models//infer"},
		{"POST", "/v2/models/./infer"},
		{"POST", "/v2/models/../infer"},
		{"POST", "/v2/models/m/versions//infer"},
		{"POST", "/v2/models/m/versions/infer"},
		{"POST", "/v2/models/m/versions/1/x/infer"},
		{"POST", "/v2/models/m/infer/"},
		{"POST", "/v2/models/infer"},
		{"POST", "/v2/models/m/x/infer"},
		{"POST", "/v2//models/m/infer"},
		{"GET", "/v2/models/m/infer"},
		{"POST", "/v2/models/m/generate"},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		got = route{}
		mux.ServeHTTP(httptest.NewRecorder(), r)
		model, version, ok := inferRoute(r)
		if ok && (got != route{true, model, version}) {
			t.Errorf("%s %s: inferRoute takes it as %q version %q, the mux as %+v", c.method, c.target, model, version, got)
		}
		// A plainly escaped path the mux routes to infer is one inferRoute
		// takes: the fast path is the usual one.
		if !ok && got.ok && r.URL.RawPath == "" {
			t.Errorf("%s %s: the mux routes it to infer (%+v), inferRoute does not", c.method, c.target, got)
		}
	}
}

// TestWrongMethod: an endpoint asked with a method it does not take is
// answered 405 {"error":"Method Not Allowed"}, as Triton answers it, with
// the methods it takes in Allow; a path no route knows stays 404.
func TestWrongMethod(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	for _, c := range []struct {
		method, path, allow string
	}{
		{"GET", "/v2/models/linear/infer", "POST"},
		{"PUT", "/v2/models/linear/versions/1/infer", "POST"},
		{"POST", "/v2/health/live", "GET"},
		{"DELETE", "/v2/models/linear", "GET"},
		{"PUT", "/v2/logging", "GET, POST"},
		{"GET", "/v2/repository/index", "POST"},
	} {
		r, b := e.do(t, c.method, c.path, nil, nil)
		if r.StatusCode != http.StatusMethodNotAllowed || string(b) != `{"error":"Method Not Allowed"}` || r.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %s (Allow %q), want 405 with Allow %q", c.method, c.path, r.StatusCode, b, r.Header.Get("Allow"), c.allow)
		}
	}
	if r, b := e.do(t, "GET", "/v2/nothing", nil, nil); r.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no such endpoint") {
		t.Errorf("GET /v2/nothing: %d %s, want 404", r.StatusCode, b)
	}
}
