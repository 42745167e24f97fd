package repository

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// placingBackend is the fake backend as a CPUPlacer: it records the CPUs
// each instance it creates was given.
type placingBackend struct {
	*fake.Backend
	mu   sync.Mutex
	cpus map[int][]int // instance index -> ModelSpec.InstanceCPUs[idx]
}

func (b *placingBackend) PlacesInstances() bool { return true }

func (b *placingBackend) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	b.mu.Lock()
	if idx < len(spec.InstanceCPUs) {
		b.cpus[idx] = spec.InstanceCPUs[idx]
	}
	b.mu.Unlock()
	return b.Backend.NewInstance(ctx, spec, idx)
}

// TestHostPolicyCPUs: each instance gets the CPUs of its group's host
// policy: the group's host_policy when it names one, "cpu" for a KIND_CPU
// group that does not, nothing for a name no --host-policy defines (as
// on Triton); a backend whose instances run in the server's process
// refuses a model under a policy with CPUs, naming the group and policy.
func TestHostPolicyCPUs(t *testing.T) {
	root := t.TempDir()
	groups := `instance_group [
  { count: 2 kind: KIND_CPU host_policy: "stubs" },
  { count: 1 kind: KIND_CPU },
  { count: 1 kind: KIND_CPU host_policy: "undefined" }
]`
	writeModel(t, root, "lin", linearCfg+groups, []string{"1"})
	policies := map[string][]int{"stubs": {1}, "cpu": {0, 1}}
	pb := &placingBackend{Backend: fake.New(), cpus: map[int][]int{}}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": pb}, StrictModelConfig: true, HostPolicies: policies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[int][]int{0: {1}, 1: {1}, 2: {0, 1}, 3: nil}
	for idx, cpus := range want {
		if got, ok := pb.cpus[idx]; !ok || !slices.Equal(got, cpus) {
			t.Errorf("instance %d: CPUs %v (seen %v), want %v", idx, got, ok, cpus)
		}
	}

	inproc, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, HostPolicies: policies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inproc.Close(context.Background()) })
	_ = inproc.LoadAll(context.Background())
	wantRefused(t, inproc, map[string]refusal{"lin": {want: "instance group lin_0 of model lin is under host policy 'stubs', whose cpu-cores backend 'fake' cannot apply"}})

	// Without policies, or with one nobody names, nothing is confined and
	// every backend loads the model.
	free, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, HostPolicies: map[string][]int{"other": {0}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = free.Close(context.Background()) })
	if err := free.LoadAll(context.Background()); err != nil {
		t.Fatalf("a model under no defined policy failed to load: %v", err)
	}
}
