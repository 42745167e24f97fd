package python

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/envcache"
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
		marker := filepath.Join(filepath.Dir(env.Root), envcache.ReadyMarker)
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

// TestEnvCacheLocksPruned: two resolvers sharing one cache dir (as two
// servers do) prune each other's unused envs and never one the other
// uses, and a pruned env leaves no lock files behind, nor does an env
// whose directory is gone. Both keep resolving while the other prunes:
// an env held is always complete.
func TestEnvCacheLocksPruned(t *testing.T) {
	modelDir, cache := t.TempDir(), t.TempDir()
	newResolver := func() *envResolver {
		return &envResolver{cacheDir: cache, maxBytes: 1 << 30, cacheMaxBytes: 1, // every unused env goes
			digests: &digestCache{}, log: slog.New(slog.DiscardHandler)}
	}
	r1, r2 := newResolver(), newResolver()
	archive := func(name string) string {
		path := filepath.Join(modelDir, name+".tar.gz")
		if _, err := os.Stat(path); err != nil {
			writeTarGz(t, path, tarEntry{name: "venv/bin/python3", body: "#!/bin/sh\n", mode: 0o755},
				tarEntry{name: "venv/lib/data", body: name})
		}
		return path
	}
	resolve := func(r *envResolver, name string) (*execEnv, error) {
		spec := &backend.ModelSpec{Name: "m", ModelDir: modelDir, Parameters: map[string]string{EnvPathParameter: archive(name)}}
		env, _, err := r.resolve(context.Background(), spec)
		return env, err
	}
	// locks lists the cache's lock files, and whether each has its env.
	locks := func() map[string]bool {
		ents, err := os.ReadDir(cache)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range ents {
			if name, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
				out[e.Name()] = isDir(filepath.Join(cache, name))
			} else if name, ok := strings.CutSuffix(e.Name(), envcache.UseSuffix); ok {
				out[e.Name()] = isDir(filepath.Join(cache, name))
			}
		}
		return out
	}

	held, err := resolve(r2, "a") // r2 uses a throughout the first part
	if err != nil {
		t.Fatal(err)
	}
	a, _ := resolve(r1, "a")
	a.Release()
	b, err := resolve(r1, "b") // prunes nothing r2 holds
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	if !isDir(held.Root) {
		t.Fatal("r1 pruned the env r2 uses")
	}
	// A lock pair whose env is gone (a failed extraction's) goes at the
	// next pruning.
	orphan := filepath.Join(cache, strings.Repeat("ab", 32))
	for _, suffix := range []string{".lock", envcache.UseSuffix} {
		if err := os.WriteFile(orphan+suffix, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	held.Release()
	c, err := resolve(r2, "c") // a and b are unused now: both go, with their locks
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	want := map[string]bool{filepath.Base(filepath.Dir(c.Root)) + ".lock": true, filepath.Base(filepath.Dir(c.Root)) + envcache.UseSuffix: true}
	if got := locks(); !maps.Equal(got, want) {
		t.Fatalf("lock files after pruning: %v, want only c's %v", got, want)
	}

	// Both at once, each pruning what the other does not hold (the
	// archives written first: the goroutines only read them).
	archive("d")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, r := range []*envResolver{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 20 {
				name := []string{"a", "b", "c", "d"}[(n+i)%4]
				env, err := resolve(r, name)
				if err != nil {
					errs <- fmt.Errorf("resolving %s: %w", name, err)
					return
				}
				_, err = os.Stat(env.Interpreter)
				env.Release()
				if err != nil {
					errs <- fmt.Errorf("env %s held but incomplete: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for name, hasEnv := range locks() {
		if !hasEnv {
			t.Errorf("lock file %s left without its env", name)
		}
	}
}
