package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// unprivileged runs f as an ordinary owner of its files: as root, on a
// thread whose effective capabilities are cleared. Capabilities belong to a
// thread on Linux, and root passes permission checks on read-only
// directories only through them (CAP_DAC_OVERRIDE, CAP_FOWNER), so f then
// meets a 0555 directory as any other user does. The thread is never
// unlocked: it ends with its goroutine, capabilities and all. Any other
// user runs f as it is.
func unprivileged(t *testing.T, f func() error) error {
	t.Helper()
	if os.Geteuid() != 0 {
		return f()
	}
	type result struct{ err, setup error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- result{setup: fmt.Errorf("capget: %w", err)}
			return
		}
		data[0].Effective, data[1].Effective = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- result{setup: fmt.Errorf("capset: %w", err)}
			return
		}
		done <- result{err: f()}
	}()
	r := <-done
	if r.setup != nil {
		t.Fatalf("dropping this thread's capabilities: %v", r.setup)
	}
	return r.err
}

// readOnlyTree makes dir/tree as Go's module cache leaves one: directories
// 0555 (one 0000, which its owner cannot even list), files 0444, and a
// symlink to a read-only directory outside it, which removal must leave
// as it is. It returns the tree and the outside directory.
func readOnlyTree(t *testing.T, dir string) (string, string) {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{"mod/pkg@v1/sub", "mod/pkg@v1/closed", outside} {
		if !filepath.IsAbs(d) {
			d = filepath.Join(tree, d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"mod/pkg@v1/go.mod", "mod/pkg@v1/sub/a.go", "mod/pkg@v1/closed/b.go", filepath.Join(outside, "keep")} {
		if !filepath.IsAbs(f) {
			f = filepath.Join(tree, f)
		}
		if err := os.WriteFile(f, []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(tree, "mod/pkg@v1/out")); err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		path string
		mode fs.FileMode
	}{{"mod/pkg@v1/closed", 0}, {"mod/pkg@v1/sub", 0o555}, {"mod/pkg@v1", 0o555}, {"mod", 0o555}, {outside, 0o555}}
	for _, m := range modes {
		p := m.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(tree, p)
		}
		if err := os.Chmod(p, m.mode); err != nil {
			t.Fatal(err)
		}
	}
	// The test's temporary directory must go too, for a user other than
	// root: cleanups run last registered first, so this runs before
	// TempDir's own.
	t.Cleanup(func() {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	return tree, outside
}

// A tree with read-only directories is removed also by a user other than
// root (a plain os.RemoveAll, run the same way, is refused: the check that
// the test sees what such a user sees), and a directory a symlink in it
// names keeps its mode and content.
func TestRemoveTreeRemovesReadOnlyDirectories(t *testing.T) {
	control, _ := readOnlyTree(t, t.TempDir())
	if err := unprivileged(t, func() error { return os.RemoveAll(control) }); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("os.RemoveAll of a tree with 0555 directories without privilege: %v, want a permission error", err)
	}

	tree, outside := readOnlyTree(t, t.TempDir())
	if err := unprivileged(t, func() error { return RemoveTree(tree) }); err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if _, err := os.Lstat(tree); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there: %v", tree, err)
	}
	st, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o555 {
		t.Errorf("the directory outside the tree, named by a symlink in it, became %v", st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the directory outside the tree lost its file: %v", err)
	}
	if err := RemoveTree(filepath.Join(t.TempDir(), "never-made")); err != nil {
		t.Errorf("RemoveTree of a path that does not exist: %v", err)
	}
}

// A forced rebuild commits over a tree with read-only directories: the
// exchange puts the old tree where the staging dir was, and removing it
// must not fail the commit for a user other than root.
func TestCommitReplacesTreeWithReadOnlyDirectories(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Name: "gomod", Version: "1", Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	commit := func(fill func(tree string)) error {
		staging := st.StagingDir(k)
		tree := filepath.Join(staging, "tree")
		if err := os.MkdirAll(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		fill(tree)
		m, err := BuildManifest(tree)
		if err != nil {
			t.Fatal(err)
		}
		m.NodeMeta = NodeMeta{Name: k.Name, Version: k.Version, Hash: k.Hash}
		return unprivileged(t, func() error { return st.Commit(k, staging, m) })
	}
	if err := commit(func(tree string) {
		ro, _ := readOnlyTree(t, tree)
		if err := os.Rename(ro, filepath.Join(tree, "cache")); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	if err := commit(func(tree string) {
		if err := os.WriteFile(filepath.Join(tree, "new"), []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatalf("commit over a tree with read-only directories: %v", err)
	}
	if _, err := os.Stat(filepath.Join(st.TreeDir(k), "new")); err != nil {
		t.Errorf("the new tree is not in place: %v", err)
	}
	if _, err := os.Lstat(st.StagingDir(k)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the old tree stays at %s: %v", st.StagingDir(k), err)
	}
}
