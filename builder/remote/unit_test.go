package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/tritonbuild/tritonbuild/builder/remote"
	"github.com/tritonbuild/tritonbuild/builder/store"
)

// nodeDir makes a committed-looking store node by hand: a tree with a
// file, an executable, a directory and a symlink, and its manifest.
func nodeDir(t *testing.T, hash string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store", "nodes", "x-1-"+hash[:16])
	tree := filepath.Join(dir, "tree")
	for p, body := range map[string]string{"lib/libx.so.1": "elf", "bin/x": "#!/bin/sh\n", "share/x/doc.txt": "hello"} {
		os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755)
		if err := os.WriteFile(filepath.Join(tree, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(tree, "bin/x"), 0o755)
	os.Symlink("libx.so.1", filepath.Join(tree, "lib/libx.so"))
	m, err := store.BuildManifest(tree)
	if err != nil {
		t.Fatal(err)
	}
	m.NodeMeta = store.NodeMeta{Name: "x", Version: "1", Hash: hash, Epoch: 1700000000}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testRegistry(t *testing.T) string {
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host + "/cache"
}

func TestWriteTreeIsDeterministic(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	dir := nodeDir(t, hash)
	m, err := store.BuildManifest(filepath.Join(dir, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	var one, two bytes.Buffer
	if err := remote.WriteTree(context.Background(), &one, filepath.Join(dir, "tree"), m); err != nil {
		t.Fatal(err)
	}
	// New mtimes must not change the bytes.
	os.Chtimes(filepath.Join(dir, "tree", "bin", "x"), time1, time1)
	if err := remote.WriteTree(context.Background(), &two, filepath.Join(dir, "tree"), m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Error("the same tree packed twice gave different bytes")
	}
}

func TestPushPullVerifies(t *testing.T) {
	ctx := context.Background()
	ref := testRegistry(t)
	hash := strings.Repeat("cd", 32)
	dir := nodeDir(t, hash)
	p, err := remote.Push(ctx, ref, dir, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p.Ref, ":"+hash) {
		t.Errorf("pushed as %s, want the hash as tag", p.Ref)
	}
	dest := filepath.Join(t.TempDir(), "pulled")
	m, err := remote.Pull(ctx, ref, hash, dest, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "tree", "lib", "libx.so")); err != nil || l != "libx.so.1" {
		t.Errorf("symlink: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(dest, "tree", "bin", "x")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode of bin/x: %v %v", fi, err)
	}
	if err := remote.Verify(filepath.Join(dest, "tree"), m); err != nil {
		t.Fatal(err)
	}
	// A changed file, an extra file and a changed link are each caught.
	os.WriteFile(filepath.Join(dest, "tree", "share", "x", "doc.txt"), []byte("HELLO"), 0o644)
	var me *remote.MismatchError
	if err := remote.Verify(filepath.Join(dest, "tree"), m); !errors.As(err, &me) || me.Path != "share/x/doc.txt" {
		t.Errorf("changed file: %v", err)
	}
	os.WriteFile(filepath.Join(dest, "tree", "share", "x", "doc.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(dest, "tree", "extra"), nil, 0o644)
	if err := remote.Verify(filepath.Join(dest, "tree"), m); !errors.As(err, &me) || me.Path != "extra" {
		t.Errorf("extra file: %v", err)
	}
	// Pushing a store node whose tree no longer matches its manifest is
	// refused: a corrupted store is never shared.
	os.WriteFile(filepath.Join(dir, "tree", "bin", "x"), []byte("changed"), 0o755)
	if _, err := remote.Push(ctx, ref, dir, remote.Options{}); !errors.As(err, &me) {
		t.Errorf("push of a corrupted node: %v", err)
	}
	// An existing destination is never overwritten.
	if _, err := remote.Pull(ctx, ref, hash, dest, remote.Options{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("pull into an existing dir: %v", err)
	}
	if _, err := remote.Pull(ctx, ref, "nothex", filepath.Join(t.TempDir(), "d"), remote.Options{}); err == nil {
		t.Error("a malformed hash was accepted")
	}
}

var time1 = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
