package store

import (
	"os"
	"path/filepath"
	"testing"
)

// A pulled tree keeps its files' modes, and installed text files are often
// read-only (0444: perl modules, some headers). Relocating one to another
// store root must still rewrite it, and keep its mode.
func TestRelocateReadOnlyTextFile(t *testing.T) {
	oldRoot, newRoot := "/old/store", "/new/place/store"
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(tree, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tree, "lib", "config.pm")
	if err := os.WriteFile(f, []byte("prefix="+oldRoot+"/nodes/x-1-0123456789abcdef/tree\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	m, err := BuildManifestFor(tree, oldRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := RelocateStoreTree(tree, m, newRoot)
	if err != nil {
		t.Fatalf("relocating a tree with a read-only text file: %v", err)
	}
	data, _ := os.ReadFile(f)
	if want := "prefix=" + newRoot + "/nodes/x-1-0123456789abcdef/tree\n"; string(data) != want {
		t.Errorf("relocated file reads %q, want %q", data, want)
	}
	if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("relocated file's mode: %v %v, want 0444", st.Mode(), err)
	}
	got, err := BuildManifestFor(tree, newRoot)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != out.Digest {
		t.Errorf("relocated tree's digest %s, manifest says %s", got.Digest, out.Digest)
	}
}
