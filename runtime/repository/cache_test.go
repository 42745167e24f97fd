package repository

import (
	"context"
	"maps"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// TestResponseCacheWhichModels checks which models get the response cache:
// only those enabling response_cache, only with a server cache; a
// sequence model or a decoupled one enabling it is refused with Triton's
// text (with or without a server cache, as Triton's ValidateModelConfig).
func TestResponseCacheWhichModels(t *testing.T) {
	const on = "response_cache { enable: true }\n"
	root := t.TempDir()
	writeModel(t, root, "plain", linearCfg, []string{"1"})
	writeModel(t, root, "cached", linearCfg+on, []string{"1"})
	writeModel(t, root, "seq", linearCfg+on+"sequence_batching {}", []string{"1"})
	writeModel(t, root, "decoupled", linearCfg+on+"model_transaction_policy { decoupled: true }", []string{"1"})
	cache, err := scheduler.NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	load := func(c *scheduler.Cache) *Manager {
		m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true, Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		_ = m.LoadAll(context.Background())
		return m
	}
	caching := func(m *Manager, name string) bool {
		t.Helper()
		mod, err := m.Get(name, -1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return mod.Scheduler.Caching()
	}
	m := load(cache)
	if !caching(m, "cached") || caching(m, "plain") {
		t.Errorf("caching: cached %v plain %v, want true false", caching(m, "cached"), caching(m, "plain"))
	}
	refused := map[string]refusal{
		"decoupled": {want: "Response Cache does not currently support model decoupled with 'decoupled' transaction policy. Please disable the response cache."},
		"seq":       {want: "Response Cache does not currently support model seq with sequence batching scheduler. Please disable the response cache."},
	}
	wantRefused(t, m, maps.Clone(refused))
	m = load(nil)
	if caching(m, "cached") {
		t.Error("a model caches without a server cache (--cache-config)")
	}
	wantRefused(t, m, refused)
}
