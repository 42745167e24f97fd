package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// TestResponseCacheWhichModels checks which models get the response cache:
// only those enabling response_cache, only with a server cache, never a
// sequence model; a decoupled one is refused with Triton's text.
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
	if !caching(m, "cached") || caching(m, "plain") || caching(m, "seq") {
		t.Errorf("caching: cached %v plain %v seq %v, want true false false", caching(m, "cached"), caching(m, "plain"), caching(m, "seq"))
	}
	want := "Response Cache does not currently support model decoupled with 'decoupled' transaction policy"
	for _, e := range m.Index(false) {
		if e.Name == "decoupled" && (e.State != Unavailable || !strings.Contains(e.Reason, want)) {
			t.Errorf("decoupled with a cache: %s %q, want %q", e.State, e.Reason, want)
		}
	}
	if m := load(nil); caching(m, "cached") {
		t.Error("a model caches without a server cache (--cache-config)")
	}
}
