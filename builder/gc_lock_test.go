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
