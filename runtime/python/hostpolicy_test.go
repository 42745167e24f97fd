package python

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// TestStubHostPolicyCPUs: an instance under a host policy with cpu-cores
// runs its stub, every thread of it (numpy's BLAS threads included), on
// those CPUs only; an instance of the same model without one keeps the
// server's.
func TestStubHostPolicyCPUs(t *testing.T) {
	requirePython(t)
	last := testenv.ConfinableCPU(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	spec.InstancePolicies = []backend.HostPolicy{{}, {CPUs: []int{last}}}

	free := load(t, b, spec, 0)
	confined := load(t, b, spec, 1)
	for _, l := range testenv.ThreadCPUs(t, confined.PID()) {
		if l != strconv.Itoa(last) {
			t.Errorf("a thread of the confined stub may run on CPUs %s, want %d only", l, last)
		}
	}
	own := testenv.ThreadCPUs(t, os.Getpid())[os.Getpid()]
	for _, l := range testenv.ThreadCPUs(t, free.PID()) {
		if l != own {
			t.Errorf("a thread of the unconfined stub may run on CPUs %s, want the server's %s", l, own)
		}
	}
	// The confined stub serves as any other.
	execute(t, confined, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{1}, 1)}})
}

// TestStubHostPolicyNUMANode: an instance under a host policy with
// numa-node starts its stub with every thread's memory bound to that node
// (Triton starts it from a thread so bound); a stub without one keeps the
// default policy, and so do the server's threads, the one that started the
// bound stub included. A node the kernel refuses fails the load naming the
// setting.
func TestStubHostPolicyNUMANode(t *testing.T) {
	requirePython(t)
	node := testenv.MemoryNode(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	spec.InstancePolicies = []backend.HostPolicy{{}, {NUMANodes: []int{node}}}
	free := load(t, b, spec, 0)
	bound := load(t, b, spec, 1)
	want := "bind:" + strconv.Itoa(node)
	for tid, policy := range testenv.ThreadMemoryPolicies(t, bound.PID()) {
		if policy != want {
			t.Errorf("thread %d of the bound stub has memory policy %s, want %s", tid, policy, want)
		}
	}
	for what, pid := range map[string]int{"the unbound stub": free.PID(), "the server": os.Getpid()} {
		for tid, policy := range testenv.ThreadMemoryPolicies(t, pid) {
			if policy != "default" {
				t.Errorf("thread %d of %s has memory policy %s, want default", tid, what, policy)
			}
		}
	}
	execute(t, bound, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{1}, 1)}})

	spec.InstancePolicies = []backend.HostPolicy{{NUMANodes: []int{backend.MaxNUMANode}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := b.NewInstance(ctx, spec, 0)
	if err == nil {
		inst.Close()
		t.Fatalf("a stub bound to NUMA node %d started", backend.MaxNUMANode)
	}
	if !strings.Contains(err.Error(), "the stub's memory (its host policy's numa-node): cannot bind memory to NUMA nodes 1023") {
		t.Errorf("error does not name the node and the policy: %v", err)
	}
}

// TestStubHostPolicyRefused: a stub that cannot keep to its policy's CPUs
// (none of them exists here) does not start, and the load says why.
func TestStubHostPolicyRefused(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	spec.InstancePolicies = []backend.HostPolicy{{CPUs: []int{1023}}}
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
	cpu := testenv.AllowedCPUs(t)[0]
	b, _ := newTestBackend(t, Options{})
	b.sched = newStubSched([]int{0, 1, 2, 3})
	spec := probeSpec(t, 0)
	spec.ConfigJSON = []byte(`{"name":"probe","backend":"python","instance_group":[{"kind":"KIND_CPU","count":2}]}`)
	spec.InstancePolicies = []backend.HostPolicy{{CPUs: []int{cpu}}, {CPUs: []int{cpu}}}
	for idx := range 2 {
		inst := load(t, b, spec, idx)
		for task, policy := range schedPolicies(t, inst.PID()) {
			if policy != batch {
				t.Errorf("instance %d: %s has policy %d, want SCHED_BATCH (%d)", idx, task, policy, batch)
			}
		}
	}
}
