package repository

import (
	"context"
	"slices"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// TestRateLimiterConfig loads instance groups with rate_limiter settings:
// accepted, each instance given its group's resources and priority, and a
// model needing more than --rate-limit-resource allows refused.
func TestRateLimiterConfig(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg+`instance_group [
  { count: 2 rate_limiter { resources [ { name: "R" count: 2 }, { name: "G" global: true count: 1 } ] priority: 3 } },
  { count: 1 }
]`, []string{"1"})
	writeModel(t, root, "big", linearCfg+`instance_group [{ rate_limiter { resources [ { name: "R" count: 9 } ] } }]`, []string{"1"})
	rl, err := scheduler.NewRateLimiter([]string{"R:4"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, RateLimiter: rl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	_ = m.LoadAll(context.Background())
	mod, err := m.Get("m", -1)
	if err != nil {
		t.Fatal(err)
	}
	lims := mod.Scheduler.Config().Limits
	want := scheduler.InstanceLimit{Priority: 3, Resources: []scheduler.Resource{{Name: "R", Count: 2}, {Name: "G", Global: true, Count: 1}}}
	if len(lims) != 3 || lims[2].Priority != 0 || len(lims[2].Resources) != 0 {
		t.Fatalf("limits %+v", lims)
	}
	for _, l := range lims[:2] {
		if l.Priority != want.Priority || !slices.Equal(l.Resources, want.Resources) {
			t.Fatalf("limits %+v, want %+v for the first group's instances", lims, want)
		}
	}
	if _, err := m.Get("big", -1); err == nil {
		t.Fatal("a model needing 9 copies of R with --rate-limit-resource=R:4 loaded")
	}
}
