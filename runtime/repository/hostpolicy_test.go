package repository

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// placingBackend is the fake backend as a CPUPlacer: it records the host
// policy each instance it creates was given.
type placingBackend struct {
	*fake.Backend
	mu       sync.Mutex
	policies map[int]backend.HostPolicy // instance index -> ModelSpec.InstancePolicy(idx)
}

func (b *placingBackend) PlacesInstances() bool { return true }

func (b *placingBackend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	b.mu.Lock()
	b.policies[idx] = spec.InstancePolicy(idx)
	b.mu.Unlock()
	return b.Backend.NewInstance(ctx, spec, idx)
}

// TestHostPolicyCPUs: each instance gets its group's host policy, CPUs
// and NUMA node: the group's host_policy when it names one, "cpu" for a
// KIND_CPU group that does not, nothing for a name no --host-policy
// defines (as on Triton); a backend whose instances run in the server's
// process refuses a model under a policy, naming the group and policy.
func TestHostPolicyCPUs(t *testing.T) {
	root := t.TempDir()
	groups := `instance_group [
  { count: 2 kind: KIND_CPU host_policy: "stubs" },
  { count: 1 kind: KIND_CPU },
  { count: 1 kind: KIND_CPU host_policy: "undefined" }
]`
	writeModel(t, root, "lin", linearCfg+groups, []string{"1"})
	policies := map[string]backend.HostPolicy{"stubs": {CPUs: []int{1}}, "cpu": {CPUs: []int{0, 1}, NUMANodes: []int{0}}}
	pb := &placingBackend{Backend: fake.New(), policies: map[int]backend.HostPolicy{}}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": pb}, StrictModelConfig: true, HostPolicies: policies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[int]backend.HostPolicy{0: policies["stubs"], 1: policies["stubs"], 2: policies["cpu"], 3: {}}
	for idx, p := range want {
		if got, ok := pb.policies[idx]; !ok || !slices.Equal(got.CPUs, p.CPUs) || !slices.Equal(got.NUMANodes, p.NUMANodes) {
			t.Errorf("instance %d: policy %+v (seen %v), want %+v", idx, got, ok, p)
		}
	}

	inproc, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, HostPolicies: policies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inproc.Close(context.Background()) })
	_ = inproc.LoadAll(context.Background())
	wantRefused(t, inproc, map[string]refusal{"lin": {want: "instance group lin_0 of model lin is under host policy 'stubs', whose cpu-cores and numa-node backend 'fake' cannot apply"}})

	// A policy of a NUMA node alone places instances too.
	numa, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true,
		HostPolicies: map[string]backend.HostPolicy{"cpu": {NUMANodes: []int{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = numa.Close(context.Background()) })
	_ = numa.LoadAll(context.Background())
	wantRefused(t, numa, map[string]refusal{"lin": {want: "instance group lin_1 of model lin is under host policy 'cpu', whose cpu-cores and numa-node backend 'fake' cannot apply"}})

	// Without policies, or with one nobody names, nothing is confined and
	// every backend loads the model.
	free, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, HostPolicies: map[string]backend.HostPolicy{"other": {CPUs: []int{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = free.Close(context.Background()) })
	if err := free.LoadAll(context.Background()); err != nil {
		t.Fatalf("a model under no defined policy failed to load: %v", err)
	}
}
