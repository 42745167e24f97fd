package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

type noModels struct{}

func (noModels) Models() []*repository.Model { return nil }

func TestHostMetrics(t *testing.T) {
	srv := httptest.NewServer(Handler(NewRegistry(noModels{})))
	defer srv.Close()
	var body string
	for i := 0; i < 2; i++ { // the second scrape has a CPU delta to report
		resp, err := srv.Client().Get(srv.URL)
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
