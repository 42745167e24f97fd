package store

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The manifest is what a binary cache ships and what other machines
// verify trees against: its JSON and the tree digest must not drift. The
// expected bytes were produced by the code before the store was split out
// of package builder.
func TestManifestFormatIsPinned(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "share/d"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "a"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(root, "bin", "x"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("a", filepath.Join(root, "l"))
	for p, mode := range map[string]os.FileMode{"bin": 0o755, "share": 0o755, "share/d": 0o755, "a": 0o644, "bin/x": 0o755} {
		os.Chmod(filepath.Join(root, p), mode) // whatever the umask
	}
	m, err := BuildManifest(root)
	if err != nil {
		t.Fatal(err)
	}
	m.NodeMeta = NodeMeta{Name: "x", Version: "1", Hash: "h", SourceURL: "u", SHA256: "s", Epoch: 5}
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	want := `{
 "name": "x",
 "version": "1",
 "hash": "h",
 "source_url": "u",
 "sha256": "s",
 "epoch": 5,
 "digest": "sha256:100be1393e4335d800b581bcc41dab147cb7ec0e0cc5b6917e779423f93e874e",
 "files": [
  {"path": "a", "mode": 420, "size": 5, "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
  {"path": "bin", "mode": 2147484141},
  {"path": "bin/x", "mode": 493, "size": 10, "sha256": "a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf"},
  {"path": "l", "mode": 134218239, "link": "a"},
  {"path": "share", "mode": 2147484141},
  {"path": "share/d", "mode": 2147484141}
 ]
}`
	if got := compact(t, data); got != compact(t, []byte(want)) {
		t.Errorf("manifest changed:\n got %s\nwant %s", got, compact(t, []byte(want)))
	}
}

func compact(t *testing.T, data []byte) string {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// Commit is one rename after the manifest is written; a manifest for
// another hash is refused and nothing becomes visible.
func TestCommit(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Name: "x", Version: "1", Hash: strings.Repeat("ab", 32)}
	unlock, err := s.Lock(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	staging := s.StagingDir(k)
	if err := os.MkdirAll(filepath.Join(staging, "tree", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(staging, "tree", "bin", "x"), []byte("x"), 0o755)
	m, err := BuildManifest(filepath.Join(staging, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	m.NodeMeta = NodeMeta{Name: "x", Version: "1", Hash: strings.Repeat("cd", 32)}
	if err := s.Commit(k, staging, m); err == nil || s.Has(k) {
		t.Fatalf("a manifest of another hash was committed: %v", err)
	}
	m.Hash = k.Hash
	if err := s.Commit(k, staging, m); err != nil {
		t.Fatal(err)
	}
	got, err := s.Manifest(k)
	if err != nil || got.Digest != m.Digest || !s.Has(k) {
		t.Fatalf("committed manifest %+v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(s.TreeDir(k), "bin", "x")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("staging still there: %v", err)
	}
}
