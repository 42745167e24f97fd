package python

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// TestEnvCachePruned: after an extraction the env cache is brought back
// under env-cache-max-bytes by removing the least recently used envs that
// nothing uses (an env in use stays, however old), and with
// env-cache-max-age-secs the unused envs last used too long ago go too.
func TestEnvCachePruned(t *testing.T) {
	modelDir, cache := t.TempDir(), t.TempDir()
	r := envResolver{cacheDir: cache, maxBytes: 1 << 30, cacheMaxBytes: 5 << 19, // 2.5 MiB: two 1 MiB envs
		digests: &digestCache{}, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	resolve := func(name string) *execEnv {
		t.Helper()
		path := filepath.Join(modelDir, name+".tar.gz")
		if _, err := os.Stat(path); err != nil {
			writeTarGz(t, path, tarEntry{name: "venv/bin/python3", body: "#!/bin/sh\n", mode: 0o755},
				tarEntry{name: "venv/lib/data", body: strings.Repeat(name, 1<<20/len(name))})
		}
		spec := &backend.ModelSpec{Name: "m", ModelDir: modelDir, Parameters: map[string]string{EnvPathParameter: path}}
		env, ok, err := r.resolve(ctx, spec)
		if err != nil || !ok {
			t.Fatalf("resolving %s: %v %v", name, ok, err)
		}
		t.Cleanup(env.Release)
		return env
	}
	cached := func(env *execEnv) bool {
		_, err := os.Stat(env.Interpreter)
		return err == nil
	}
	// lastUsed makes env look used d ago.
	lastUsed := func(env *execEnv, d time.Duration) {
		t.Helper()
		marker := filepath.Join(filepath.Dir(env.Root), readyMarker)
		if err := os.Chtimes(marker, time.Now().Add(-d), time.Now().Add(-d)); err != nil {
			t.Fatal(err)
		}
	}

	a := resolve("a") // in use throughout, and the oldest
	lastUsed(a, 3*time.Hour)
	b := resolve("b")
	b.Release()
	lastUsed(b, 2*time.Hour)
	c := resolve("c") // over the bound: b goes, a is in use
	if !cached(a) || cached(b) || !cached(c) {
		t.Fatalf("after c: a %v b %v c %v, want a and c kept, b pruned", cached(a), cached(b), cached(c))
	}
	a.Release()
	d := resolve("d") // a, now unused, is the least recently used
	if cached(a) || !cached(c) || !cached(d) {
		t.Fatalf("after d: a %v c %v d %v, want a pruned", cached(a), cached(c), cached(d))
	}
	// A pruned env is extracted again by its next user.
	if a2 := resolve("a"); !cached(a2) {
		t.Fatal("a pruned env was not extracted again")
	}

	// By age alone: unused and last used over the bound ago.
	r.cacheMaxBytes, r.cacheMaxAge = 0, time.Hour
	c.Release()
	lastUsed(c, 2*time.Hour)
	lastUsed(d, 2*time.Hour) // old but in use
	e := resolve("e")
	if cached(c) || !cached(d) || !cached(e) {
		t.Fatalf("by age: c %v d %v e %v, want c pruned, d (in use) and e kept", cached(c), cached(d), cached(e))
	}

	b0, _ := newTestBackend(t, Options{})
	for k, v := range map[string]string{KeyEnvCacheMaxBytes: "-1", KeyEnvCacheMaxAge: "soon"} {
		if err := loadErr(t, b0, nil, map[string]string{k: v}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}
