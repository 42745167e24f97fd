package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// TestEnsembleChainsTwoModels serves frontendtest.Chain over HTTP: the
// outputs are the two models applied in turn, and the metadata shows the
// ensemble platform.
func TestEnsembleChainsTwoModels(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "stage2": frontendtest.Stage2, "chain": frontendtest.Chain}, 0)
	x := []float32{1, 2, 3, 4, -1, 0.5, 2, 8}
	body := fmt.Sprintf(`{"inputs":[{"name":"IN","datatype":"FP32","shape":[2,4],"data":%s}],"outputs":[{"name":"OUT"}]}`, mustJSON(x))
	resp, out := e.do(t, "POST", "/v2/models/chain/infer", []byte(body), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("infer: %d %s", resp.StatusCode, out)
	}
	var r struct {
		Outputs []struct {
			Name  string    `json:"name"`
			Shape []int64   `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	want := fake.Linear(fake.Linear(x, 4, 3), 3, 2)
	if len(r.Outputs) != 1 || r.Outputs[0].Name != "OUT" || fmt.Sprint(r.Outputs[0].Shape) != "[2 2]" || len(r.Outputs[0].Data) != len(want) {
		t.Fatalf("outputs: %s", out)
	}
	for i := range want {
		if math.Abs(float64(r.Outputs[0].Data[i]-want[i])) > 1e-5 {
			t.Fatalf("OUT = %v, want %v", r.Outputs[0].Data, want)
		}
	}
	resp, out = e.do(t, "GET", "/v2/models/chain", nil, nil)
	var md struct {
		Platform string `json:"platform"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(out, &md) != nil || md.Platform != "ensemble" {
		t.Errorf("metadata: %d %s", resp.StatusCode, out)
	}
}

// TestUnloadDependents: Triton's unload parameter unload_dependents unloads
// an ensemble's composing models with it; a value that is not a boolean is
// refused.
func TestUnloadDependents(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear, "stage2": frontendtest.Stage2, "chain": frontendtest.Chain})
	e := serveRepo(t, repo, Options{Manager: repo.Manager, ModelControl: true})
	r, b := e.do(t, "POST", "/v2/repository/models/chain/unload", []byte(`{"parameters":{"unload_dependents":"yes"}}`), nil)
	if r.StatusCode != 400 || !strings.Contains(string(b), "unload parameter 'unload_dependents' of model 'chain' must be a boolean") {
		t.Fatalf("bad parameter: %d %s", r.StatusCode, b)
	}
	if r, b := e.do(t, "POST", "/v2/repository/models/chain/unload", []byte(`{"parameters":{"unload_dependents":true}}`), nil); r.StatusCode != 200 {
		t.Fatalf("unload: %d %s", r.StatusCode, b)
	}
	for _, m := range []string{"chain", "linear", "stage2"} {
		if r, _ := e.do(t, "GET", "/v2/models/"+m+"/ready", nil, nil); r.StatusCode == 200 {
			t.Errorf("%s still ready after unloading chain with its dependents", m)
		}
	}
}
