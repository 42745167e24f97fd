package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

// GC skips a committed node whose lock another process holds (a forced
// rebuild or a pull replacing it), also when its version has a '-' in it,
// which the node directory's name alone cannot tell from the name's.
func TestGCSkipsLockedNodeWithDashedVersion(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("x"))
	k := store.Key{Name: "lib", Version: "2.0-rc1", Hash: hex.EncodeToString(sum[:])}
	staging := st.StagingDir(k)
	if err := os.MkdirAll(filepath.Join(staging, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := store.BuildManifest(filepath.Join(staging, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	m.NodeMeta = store.NodeMeta{Name: k.Name, Version: k.Version, Hash: k.Hash}
	if err := st.Commit(k, staging, m); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unlock, err := st.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	items, err := GC(ctx, st, GCOptions{Delete: true, Reachable: map[string]bool{}})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Has(k) {
		t.Fatalf("GC removed a node whose lock is held: %+v", items)
	}
}

// GC takes the source cache's leftovers: a partial download no fetch
// holds, and temporary files older than a day; a partial download being
// fetched and a fresh temporary file stay.
func TestGCSourceLeftovers(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	c := st.Sources()
	ctx := context.Background()
	idle, held := strings.Repeat("a", 64), strings.Repeat("b", 64)
	unlock, err := c.Lock(ctx, held) // also creates the cache's directories
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	write := func(rel string, age time.Duration) string {
		p := filepath.Join(c.Dir, rel)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
		return p
	}
	idlePart := write("partial/"+idle+".part", 0)
	heldPart := write("partial/"+held+".part", 0)
	oldTmp := write("tmp/git-0123456789ab-1", 48*time.Hour)
	newTmp := write("tmp/git-0123456789ab-2", time.Minute)
	items, err := GC(ctx, st, GCOptions{Delete: true})
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, it := range items {
		removed = append(removed, it.Path)
	}
	for _, p := range []string{idlePart, oldTmp} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s stays (removed %v)", p, removed)
		}
	}
	for _, p := range []string{heldPart, newTmp} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// GC prunes the server's python env cache by the server's own protocol
// (runtime/python/env.go): least recently used first by the ready marker's
// time, never an env a server uses (its .use lock held shared) or extracts
// (its .lock held), a removed env's two lock files with it; the lock files
// are not entries, and nothing else in the directory is touched. A dry run
// writes nothing.
func TestGCPythonEnvCache(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	ctx := context.Background()
	// env makes an extracted env of 1000 bytes last used (its marker
	// touched) ago, its directory changed dirAge ago; a negative ago makes
	// an env whose extraction has not finished.
	env := func(name string, ago, dirAge time.Duration) string {
		sum := sha256.Sum256([]byte(name))
		dir := filepath.Join(cache, hex.EncodeToString(sum[:]))
		if err := os.MkdirAll(filepath.Join(dir, "venv"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "venv", "data"), make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{".use", ".lock"} {
			if err := os.WriteFile(dir+suffix, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if ago >= 0 {
			marker := filepath.Join(dir, ".tritonbuild-env-ready")
			if err := os.WriteFile(marker, []byte("venv\n1000\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			when := time.Now().Add(-ago)
			if err := os.Chtimes(marker, when, when); err != nil {
				t.Fatal(err)
			}
		}
		when := time.Now().Add(-dirAge)
		if err := os.Chtimes(dir, when, when); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	newest := env("newest", 0, 5*time.Hour) // used last, though its directory is the oldest
	inUse := env("in use", 3*time.Hour, 0)
	unused := env("unused", 2*time.Hour, 0)
	extracting := env("extracting", -1, time.Hour)
	for _, f := range []string{"notes.txt", "other.lock"} {
		if err := os.WriteFile(filepath.Join(cache, f), []byte("not the cache's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	release, err := filelock.Shared(ctx, inUse+".use")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	unlock, err := filelock.Lock(ctx, extracting+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	listing := func() []string {
		ents, err := os.ReadDir(cache)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	paths := func(items []GCItem) []string {
		var out []string
		for _, it := range items {
			out = append(out, it.Path)
		}
		return out
	}
	opts := GCOptions{KeepCache: 1500, PythonEnvs: cache}
	before := listing()
	items, err := GC(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(items); len(got) != 1 || got[0] != unused {
		t.Errorf("dry run lists %v, want only %s", got, unused)
	}
	if after := listing(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("a dry run changed the cache: %v, was %v", after, before)
	}

	opts.Delete = true
	if items, err = GC(ctx, st, opts); err != nil {
		t.Fatal(err)
	}
	if got := paths(items); len(got) != 1 || got[0] != unused {
		t.Errorf("gc removed %v, want only %s", got, unused)
	}
	for _, p := range []string{unused, unused + ".use", unused + ".lock"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s stays after its env was removed: %v", p, err)
		}
	}
	for _, p := range []string{newest, inUse, extracting, filepath.Join(inUse, "venv", "data"), filepath.Join(cache, "notes.txt"), filepath.Join(cache, "other.lock")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}

	// Once its server lets go, the env in use goes too.
	release()
	if items, err = GC(ctx, st, opts); err != nil {
		t.Fatal(err)
	}
	if got := paths(items); len(got) != 1 || got[0] != inUse {
		t.Errorf("gc removed %v, want only %s", got, inUse)
	}
}
