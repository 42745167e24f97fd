package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func scrapeAll(t *testing.T, s *testServer) string {
	t.Helper()
	resp, err := http.Get("http://" + s.addrs["Metrics Service"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestMetricsConfig: Triton's --metrics-config, --allow-cpu-metrics and
// --pinned-memory-pool-byte-size on the running program: latency
// summaries with the configured quantiles, latency counters switched off,
// failures by reason, the pinned pool gauges.
func TestMetricsConfig(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--metrics-config", "summary_latencies=true", "--metrics-config=counter_latencies=false",
		"--metrics-config", "summary_quantiles=0.5:0.05,0.99:0.001", "--metrics-interval-ms=100", "--allow-cpu-metrics=false",
		"--pinned-memory-pool-byte-size=1048576")
	base := "http://" + s.addrs["HTTPService"]
	for i := 0; i < 3; i++ {
		if code, body := post(t, base+"/v2/models/a/infer", `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	post(t, base+"/v2/models/a/infer", `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[-999,2,3,4]}]}`) // fails in the model
	post(t, base+"/v2/models/a/infer", `{"inputs":[{"name":"INPUT__0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`)      // fails validation
	m := scrapeAll(t, s)
	for _, want := range []string{
		`nv_inference_request_summary_us{model="a",version="1",quantile="0.5"}`,
		`nv_inference_request_summary_us{model="a",version="1",quantile="0.99"}`,
		`nv_inference_request_summary_us_count{model="a",version="1"} 3`,
		`nv_inference_queue_summary_us_count{model="a",version="1"} 3`,
		`nv_inference_compute_infer_summary_us_count{model="a",version="1"} 3`,
		`nv_inference_request_failure{model="a",reason="BACKEND",version="1"} 1`,
		`nv_inference_request_failure{model="a",reason="OTHER",version="1"} 1`,
		`nv_inference_request_failure{model="a",reason="REJECTED",version="1"} 0`,
		`nv_inference_request_failure{model="a",reason="CANCELED",version="1"} 0`,
		`nv_inference_request_success{model="a",version="1"} 3`,
		"nv_pinned_memory_pool_total_bytes 1.048576e+06",
		"nv_pinned_memory_pool_used_bytes 0",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, absent := range []string{"nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_cpu_utilization", `quantile="0.9"`} {
		if strings.Contains(m, absent) {
			t.Errorf("metrics have %s", absent)
		}
	}
	cancel()
	<-s.done

	// Triton's defaults: counters on, no summaries, CPU metrics on.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	s2 := startServe(t, ctx2, root)
	m = scrapeAll(t, s2)
	for _, want := range []string{"nv_inference_request_duration_us{", "nv_inference_compute_output_duration_us{", "nv_cpu_utilization", "nv_cpu_memory_used_bytes", "nv_pinned_memory_pool_total_bytes 2.68435456e+08"} {
		if !strings.Contains(m, want) {
			t.Errorf("default metrics lack %s", want)
		}
	}
	if strings.Contains(m, "_summary_us") {
		t.Error("summaries without summary_latencies")
	}
	cancel2()
	<-s2.done
	for _, bad := range []string{"--metrics-config=colour=red", "--metrics-config=summary_quantiles=2:0.1", "--metrics-interval-ms=0"} {
		if _, err := parseFlags([]string{"--model-repository=/m", bad}, io.Discard); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
