package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// BenchmarkHandler measures the frontend and scheduler path per request
// without the network: decode, validate, queue, execute (fake), encode.
func BenchmarkHandler(b *testing.B) {
	for _, kind := range []string{"json", "binary"} {
		b.Run(kind, func(b *testing.B) {
			h := newEnv(b, map[string]string{"linear": frontendtest.Linear}, 0).srv.Config.Handler
			var body []byte
			hdr := map[string]string{}
			if kind == "json" {
				body = []byte(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[0.5,0.75,1.0,1.25]}]}`)
			} else {
				j := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
				body = append([]byte(j), frontendtest.F32Bytes(inputRows(1, 0.5))...)
				hdr[HeaderLength] = strconv.Itoa(len(j))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("POST", "/v2/models/linear/versions/1/infer", bytes.NewReader(body))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
