package python

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// stubCPUs reads the CPU list every thread of process pid may run on
// (Cpus_allowed_list), one entry per thread.
func stubCPUs(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("listing the threads of stub %d: %v", pid, err)
	}
	var lists []string
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended since the listing
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				lists = append(lists, strings.TrimSpace(v))
			}
		}
	}
	return lists
}

// allowedCPUs is the CPUs this process may run on.
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	var allowed []int
	for cpu := range backend.MaxCPU + 1 {
		if mine.IsSet(cpu) {
			allowed = append(allowed, cpu)
		}
	}
	return allowed
}

// TestStubHostPolicyCPUs: an instance under a host policy with cpu-cores
// runs its stub, every thread of it (numpy's BLAS threads included), on
// those CPUs only; an instance of the same model without one keeps the
// server's.
func TestStubHostPolicyCPUs(t *testing.T) {
	requirePython(t)
	allowed := allowedCPUs(t)
	if len(allowed) < 2 {
		t.Skipf("this process may run on CPUs %v only: confining a stub to fewer needs two", allowed)
	}
	last := allowed[len(allowed)-1]
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	spec.InstanceCPUs = [][]int{nil, {last}}

	free := load(t, b, spec, 0)
	confined := load(t, b, spec, 1)
	for _, l := range stubCPUs(t, confined.PID()) {
		if l != strconv.Itoa(last) {
			t.Errorf("a thread of the confined stub may run on CPUs %s, want %d only", l, last)
		}
	}
	own := stubCPUs(t, os.Getpid())[0]
	for _, l := range stubCPUs(t, free.PID()) {
		if l != own {
			t.Errorf("a thread of the unconfined stub may run on CPUs %s, want the server's %s", l, own)
		}
	}
	// The confined stub serves as any other.
	execute(t, confined, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{1}, 1)}})
}

// TestStubHostPolicyRefused: a stub that cannot keep to its policy's CPUs
// (none of them exists here) does not start, and the load says why.
func TestStubHostPolicyRefused(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	spec.InstanceCPUs = [][]int{{1023}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := b.NewInstance(ctx, spec, 0)
	if err == nil {
		inst.Close()
		t.Fatal("a stub confined to CPU 1023 started")
	}
	if !strings.Contains(err.Error(), "cannot confine the stub to CPUs 1023 (its host policy's cpu-cores)") {
		t.Errorf("error does not name the CPUs and the policy: %v", err)
	}
}

// TestStubSchedulingHostPolicy: stub-scheduling=auto counts an instance's
// host-policy CPUs. Two instances confined to one CPU start SCHED_BATCH
// though the server's own CPUs (four, here) would fit both.
func TestStubSchedulingHostPolicy(t *testing.T) {
	requirePython(t)
	const batch = 3 // SCHED_BATCH
	cpu := allowedCPUs(t)[0]
	b, _ := newTestBackend(t, Options{})
	b.sched = newStubSched([]int{0, 1, 2, 3})
	spec := probeSpec(t, 0)
	spec.ConfigJSON = []byte(`{"name":"probe","backend":"python","instance_group":[{"kind":"KIND_CPU","count":2}]}`)
	spec.InstanceCPUs = [][]int{{cpu}, {cpu}}
	for idx := range 2 {
		inst := load(t, b, spec, idx)
		for task, policy := range schedPolicies(t, inst.PID()) {
			if policy != batch {
				t.Errorf("instance %d: %s has policy %d, want SCHED_BATCH (%d)", idx, task, policy, batch)
			}
		}
	}
}
