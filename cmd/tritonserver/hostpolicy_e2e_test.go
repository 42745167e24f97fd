package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

// TestHostPolicyConfinesStubs: --host-policy=cpu,cpu-cores=N places every
// stub of the report's four-instance model (KIND_CPU groups fall under the
// policy "cpu", as on Triton), every thread of each, on CPU N, and the
// model serves as before.
func TestHostPolicyConfinesStubs(t *testing.T) {
	last := testenv.ConfinableCPU(t)
	repo := seedRepo(t, "seed-model-repository-batched")
	base, _, logs := startServer(t, "--model-repository", repo, "--host-policy=cpu,cpu-cores="+strconv.Itoa(last))
	stubs := stubsOf(os.Getpid())
	if len(stubs) != 4 {
		t.Fatalf("%d python stub processes, want 4", len(stubs))
	}
	for _, pid := range stubs {
		for tid, cpus := range testenv.ThreadCPUs(t, pid) {
			if cpus != strconv.Itoa(last) {
				t.Errorf("stub %d thread %d: may run on CPUs %s, want %d only", pid, tid, cpus, last)
			}
		}
	}
	want := torchForward(t, filepath.Join(repo, "simple_linear", "1", "model.pt"), rowsFor(3, 1))
	got, err := inferJSON(base, rowsFor(3, 1))
	if err != nil || !closeTo(got, want, torchtest.Tolerance) {
		t.Fatalf("infer under the host policy: %v %v, want %v\n%s", got, err, want, logs.String())
	}
}

// TestHostPolicyBindsStubMemory: --host-policy=cpu,numa-node=N, Triton's
// spelling, starts every stub of the report's four-instance model with
// each thread's memory bound to node N, and the model serves as before.
func TestHostPolicyBindsStubMemory(t *testing.T) {
	node := testenv.MemoryNode(t)
	repo := seedRepo(t, "seed-model-repository-batched")
	base, _, logs := startServer(t, "--model-repository", repo, "--host-policy", "cpu,numa-node="+strconv.Itoa(node))
	stubs := stubsOf(os.Getpid())
	if len(stubs) != 4 {
		t.Fatalf("%d python stub processes, want 4", len(stubs))
	}
	want := "bind:" + strconv.Itoa(node)
	for _, pid := range stubs {
		for tid, policy := range testenv.ThreadMemoryPolicies(t, pid) {
			if policy != want {
				t.Errorf("stub %d thread %d: memory policy %s, want %s", pid, tid, policy, want)
			}
		}
	}
	got, err := inferJSON(base, rowsFor(3, 1))
	if err != nil || !closeTo(got, torchForward(t, filepath.Join(repo, "simple_linear", "1", "model.pt"), rowsFor(3, 1)), torchtest.Tolerance) {
		t.Fatalf("infer under the host policy: %v %v\n%s", got, err, logs.String())
	}
}
