package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

type noModels struct{}

func (noModels) Models() []*repository.Model { return nil }

func TestHostMetrics(t *testing.T) {
	srv := httptest.NewServer(Handler(NewRegistry(noModels{})))
	defer srv.Close()
	var body string
	for i := 0; i < 2; i++ { // the second scrape has a CPU delta to report
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	if _, _, ok := readMem(); !ok {
		testenv.Unavailable(t, "no /proc/meminfo on this system: the CPU memory metrics cannot be read")
	}
	for _, m := range []string{"nv_cpu_utilization ", "nv_cpu_memory_total_bytes ", "nv_cpu_memory_used_bytes "} {
		if !strings.Contains(body, m) {
			t.Errorf("missing %s in:\n%s", m, body)
		}
	}
	total, avail, _ := readMem()
	if total == 0 || avail > total {
		t.Errorf("meminfo total %d available %d", total, avail)
	}
	if strings.Contains(body, "go_goroutines") {
		t.Error("the registry must not include the default Go collectors")
	}
}

// waitingBackend's instances report, as a python stub's schedstat would,
// that every execute spent as long waiting for a core as running: what
// four CPU-bound stubs on too few cores show the scheduler.
type waitingBackend struct{}

type waitingInstance struct{ run atomic.Int64 }

func (waitingBackend) NewInstance(context.Context, *backend.ModelSpec, int) (backend.Instance, error) {
	return &waitingInstance{}, nil
}

func (in *waitingInstance) Execute(_ context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	const took = time.Millisecond
	time.Sleep(took)
	in.run.Add(int64(took / 2))
	resps := make([]*backend.Response, len(reqs))
	for i := range resps {
		resps[i] = &backend.Response{}
	}
	return resps, nil
}

func (in *waitingInstance) ExecCPU() (run, wait time.Duration, ok bool) {
	r := time.Duration(in.run.Load())
	return r, r, true
}

func (in *waitingInstance) Close() error { return nil }

type oneModel struct{ m *repository.Model }

func (o oneModel) Models() []*repository.Model { return []*repository.Model{o.m} }

// TestActiveInstances reads tritonbuild_model_active_instances: the
// instance count at rest, and fewer once executes that overlap report
// waiting for a core, as scheduler.Active says.
func TestActiveInstances(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := scheduler.New(ctx, waitingBackend{}, &backend.ModelSpec{Name: "busy"}, scheduler.Config{Name: "busy", Version: 1, Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	srv := httptest.NewServer(Handler(NewRegistry(oneModel{&repository.Model{Name: "busy", Version: 1, Scheduler: s}})))
	defer srv.Close()
	active := func() string {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, `tritonbuild_model_active_instances{model="busy",version="1"} `); ok {
				return v
			}
		}
		t.Fatalf("no tritonbuild_model_active_instances for the model in:\n%s", b)
		return ""
	}
	if got := active(); got != "4" {
		t.Fatalf("at rest: %s active instances, want the model's 4", got)
	}
	load, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for load.Err() == nil {
				if _, err := s.Infer(load, &backend.Request{}); err != nil && load.Err() == nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	// The concentrator sheds one instance per 100 ms window at most.
	deadline := time.Now().Add(10 * time.Second)
	for got := active(); got == "4"; got = active() {
		if time.Now().After(deadline) {
			t.Fatalf("still %s active instances after 10 s of executes that waited for a core half their time", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := strconv.Atoi(active()); err != nil || n < 1 || n > 3 {
		t.Errorf("under load: %d active instances (%v), want 1 to 3", n, err)
	}
}

// TestMetricsPortRoutes: the metrics port answers as Triton's does:
// /metrics and /metrics/ serve the metrics, another method is 405 with
// Triton's JSON error, another path 200 with nothing in it.
func TestMetricsPortRoutes(t *testing.T) {
	srv := httptest.NewServer(Handler(NewRegistry(noModels{})))
	defer srv.Close()
	do := func(method, path string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for _, p := range []string{"/metrics", "/metrics/"} {
		if code, body, _ := do(http.MethodGet, p); code != http.StatusOK || !strings.Contains(body, "nv_cpu_utilization") {
			t.Errorf("GET %s: %d %.80q, want 200 with the metrics", p, code, body)
		}
	}
	code, body, h := do(http.MethodPost, "/metrics")
	if code != http.StatusMethodNotAllowed || body != `{"error":"Method Not Allowed"}` || h.Get("Allow") != "GET" {
		t.Errorf("POST /metrics: %d %q (Allow %q), want 405 {\"error\":\"Method Not Allowed\"} allowing GET", code, body, h.Get("Allow"))
	}
	for _, p := range []string{"/", "/metricsx", "/v2/health/live"} {
		if code, body, _ := do(http.MethodGet, p); code != http.StatusOK || body != "" {
			t.Errorf("GET %s: %d %q, want 200 and no body, as Triton's metrics port answers", p, code, body)
		}
	}
}
