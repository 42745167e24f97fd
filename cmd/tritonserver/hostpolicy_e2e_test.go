package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

// TestHostPolicyConfinesStubs: --host-policy=cpu,cpu-cores=N places every
// stub of the report's four-instance model (KIND_CPU groups fall under the
// policy "cpu", as on Triton), every thread of each, on CPU N, and the
// model serves as before.
func TestHostPolicyConfinesStubs(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	last := -1
	for cpu := range 1024 {
		if mine.IsSet(cpu) {
			last = cpu
		}
	}
	if mine.Count() < 2 {
		t.Skipf("this process may run on %d CPU: confining stubs to fewer needs two", mine.Count())
	}
	repo := seedRepo(t, "seed-model-repository-batched")
	base, _, logs := startServer(t, "--model-repository", repo, "--host-policy=cpu,cpu-cores="+strconv.Itoa(last))
	stubs := stubsOf(os.Getpid())
	if len(stubs) != 4 {
		t.Fatalf("%d python stub processes, want 4", len(stubs))
	}
	for _, pid := range stubs {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
		if len(tasks) == 0 {
			t.Fatalf("stub %d has no threads to read", pid)
		}
		for _, f := range tasks {
			data, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended since the listing
			}
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != strconv.Itoa(last) {
					t.Errorf("%s: may run on CPUs %s, want %d only", f, strings.TrimSpace(v), last)
				}
			}
		}
	}
	want := torchForward(t, filepath.Join(repo, "simple_linear", "1", "model.pt"), rowsFor(3, 1))
	got, err := inferJSON(base, rowsFor(3, 1))
	if err != nil || !closeTo(got, want, torchtest.Tolerance) {
		t.Fatalf("infer under the host policy: %v %v, want %v\n%s", got, err, want, logs.String())
	}
}
