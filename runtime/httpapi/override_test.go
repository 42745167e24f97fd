package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// TestLoadWithFileOverrides: Triton's "file:<path>" load parameters carry
// base64 model files; with a config the model serves from them (here a
// version the repository lacks), without one, or with content that is not
// base64, the load is refused.
func TestLoadWithFileOverrides(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	e := serveRepo(t, repo, Options{Manager: repo.Manager, ModelControl: true})
	cfg, _ := json.Marshal(`{"backend": "fake", "max_batch_size": 2,
	  "input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [4]}],
	  "output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [3]}]}`)
	for body, want := range map[string]string{
		`{"parameters":{"file:4/model.pt":"AQ=="}}`:                           "a config override must be given with override files",
		`{"parameters":{"config":` + string(cfg) + `,"file:4/model.pt":"*"}}`: "load parameter 'file:4/model.pt' of model 'linear' must be a base64 string",
	} {
		if r, b := e.do(t, "POST", "/v2/repository/models/linear/load", []byte(body), nil); r.StatusCode != 400 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, r.StatusCode, b, want)
		}
	}
	body := `{"parameters":{"config":` + string(cfg) + `,"file:4/model.pt":"AQ=="}}`
	if r, b := e.do(t, "POST", "/v2/repository/models/linear/load", []byte(body), nil); r.StatusCode != 200 {
		t.Fatalf("load with files: %d %s", r.StatusCode, b)
	}
	r, b := e.do(t, "GET", "/v2/models/linear", nil, nil)
	var md struct {
		Versions []string `json:"versions"`
	}
	if r.StatusCode != 200 || json.Unmarshal(b, &md) != nil || len(md.Versions) != 1 || md.Versions[0] != "4" {
		t.Fatalf("metadata after a load with files: %d %s", r.StatusCode, b)
	}
}
