package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/store"
)

// commitFakeNode commits a tree holding files into st and returns its node.
func commitFakeNode(t *testing.T, st *store.Store, name string, files map[string]string) *Node {
	t.Helper()
	sum := sha256.Sum256([]byte(name + "\x00" + files["share/"+name+".txt"]))
	n := &Node{Name: name, Version: "1", Hash: hex.EncodeToString(sum[:]), Status: StatusCached}
	staging := st.StagingDir(n.Key())
	for p, c := range files {
		full := filepath.Join(staging, "tree", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := store.BuildManifestFor(filepath.Join(staging, "tree"), st.Root)
	if err != nil {
		t.Fatal(err)
	}
	m.NodeMeta = store.NodeMeta{Name: name, Version: "1", Hash: n.Hash}
	if err := st.Commit(n.Key(), staging, m); err != nil {
		t.Fatal(err)
	}
	return n
}

// InstallIfChanged must not trust its stamp when the prefix was since
// installed with other trees (by `tritonbuild install`, which calls
// Install directly) or when an install of the same trees was interrupted.
func TestInstallIfChangedNoticesOtherInstalls(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := []*Node{commitFakeNode(t, st, "a", map[string]string{"share/a.txt": "a\n"})}
	b := []*Node{commitFakeNode(t, st, "b", map[string]string{"share/b.txt": "b\n"})}
	prefix := filepath.Join(t.TempDir(), "prefix")
	ctx := context.Background()
	has := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(prefix, rel))
		return err == nil
	}

	if err := InstallIfChanged(ctx, st, a, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(ctx, st, b, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if has("share/a.txt") || !has("share/b.txt") {
		t.Fatal("setup: the install of b did not replace a")
	}
	if err := InstallIfChanged(ctx, st, a, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if !has("share/a.txt") || has("share/b.txt") {
		t.Fatalf("InstallIfChanged(a) after an install of b left the prefix with b (a.txt %v, b.txt %v)", has("share/a.txt"), has("share/b.txt"))
	}

	// An install of b that stops before copying anything, then of a again.
	if _, err := Install(ctx, st, b, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Install(cancelled, st, a, prefix, InstallOptions{}); err == nil {
		t.Fatal("setup: a cancelled install succeeded")
	}
	if err := InstallIfChanged(ctx, st, a, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if !has("share/a.txt") {
		t.Fatal("InstallIfChanged(a) after an interrupted install of a skipped the install: share/a.txt is missing")
	}
}

// An interrupted `install --force` must not leave the files it was about
// to replace recorded as ours: a later install would delete them as stale.
func TestInterruptedForcedInstallKeepsForeignFiles(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := []*Node{commitFakeNode(t, st, "a", map[string]string{"share/a.txt": "a\n"})}
	b := []*Node{commitFakeNode(t, st, "b", map[string]string{"share/b.txt": "b\n"})}
	prefix := filepath.Join(t.TempDir(), "prefix")
	user := filepath.Join(prefix, "share", "a.txt")
	if err := os.MkdirAll(filepath.Dir(user), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("the user's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Install(cancelled, st, a, prefix, InstallOptions{Force: true}); err == nil {
		t.Fatal("setup: a cancelled install succeeded")
	}
	if b, err := os.ReadFile(user); err != nil || string(b) != "the user's own\n" {
		t.Fatalf("setup: the interrupted install touched the user's file: %q %v", b, err)
	}
	if _, err := Install(ctx, st, b, prefix, InstallOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(user); err != nil || string(b) != "the user's own\n" {
		t.Fatalf("the user's share/a.txt, never replaced, was removed as a stale file of ours: %q %v", b, err)
	}
}

// Installs into one prefix take turns: an install waits while another
// holds the prefix's lock, and goes on once it is released.
func TestInstallWaitsForThePrefixLock(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := []*Node{commitFakeNode(t, st, "a", map[string]string{"share/a.txt": "a\n"})}
	prefix := filepath.Join(t.TempDir(), "prefix")
	unlock, err := st.LockPrefix(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Install(short, st, a, prefix, InstallOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Install while another holds the prefix: %v, want it to wait", err)
	}
	if err := InstallIfChanged(short, st, a, prefix, InstallOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InstallIfChanged while another holds the prefix: %v, want it to wait", err)
	}
	if _, err := os.Stat(prefix); !os.IsNotExist(err) {
		t.Errorf("the waiting installs touched the prefix (%v)", err)
	}
	unlock()
	if err := InstallIfChanged(context.Background(), st, a, prefix, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "share", "a.txt")); err != nil {
		t.Error(err)
	}
}
