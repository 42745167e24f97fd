package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

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
