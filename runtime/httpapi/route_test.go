package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
