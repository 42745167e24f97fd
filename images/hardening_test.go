package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// layerHeaders returns the tar headers of the assembled layer named name.
func layerHeaders(t *testing.T, a *Assembly, name string) map[string]*tar.Header {
	t.Helper()
	layers, err := a.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range a.Summary.Layers {
		if l.Name != name {
			continue
		}
		rc, err := layers[i].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		out := map[string]*tar.Header{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimSuffix(h.Name, "/")] = h
		}
	}
	t.Fatalf("no layer %q among %+v", name, a.Summary.Layers)
	return nil
}

// A name starting with .wh. is a whiteout in an OCI layer: carried as is,
// it would delete a path of the layers below when the image is unpacked.
func TestWhiteoutNamesAreRefused(t *testing.T) {
	for _, c := range []struct {
		name, file, bad string // bad: the path the error names
		models          bool
	}{
		{"tree file", "lib/.wh.libfoo.so", "lib/.wh.libfoo.so", false},
		{"tree directory", "share/.wh.doc/README", "share/.wh.doc", false},
		{"opaque marker in the models", "m/.wh..wh..opq", "m/.wh..wh..opq", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			trees := scriptTrees(t, "server")
			o := Options{Trees: trees, Epoch: testEpoch}
			dir := trees[0].Dir
			if c.models {
				dir = t.TempDir()
				writeFiles(t, dir, map[string]string{"m/config.pbtxt": "name: \"m\"\n"})
				o.ModelRepository = dir
			}
			writeFiles(t, dir, map[string]string{c.file: ""})
			_, err := Assemble(context.Background(), o)
			var we *WhiteoutNameError
			if want := filepath.Join(dir, c.bad); !errors.As(err, &we) || we.Path != want || !strings.Contains(err.Error(), want) {
				t.Fatalf("want a WhiteoutNameError naming %s, got %v", want, err)
			}
		})
	}
	t.Run("prefix", func(t *testing.T) {
		_, err := Assemble(context.Background(), Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, Prefix: "/opt/.wh.triton"})
		if err == nil || !strings.Contains(err.Error(), ".wh.triton") {
			t.Fatalf("want the prefix refused, got %v", err)
		}
	})
	t.Run("host paths", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{".wh.lib/libx.so": "x"})
		lib := filepath.Join(dir, ".wh.lib", "libx.so")
		for _, c := range []*closure{{files: []string{lib}}, {dirs: []string{filepath.Dir(lib)}}, {links: []hostLink{{name: lib + ".1", target: "libx.so"}}}} {
			var we *WhiteoutNameError
			if _, err := baseLayerSpec(c); !errors.As(err, &we) {
				t.Errorf("closure %+v: want a WhiteoutNameError, got %v", c, err)
			}
		}
	})
}

// Links of the model repository that leave it are replaced by what they
// lead to (the image has nothing at the host paths they name); links
// inside it, and links dangling on the host too, stay links. Install trees
// keep their links as they are.
func TestModelRepositoryLinksOutAreCopied(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{
		"weights.pt":        "shared weights",
		"shared/labels.txt": "cat\ndog\n",
		"shared/deep/x.txt": "deep",
	})
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": "name: \"m\"\n", "m/1/model.pt": "version 1"})
	link := func(target, name string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	rel, err := filepath.Rel(filepath.Join(repo, "m", "3"), filepath.Join(outside, "weights.pt"))
	if err != nil {
		t.Fatal(err)
	}
	link(filepath.Join(outside, "weights.pt"), "m/2/model.pt") // absolute, out
	link(rel, "m/3/model.pt")                                  // relative, climbing out
	link(filepath.Join(outside, "shared"), "m/shared")         // a directory out
	link("../1/model.pt", "m/4/model.pt")                      // relative, inside
	link(filepath.Join(outside, "gone.pt"), "m/5/model.pt")    // dangling on the host
	trees := scriptTrees(t, "server")
	if err := os.Symlink(filepath.Join(outside, "weights.pt"), filepath.Join(trees[0].Dir, "lib", "weights.pt")); err != nil {
		t.Fatal(err)
	}

	a := assemble(t, Options{Trees: trees, Epoch: testEpoch, ModelRepository: repo})
	files := extractFiles(t, a.Image)
	for name, want := range map[string]string{
		"models/m/2/model.pt":                "shared weights",
		"models/m/shared/labels.txt":         "cat\ndog\n",
		"models/m/shared/deep/x.txt":         "deep",
		"opt/tritonserver/lib/libserver.txt": "library of server\n",
	} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
	h := layerHeaders(t, a, modelsLabel)
	// The two links to one file carry its bytes once.
	first, second := h["models/m/2/model.pt"], h["models/m/3/model.pt"]
	if first == nil || second == nil || first.Typeflag != tar.TypeReg || second.Typeflag != tar.TypeLink || second.Linkname != "models/m/2/model.pt" {
		t.Errorf("links to one outside file: %+v, %+v; want a file and a hard link to it", first, second)
	}
	if d := h["models/m/shared"]; d == nil || d.Typeflag != tar.TypeDir {
		t.Errorf("models/m/shared: %+v, want a directory", d)
	}
	for name, target := range map[string]string{"models/m/4/model.pt": "../1/model.pt", "models/m/5/model.pt": filepath.Join(outside, "gone.pt")} {
		if l := h[name]; l == nil || l.Typeflag != tar.TypeSymlink || l.Linkname != target {
			t.Errorf("%s: %+v, want a symlink to %s", name, l, target)
		}
	}
	if l := layerHeaders(t, a, "server")["opt/tritonserver/lib/weights.pt"]; l == nil || l.Typeflag != tar.TypeSymlink {
		t.Errorf("a tree's link out of it: %+v, want it kept as a symlink", l)
	}
}

// A link of the model repository to a directory holding the link itself
// would be copied forever: it is an error naming the link.
func TestModelRepositoryLinkLoopIsRefused(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": "name: \"m\"\n"})
	loop := filepath.Join(repo, "m", "all")
	if err := os.Symlink(repo, loop); err != nil {
		t.Fatal(err)
	}
	_, err := Assemble(context.Background(), Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, ModelRepository: repo})
	if err == nil || !strings.Contains(err.Error(), loop) || !strings.Contains(err.Error(), "never end") {
		t.Fatalf("want an error naming the looping link %s, got %v", loop, err)
	}
}

// rootfsTar writes a rootfs tarball of the given files (and their parent
// directories) and returns its bytes.
func rootfsTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// HOME is /home/triton on every base. A base image need not have it, and
// the python backend keeps its stubs and envs in the user cache directory
// below it: the image must carry it, owned by the image's user, as the
// scratch base does.
func TestHomeExistsOnEveryBase(t *testing.T) {
	rootfs := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(rootfs, rootfsTar(t, map[string]string{"etc/os-release": "test\n"}), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{"scratch", rootfs} {
		a := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, Base: base})
		cfg, err := a.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		home := ""
		for _, kv := range cfg.Config.Env {
			if v, ok := strings.CutPrefix(kv, "HOME="); ok {
				home = v
			}
		}
		if home != "/home/triton" || cfg.Config.User != DefaultUser {
			t.Fatalf("base %s: HOME %q, user %q", base, home, cfg.Config.User)
		}
		h := flattened(t, a.Image)["home/triton"]
		if h == nil || h.Typeflag != tar.TypeDir || h.Uid != 1000 || h.Gid != 1000 || h.Mode&0o700 != 0o700 {
			t.Errorf("base %s: /home/triton in the image: %+v, want a directory owned by 1000:1000", base, h)
		}
	}
}

// flattened returns the headers of the image's filesystem.
func flattened(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = h
	}
}

// A tree's own share/sbom.spdx.json (or a file where the SBOM's
// directories go) would be hidden by the SBOM layer: a conflict, not a
// silent replacement.
func TestTreeFileAtTheSBOMPathIsAConflict(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		trees := scriptTrees(t, "server", "vendor")
		writeFiles(t, trees[1].Dir, map[string]string{"share/sbom.spdx.json": "{\"spdxVersion\": \"SPDX-2.3\"}\n"})
		_, err := Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Path != "/opt/tritonserver/share/sbom.spdx.json" || ce.First != "vendor" || !strings.Contains(err.Error(), "SBOM") {
			t.Fatalf("want a ConflictError on the SBOM path naming vendor, got %v", err)
		}
	})
	t.Run("link where its directory goes", func(t *testing.T) {
		server := scriptTree(t, "server", true, "")
		if err := os.RemoveAll(filepath.Join(server.Dir, "share")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("lib", filepath.Join(server.Dir, "share")); err != nil {
			t.Fatal(err)
		}
		_, err := Assemble(context.Background(), Options{Trees: []Tree{server}, Epoch: testEpoch})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Path != "/opt/tritonserver/share" || ce.First != "server" {
			t.Fatalf("want a ConflictError on /opt/tritonserver/share, got %v", err)
		}
	})
}

// A gzip rootfs may end in NUL padding (GNU gzip and tar accept it): the
// base is read, and its layer holds exactly the gzip members, which
// containerd and Go's gzip reader (validate.Image here) read to their end.
func TestRootfsWithTrailingPadding(t *testing.T) {
	plain := rootfsTar(t, map[string]string{"etc/os-release": "padded\n"})
	// Two members, as pigz or a concatenation writes them.
	members := append(gzipped(t, plain[:512]), gzipped(t, plain[512:])...)
	dir := t.TempDir()
	padded := filepath.Join(dir, "rootfs.tar.gz")
	if err := os.WriteFile(padded, append(append([]byte(nil), members...), make([]byte, 10240)...), 0o644); err != nil {
		t.Fatal(err)
	}
	a := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, Base: padded})
	if err := validate.Image(a.Image); err != nil {
		t.Fatalf("image on a padded rootfs: %v", err)
	}
	if extractFiles(t, a.Image)["etc/os-release"] != "padded\n" {
		t.Error("rootfs content lost")
	}
	l := a.Summary.Layers[0]
	ds := sha256.Sum256(members)
	dd := sha256.Sum256(plain)
	if l.Name != "base:0" || l.Digest.Hex != hex.EncodeToString(ds[:]) || l.DiffID.Hex != hex.EncodeToString(dd[:]) || l.Size != int64(len(members)) {
		t.Errorf("base layer %+v: want the %d bytes of the members (digest %x), diffID %x", l, len(members), ds, dd)
	}

	garbage := filepath.Join(dir, "garbage.tar.gz")
	if err := os.WriteFile(garbage, append(append(append([]byte(nil), members...), 0, 0), "junk"...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Assemble(context.Background(), Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, Base: garbage})
	var be *BaseError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "other than NUL padding") || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("want a BaseError about the bytes after the gzip data, got %v", err)
	}
}

// A file rewritten in place with the same size and its old mtime put back
// (cp -p, rsync -t, tar x of a new version with the same dates) must not
// get the cached layer of its old content.
func TestCachedLayerFollowsRewrittenFile(t *testing.T) {
	trees := scriptTrees(t, "server")
	o := Options{Trees: trees, Epoch: testEpoch, CacheDir: t.TempDir()}
	lib := filepath.Join(trees[0].Dir, "lib", "libserver.txt")
	st, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	before := assemble(t, o)
	if got := extractFiles(t, before.Image)["opt/tritonserver/lib/libserver.txt"]; got != "library of server\n" {
		t.Fatalf("first image holds %q", got)
	}
	if err := os.WriteFile(lib, []byte("LIBRARY OF SERVER\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(lib, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	after := assemble(t, o)
	if got := extractFiles(t, after.Image)["opt/tritonserver/lib/libserver.txt"]; got != "LIBRARY OF SERVER\n" {
		t.Fatalf("second image holds %q: the cached layer of the old content was reused", got)
	}
	for _, l := range after.Summary.Layers {
		if l.Name == "server" && l.Cached {
			t.Error("the server layer came from the cache")
		}
	}
	// Nothing changed since: the layer comes from the cache.
	again := assemble(t, o)
	for _, l := range again.Summary.Layers {
		if l.Name == "server" && !l.Cached {
			t.Error("an unchanged tree's layer was written again")
		}
	}
}

// A layer whose files changed within racyWindow is fingerprinted only once
// they can no longer change without a new ctime; a ctime after now (another
// clock) has the content hashed instead.
func TestFingerprintOfRecentFiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec := func(ctime time.Time) *layerSpec {
		return &layerSpec{label: "t", entries: []entry{{name: "f", typ: tar.TypeReg, mode: 0o644, size: 3, src: file, ino: 1, mtimeNS: 1, ctimeNS: ctime.UnixNano()}}}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := spec(now.Add(-racyWindow-time.Second)).settle(done, now); err != nil {
		t.Errorf("a file changed long ago: settle %v, want no wait", err)
	}
	if err := spec(now.Add(-time.Millisecond)).settle(done, now); !errors.Is(err, context.Canceled) {
		t.Errorf("a file changed just now: settle %v, want it to wait (and see the context end)", err)
	}
	if err := spec(now.Add(time.Hour)).settle(done, now); err != nil {
		t.Errorf("a ctime in the future: settle %v, want no wait", err)
	}

	fp := func(s *layerSpec) string {
		t.Helper()
		k, err := s.fingerprint(context.Background(), testEpoch, 6, now)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	past, future := spec(now.Add(-time.Hour)), spec(now.Add(time.Hour))
	p1, f1 := fp(past), fp(future)
	if err := os.WriteFile(file, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fp(past) != p1 {
		t.Error("the fingerprint of a settled file read its content")
	}
	if fp(future) == f1 {
		t.Error("a file whose ctime is after now kept its fingerprint when its content changed")
	}
}
