package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/metrics"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// A model enabling response_cache is answered from the cache on a repeated
// request: the model runs once, the statistics count the hit and the miss,
// and the metrics carry Triton's per-model cache counters. A model without
// the setting never caches, cache or not.
func TestResponseCacheSkipsExecution(t *testing.T) {
	cache, err := scheduler.NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	repo := frontendtest.NewRepo(t, map[string]string{
		"cached": frontendtest.Linear + "response_cache { enable: true }",
		"linear": frontendtest.Linear,
	}, func(o *repository.Options) { o.Cache = cache })
	srv := httptest.NewServer(New(Options{Manager: repo.Manager}))
	defer srv.Close()
	ms := httptest.NewServer(metrics.Handler(metrics.NewRegistry(repo.Manager)))
	defer ms.Close()
	get := func(url string) string {
		t.Helper()
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	body := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	var answers []string
	for _, m := range []string{"cached", "linear"} {
		for i := 0; i < 3; i++ {
			r, err := http.Post(srv.URL+"/v2/models/"+m+"/versions/1/infer", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 200 {
				t.Fatalf("%s: %d %s", m, r.StatusCode, b)
			}
			if m == "cached" {
				answers = append(answers, string(b))
			}
		}
	}
	if answers[0] != answers[1] || answers[1] != answers[2] {
		t.Fatalf("cached answers differ: %q", answers)
	}
	stats := func(m string) modelStatsJSON {
		var st struct {
			ModelStats []modelStatsJSON `json:"model_stats"`
		}
		b := get(srv.URL + "/v2/models/" + m + "/versions/1/stats")
		if err := json.Unmarshal([]byte(b), &st); err != nil || len(st.ModelStats) != 1 {
			t.Fatalf("%s %v", b, err)
		}
		return st.ModelStats[0]
	}
	c := stats("cached")
	is := c.InferenceStats
	if c.ExecutionCount != 1 || c.InferenceCount != 1 || is.Success.Count != 3 || is.CacheHit.Count != 2 || is.CacheMiss.Count != 1 || is.ComputeInfer.Count != 1 {
		t.Fatalf("cached model stats %+v", c)
	}
	if l := stats("linear"); l.ExecutionCount != 3 || l.InferenceStats.CacheHit.Count != 0 || l.InferenceStats.CacheMiss.Count != 0 {
		t.Fatalf("uncached model stats %+v", l)
	}
	text := get(ms.URL + "/metrics")
	for _, want := range []string{
		`nv_cache_num_hits_per_model{model="cached",version="1"} 2`,
		`nv_cache_num_misses_per_model{model="cached",version="1"} 1`,
		`nv_cache_hit_duration_per_model{model="cached",version="1"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, `nv_cache_num_hits_per_model{model="linear"`) {
		t.Error("a model without response_cache reports cache metrics")
	}
}
