package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

func assemble(t *testing.T, o Options) *Assembly {
	t.Helper()
	asm, err := Assemble(context.Background(), o)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	t.Cleanup(func() { asm.Close() })
	return asm
}

func TestLayerTarIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"b/z.txt":   "z",
		"a/run.sh":  "#!/bin/sh\n",
		"a-c/x.txt": "x",
		"a/y.txt":   "y",
	})
	if err := os.Symlink("y.txt", filepath.Join(dir, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "b", "z.txt"), filepath.Join(dir, "b", "z2.txt")); err != nil {
		t.Fatal(err)
	}
	// Odd host permissions and times must not leak into the layer.
	os.Chmod(filepath.Join(dir, "a", "y.txt"), 0o600)
	os.Chtimes(filepath.Join(dir, "a", "y.txt"), time.Now(), time.Now())

	entries, err := walkDir(dir, "opt/tritonserver", false)
	if err != nil {
		t.Fatal(err)
	}
	spec := &layerSpec{label: "t", entries: entries}
	write := func() (layerInfo, []byte) {
		out := filepath.Join(t.TempDir(), "layer.tar.gz")
		info, err := writeLayer(context.Background(), spec, testEpoch, gzip.DefaultCompression, out, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return info, b
	}
	info1, b1 := write()
	info2, b2 := write()
	if info1 != info2 || !bytes.Equal(b1, b2) {
		t.Fatalf("two writes differ: %+v vs %+v", info1, info2)
	}
	// The uncompressed bytes are pinned, so that a change to the tar
	// encoding (archive.WriteTar, modes, the walk) cannot change published
	// image digests unnoticed; if one is intended, bump layerFormat and the
	// pin. The compressed digest also depends on Go's compress/gzip.
	if want := "sha256:004af6f5f1a5dec38f1656fbf29786e6e473987b38a19b2e371541e5462a1964"; info1.DiffID.String() != want {
		t.Errorf("layer DiffID %s, pinned %s: the layer encoding changed", info1.DiffID, want)
	}
	if info1.Size != int64(len(b1)) {
		t.Errorf("size %d, file has %d bytes", info1.Size, len(b1))
	}
	// gzip header: no FNAME/FCOMMENT flags, MTIME 0, OS 255.
	if b1[3] != 0 || !bytes.Equal(b1[4:8], []byte{0, 0, 0, 0}) || b1[9] != 255 {
		t.Errorf("gzip header not fixed: % x", b1[:10])
	}
	zr, err := gzip.NewReader(bytes.NewReader(b1))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(testEpoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
		if h.Format != tar.FormatUSTAR || len(h.PAXRecords) != 0 {
			t.Errorf("%s: format %v, PAX %v", h.Name, h.Format, h.PAXRecords)
		}
		switch h.Name {
		case "opt/tritonserver/a/y.txt":
			if h.Mode != 0o644 {
				t.Errorf("y.txt mode %o, want 644", h.Mode)
			}
		case "opt/tritonserver/a/run.sh":
			if h.Mode != 0o755 {
				t.Errorf("run.sh mode %o, want 755", h.Mode)
			}
		case "opt/tritonserver/a/link":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "y.txt" {
				t.Errorf("link: %c -> %q", h.Typeflag, h.Linkname)
			}
		case "opt/tritonserver/b/z2.txt":
			if h.Typeflag != tar.TypeLink || h.Linkname != "opt/tritonserver/b/z.txt" {
				t.Errorf("hard link: %c -> %q", h.Typeflag, h.Linkname)
			}
		}
	}
	// Byte order of the names without the trailing slash: "a" < "a-c" <
	// "a/link", and every parent before its children.
	want := []string{"opt/", "opt/tritonserver/", "opt/tritonserver/a/", "opt/tritonserver/a-c/", "opt/tritonserver/a-c/x.txt", "opt/tritonserver/a/link",
		"opt/tritonserver/a/run.sh", "opt/tritonserver/a/y.txt", "opt/tritonserver/b/", "opt/tritonserver/b/z.txt", "opt/tritonserver/b/z2.txt"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("entries\n got %v\nwant %v", names, want)
	}
	if !sort.SliceIsSorted(entries, func(i, j int) bool { return entries[i].name < entries[j].name }) {
		t.Error("entries not sorted")
	}
}

func TestAssembleIsReproducibleAndFollowsEpoch(t *testing.T) {
	trees := scriptTrees(t, "server", "protobuf")
	models := t.TempDir()
	writeFiles(t, models, map[string]string{"m/config.pbtxt": "name: \"m\"\n", "m/1/model.pt": "weights"})
	o := Options{Trees: trees, Epoch: testEpoch, ModelRepository: models, Version: "0.1.0"}
	a := assemble(t, o)
	b := assemble(t, o) // no cache: everything written again
	if a.Summary.Digest != b.Summary.Digest {
		t.Fatalf("same inputs, digests %s and %s", a.Summary.Digest, b.Summary.Digest)
	}
	o.Epoch = testEpoch.Add(time.Second)
	c := assemble(t, o)
	if c.Summary.Digest == a.Summary.Digest {
		t.Fatal("changing the epoch kept the digest")
	}
	for _, asm := range []*Assembly{a, c} {
		if err := validate.Image(asm.Image); err != nil {
			t.Fatalf("validate.Image: %v", err)
		}
	}
	var got []string
	for _, l := range a.Summary.Layers {
		got = append(got, l.Name)
	}
	if want := "base-libraries server protobuf sbom models"; strings.Join(got, " ") != want {
		t.Errorf("layers %v, want %s", got, want)
	}
}

func TestChangingOneTreeChangesOneLayer(t *testing.T) {
	trees := scriptTrees(t, "server", "grpc", "protobuf")
	cache := t.TempDir()
	o := Options{Trees: trees, Epoch: testEpoch, CacheDir: cache}
	before := assemble(t, o)

	// Same recipe metadata, different content: only its layer may change.
	changed := scriptTree(t, "grpc", false, " rebuilt")
	changed.Hash = trees[1].Hash
	o.Trees = []Tree{trees[0], changed, trees[2]}
	after := assemble(t, o)
	if before.Summary.Digest == after.Summary.Digest {
		t.Fatal("manifest digest did not change")
	}
	var diffs []string
	for i, l := range before.Summary.Layers {
		if after.Summary.Layers[i].Digest != l.Digest {
			diffs = append(diffs, l.Name)
		}
		if l.Name != "grpc" && !after.Summary.Layers[i].Cached {
			t.Errorf("layer %s was rewritten, want reused from the cache", l.Name)
		}
	}
	if strings.Join(diffs, ",") != "grpc" {
		t.Fatalf("changed layers %v, want exactly [grpc]", diffs)
	}
	if d1, _ := before.Summary.LayerDigest("server"); d1.Hex == "" {
		t.Error("LayerDigest(server) not found")
	}
}

func TestConfigLabelsAndAnnotations(t *testing.T) {
	trees := scriptTrees(t, "server")
	trees[0].Version, trees[0].Hash = "2.50.0", "abc123"
	o := Options{Trees: trees, Epoch: testEpoch, Version: "0.1.0", Source: "https://example.org/tritonbuild", Revision: "deadbeef",
		Labels: map[string]string{"extra": "yes"}}
	asm := assemble(t, o)
	cfg, err := asm.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "1000:1000" || c.WorkingDir != "/opt/tritonserver" {
		t.Errorf("user %q workdir %q", c.User, c.WorkingDir)
	}
	if strings.Join(c.Entrypoint, " ") != "/opt/tritonserver/bin/tritonserver" || strings.Join(c.Cmd, " ") != "--model-repository=/models" {
		t.Errorf("entrypoint %v cmd %v", c.Entrypoint, c.Cmd)
	}
	for _, p := range []string{"8000/tcp", "8001/tcp", "8002/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed", p)
		}
	}
	env := strings.Join(c.Env, "\n")
	for _, want := range []string{"PATH=/opt/tritonserver/bin:", "LD_LIBRARY_PATH=/opt/tritonserver/lib", "TRITON_SERVER_HOME=/opt/tritonserver"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	if !cfg.Created.Equal(testEpoch) {
		t.Errorf("created %v", cfg.Created)
	}
	m, err := asm.Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("media types %s / %s", m.MediaType, m.Config.MediaType)
	}
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer media type %s", l.MediaType)
		}
	}
	want := map[string]string{
		"org.opencontainers.image.version":  "0.1.0",
		"org.opencontainers.image.source":   "https://example.org/tritonbuild",
		"org.opencontainers.image.revision": "deadbeef",
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		"dev.tritonbuild.recipe.server":     "2.50.0@abc123",
		"extra":                             "yes",
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
}

func TestEntrypointMustExistOnScratch(t *testing.T) {
	trees := scriptTrees(t, "server")
	_, err := Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, Entrypoint: []string{"/opt/tritonserver/bin/nope"}})
	if err == nil || !strings.Contains(err.Error(), "/opt/tritonserver/bin/nope") {
		t.Fatalf("want an error naming the entrypoint, got %v", err)
	}
}

func TestConflictingTrees(t *testing.T) {
	a := scriptTree(t, "a", true, "")
	b := scriptTree(t, "b", true, "")
	_, err := Assemble(context.Background(), Options{Trees: []Tree{a, b}, Epoch: testEpoch})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Path != "/opt/tritonserver/bin/tritonserver" || ce.First != "a" || ce.Second != "b" {
		t.Fatalf("want a ConflictError on bin/tritonserver, got %v", err)
	}
}

func TestDefaultEpoch(t *testing.T) {
	if got := DefaultEpoch(nil); got.Unix() != 0 {
		t.Errorf("no trees: %v", got)
	}
	trees := []Tree{{Epoch: time.Unix(100, 0)}, {Epoch: time.Unix(300, 5)}, {}}
	if got := DefaultEpoch(trees); got.Unix() != 300 || got.Nanosecond() != 0 {
		t.Errorf("got %v, want 300s", got)
	}
	if e, err := ParseSourceDateEpoch("1700000000"); err != nil || !e.Equal(testEpoch) {
		t.Errorf("ParseSourceDateEpoch: %v %v", e, err)
	}
	if _, err := ParseSourceDateEpoch("yesterday"); err == nil {
		t.Error("bad SOURCE_DATE_EPOCH accepted")
	}
}

func TestSBOM(t *testing.T) {
	trees := scriptTrees(t, "server", "protobuf")
	trees[1].License, trees[1].SourceURL, trees[1].SHA256 = "", "", ""
	b, err := SBOM(trees, SBOMOptions{Name: "tritonserver", Version: "0.1.0", Epoch: testEpoch})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	for k, want := range map[string]string{"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT", "name": "tritonserver 0.1.0"} {
		if doc[k] != want {
			t.Errorf("%s = %v, want %s", k, doc[k], want)
		}
	}
	ns, _ := doc["documentNamespace"].(string)
	if !strings.HasPrefix(ns, "https://") || len(ns) < 40 {
		t.Errorf("documentNamespace %q", ns)
	}
	ci, _ := doc["creationInfo"].(map[string]any)
	if ci["created"] != "2023-11-14T22:13:20Z" || len(ci["creators"].([]any)) == 0 {
		t.Errorf("creationInfo %v", ci)
	}
	pkgs, _ := doc["packages"].([]any)
	if len(pkgs) != 2 {
		t.Fatalf("packages %v", pkgs)
	}
	for _, p := range pkgs {
		pm := p.(map[string]any)
		for _, k := range []string{"name", "SPDXID", "downloadLocation", "licenseConcluded", "licenseDeclared", "copyrightText"} {
			if s, _ := pm[k].(string); s == "" {
				t.Errorf("package %v lacks %s", pm["name"], k)
			}
		}
		if !strings.HasPrefix(pm["SPDXID"].(string), "SPDXRef-") {
			t.Errorf("SPDXID %v", pm["SPDXID"])
		}
	}
	server := pkgs[1].(map[string]any) // sorted: protobuf, server
	if server["name"] != "server" || server["versionInfo"] != "1.0" || server["downloadLocation"] != trees[0].SourceURL {
		t.Errorf("server package %v", server)
	}
	sums := server["checksums"].([]any)
	if sums[0].(map[string]any)["algorithm"] != "SHA256" {
		t.Errorf("checksums %v", sums)
	}
	if pb := pkgs[0].(map[string]any); pb["downloadLocation"] != "NOASSERTION" || pb["licenseDeclared"] != "NOASSERTION" {
		t.Errorf("unknown fields must be NOASSERTION: %v", pb)
	}
	rels := doc["relationships"].([]any)
	if len(rels) != 2 || rels[0].(map[string]any)["relationshipType"] != "DESCRIBES" {
		t.Errorf("relationships %v", rels)
	}
	again, _ := SBOM(trees, SBOMOptions{Name: "tritonserver", Version: "0.1.0", Epoch: testEpoch})
	if !bytes.Equal(b, again) {
		t.Error("SBOM not deterministic")
	}
	trees[0].Version = "1.1"
	other, _ := SBOM(trees, SBOMOptions{Name: "tritonserver", Version: "0.1.0", Epoch: testEpoch})
	var od map[string]any
	json.Unmarshal(other, &od)
	if od["documentNamespace"] == doc["documentNamespace"] {
		t.Error("different content, same namespace")
	}
	trees[0].SHA256 = "xyz"
	if _, err := SBOM(trees, SBOMOptions{}); err == nil || !strings.Contains(err.Error(), "server") {
		t.Errorf("bad checksum: %v", err)
	}
}

func TestSBOMIsInTheImage(t *testing.T) {
	trees := scriptTrees(t, "server")
	asm := assemble(t, Options{Trees: trees, Epoch: testEpoch})
	files := extractFiles(t, asm.Image)
	sbom, ok := files["opt/tritonserver/share/sbom.spdx.json"]
	if !ok {
		t.Fatal("no SBOM in the image")
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
	}
	if err := json.Unmarshal([]byte(sbom), &doc); err != nil || doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("SBOM in image: %v %q", err, doc.SPDXVersion)
	}
	if files["etc/passwd"] == "" || !strings.Contains(files["etc/passwd"], ":1000:1000:") {
		t.Errorf("passwd %q", files["etc/passwd"])
	}
}

// extractFiles reads every regular file of every layer (later layers win).
func extractFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				files[h.Name] = string(b)
			}
		}
		rc.Close()
	}
	return files
}

func TestClosureOfHostLs(t *testing.T) {
	testenv.NeedTools(t, "ls")
	ls, _ := exec.LookPath("ls")
	testenv.NeedTools(t, "ldd")
	tree := t.TempDir()
	data, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, tree, map[string]string{"bin/ls": string(data)})
	c := closureOf(t, tree)
	if len(c.missing) > 0 {
		t.Fatalf("missing %v", c.missing)
	}
	// Every library the system's loader maps for ls must be carried, by
	// its real path.
	out, err := exec.Command("ldd", ls).Output()
	if err != nil {
		t.Fatalf("ldd: %v", err)
	}
	have := map[string]bool{}
	for _, f := range c.files {
		have[f] = true
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		var p string
		switch {
		case len(fields) >= 3 && fields[1] == "=>":
			p = fields[2]
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			p = fields[0]
		default:
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if !have[real] {
			t.Errorf("closure lacks %s (%s); has %v", p, real, c.files)
		}
	}
	if n < 2 {
		t.Fatalf("ldd listed %d libraries:\n%s", n, out)
	}
	// The loader is reached through the host's symlinks, which the image
	// must reproduce.
	links := map[string]string{}
	for _, l := range c.links {
		links[l.name] = l.target
	}
	if st, err := os.Lstat("/lib64"); err == nil && st.Mode()&os.ModeSymlink != 0 {
		if links["/lib64"] == "" {
			t.Errorf("/lib64 is a symlink on the host but not in the closure: %v", links)
		}
	}
}

// closureOf resolves the closure of tree laid out at /opt/tritonserver.
func closureOf(t *testing.T, tree string) *closure {
	t.Helper()
	target, err := elfTargetFor("amd64")
	if err != nil || !strings.Contains(strings.ToLower(hostArch()), "x86_64") {
		t.Skip("closure tests are written for x86_64 hosts")
	}
	entries, err := walkDir(tree, "opt/tritonserver", false)
	if err != nil {
		t.Fatal(err)
	}
	fsys := &imageFS{prefix: "/opt/tritonserver", tree: map[string]entry{}}
	for _, e := range entries {
		fsys.tree["/"+e.name] = e
	}
	dirs, err := HostLibraryDirs("amd64")
	if err != nil {
		t.Fatal(err)
	}
	c, err := resolveClosure(closureOptions{target: target, fsys: fsys, hostDirs: dirs, libraryPath: []string{"/opt/tritonserver/lib"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hostArch() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return ""
	}
	var b []byte
	for _, c := range u.Machine {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func TestClosureRunpathOrigin(t *testing.T) {
	tree := greetTree(t)
	c := closureOf(t, tree)
	if len(c.missing) > 0 {
		t.Fatalf("missing %v", c.missing)
	}
	var names []string
	for _, f := range c.files {
		names = append(names, filepath.Base(f))
		if strings.Contains(f, "libgreet") {
			t.Errorf("libgreet must come from the tree, not the host: %s", f)
		}
	}
	all := strings.Join(names, " ")
	for _, want := range []string{"libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"} {
		if !strings.Contains(all, want) {
			t.Errorf("closure lacks %s: %v", want, c.files)
		}
	}
	if len(c.libDirs) != 0 {
		t.Errorf("no extra LD_LIBRARY_PATH expected, got %v", c.libDirs)
	}

	// Without the library the closure reports who needs what.
	os.Remove(filepath.Join(tree, "lib", "libgreet.so.1"))
	os.Remove(filepath.Join(tree, "lib", "libgreet.so"))
	c = closureOf(t, tree)
	if len(c.missing) != 1 || c.missing[0].Name != "libgreet.so.1" || c.missing[0].NeededBy != "/opt/tritonserver/bin/hello" {
		t.Fatalf("missing = %v", c.missing)
	}
	_, err := Assemble(context.Background(), Options{Trees: []Tree{{Name: "hello", Dir: tree}}, Epoch: testEpoch, Entrypoint: []string{"/opt/tritonserver/bin/hello"}})
	var me *MissingLibrariesError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "libgreet.so.1 (needed by /opt/tritonserver/bin/hello)") {
		t.Fatalf("want a MissingLibrariesError, got %v", err)
	}
}

func TestPushAndPullByDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	asm := assemble(t, Options{Trees: scriptTrees(t, "server", "grpc"), Epoch: testEpoch})
	var reports int
	pushed, err := Push(context.Background(), asm.Image, host+"/tritonserver:test", OutputOptions{Insecure: true, Progress: func(Progress) { reports++ }})
	if err != nil {
		t.Fatal(err)
	}
	if want := host + "/tritonserver@" + asm.Summary.Digest.String(); pushed != want {
		t.Errorf("pushed %s, want %s", pushed, want)
	}
	if reports == 0 {
		t.Error("no progress reported")
	}
	ref, err := name.ParseReference(pushed, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(got); err != nil {
		t.Fatalf("pulled image invalid: %v", err)
	}
	gd, _ := got.Digest()
	if gd != asm.Summary.Digest {
		t.Fatalf("pulled %s, pushed %s", gd, asm.Summary.Digest)
	}
	gl, _ := got.Layers()
	for i, l := range gl {
		d, _ := l.Digest()
		if d != asm.Summary.Layers[i].Digest {
			t.Errorf("layer %d: %s vs %s", i, d, asm.Summary.Layers[i].Digest)
		}
	}
}

func TestPushRefused(t *testing.T) {
	asm := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch})
	for _, code := range []int{http.StatusForbidden, http.StatusInternalServerError} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/v2/":
				w.WriteHeader(http.StatusOK)
				return
			case r.Method == http.MethodHead: // nothing exists yet
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			io.WriteString(w, `{"errors":[{"code":"DENIED","message":"quota exceeded for tritonserver"}]}`)
		}))
		ref := strings.TrimPrefix(srv.URL, "http://") + "/tritonserver:x"
		_, err := Push(context.Background(), asm.Image, ref, OutputOptions{Insecure: true, Attempts: 1})
		srv.Close()
		var pe *PushError
		if !errors.As(err, &pe) || pe.Ref != ref {
			t.Fatalf("status %d: want a PushError for %s, got %v", code, ref, err)
		}
		if !strings.Contains(err.Error(), "quota exceeded for tritonserver") || !strings.Contains(err.Error(), ref) {
			t.Errorf("status %d: error lacks the ref or the registry's answer: %v", code, err)
		}
	}
}

func TestUnreadableBase(t *testing.T) {
	trees := scriptTrees(t, "server")
	notTar := filepath.Join(t.TempDir(), "rootfs.tar")
	os.WriteFile(notTar, bytes.Repeat([]byte("not a tar "), 100), 0o644)
	plainDir := t.TempDir()
	writeFiles(t, plainDir, map[string]string{"x": "y"})
	for _, c := range []struct{ base, want string }{
		{"/nonexistent/rootfs.tar.gz", "no such file"},
		{notTar, "not a readable tar archive"},
		{plainDir, "not an OCI image layout"},
		{"Not//A Ref", "neither a file"},
	} {
		_, err := Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, Base: c.base})
		var be *BaseError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.base) {
			t.Errorf("base %q: want a BaseError with %q, got %v", c.base, c.want, err)
		}
	}
}

func TestRootfsAndLayoutBases(t *testing.T) {
	// A plain rootfs tarball becomes one base layer, kept byte for byte.
	rootfs := filepath.Join(t.TempDir(), "rootfs.tar")
	f, _ := os.Create(rootfs)
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	tw.Write([]byte("test\n"))
	tw.Close()
	f.Close()
	trees := scriptTrees(t, "server")
	a := assemble(t, Options{Trees: trees, Epoch: testEpoch, Base: rootfs})
	if err := validate.Image(a.Image); err != nil {
		t.Fatal(err)
	}
	if a.Summary.Layers[0].Name != "base:0" || len(a.Summary.BaseLibraries) != 0 {
		t.Fatalf("layers %+v", a.Summary.Layers)
	}
	if extractFiles(t, a.Image)["etc/os-release"] != "test\n" {
		t.Error("rootfs content lost")
	}

	// That image, written as a layout, serves as the base of another.
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(context.Background(), a.Image, dir, "base", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	b := assemble(t, Options{Trees: scriptTrees(t, "other"), Epoch: testEpoch, Base: dir})
	if err := validate.Image(b.Image); err != nil {
		t.Fatal(err)
	}
	al, _ := a.Image.Layers()
	bl, _ := b.Image.Layers()
	if len(bl) != len(al)+3 { // + home + other + sbom
		t.Fatalf("%d layers on a %d-layer base", len(bl), len(al))
	}
	for i := range al {
		da, _ := al[i].Digest()
		db, _ := bl[i].Digest()
		if da != db {
			t.Errorf("base layer %d changed", i)
		}
	}
	p, _ := layout.FromPath(dir)
	if _, err := p.ImageIndex(); err != nil {
		t.Fatal(err)
	}
}

func TestWriteLayoutAndTarball(t *testing.T) {
	asm := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch})
	parent := t.TempDir()
	dir := filepath.Join(parent, "oci")
	for i := 0; i < 2; i++ { // the second write replaces the first layout
		if err := WriteLayout(context.Background(), asm.Image, dir, "v1", OutputOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != asm.Summary.Digest || m.Manifests[0].Annotations[RefNameAnnotation] != "v1" {
		t.Fatalf("index %+v", m.Manifests)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 {
		t.Errorf("leftovers next to the layout: %v", ents)
	}

	junk := t.TempDir()
	writeFiles(t, junk, map[string]string{"precious.txt": "keep"})
	var ce *ClobberError
	if err := WriteLayout(context.Background(), asm.Image, junk, "v1", OutputOptions{}); !errors.As(err, &ce) {
		t.Fatalf("want a ClobberError, got %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(junk, "precious.txt")); string(b) != "keep" {
		t.Fatal("clobbered")
	}

	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(context.Background(), asm.Image, tb, "tritonserver:test", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(tb)
	defer f.Close()
	tr := tar.NewReader(f)
	found := false
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == "manifest.json" {
			b, _ := io.ReadAll(tr)
			found = strings.Contains(string(b), "tritonserver:test")
		}
	}
	if !found {
		t.Error("tarball has no manifest.json naming the tag")
	}
}

func TestWriteLayoutOnFullDisk(t *testing.T) {
	testenv.NeedRoot(t, "mounting a tmpfs")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })

	tree := scriptTree(t, "server", true, "")
	big := make([]byte, 3<<20)
	for i := range big { // incompressible
		big[i] = byte((i*7919 + i>>3*31) ^ (i >> 11))
	}
	if f, err := os.Open("/dev/urandom"); err == nil {
		io.ReadFull(f, big)
		f.Close()
	}
	os.WriteFile(filepath.Join(tree.Dir, "lib", "big.bin"), big, 0o644)
	asm := assemble(t, Options{Trees: []Tree{tree}, Epoch: testEpoch})
	err := WriteLayout(context.Background(), asm.Image, filepath.Join(mnt, "oci"), "v1", OutputOptions{})
	if err == nil || !errors.Is(err, syscall.ENOSPC) && !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("want a no-space error, got %v", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(mnt, "oci")) {
		t.Errorf("error does not name the layout: %v", err)
	}
	ents, _ := os.ReadDir(mnt)
	if len(ents) != 0 {
		t.Fatalf("half-written layout left behind: %v", ents)
	}
	err = WriteTarball(context.Background(), asm.Image, filepath.Join(mnt, "image.tar"), "tritonserver:x", OutputOptions{})
	if err == nil {
		t.Fatal("tarball on a full disk succeeded")
	}
	if ents, _ := os.ReadDir(mnt); len(ents) != 0 {
		t.Fatalf("half-written tarball left behind: %v", ents)
	}
}

func TestCancelledAssembly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Assemble(ctx, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestRegistryBase(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	base := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch})
	pushed, err := Push(context.Background(), base.Image, host+"/base:1", OutputOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Trees: scriptTrees(t, "addon"), Epoch: testEpoch, Base: host + "/base:1", Insecure: true,
		Entrypoint: []string{"/opt/tritonserver/bin/addon"}}
	asm := assemble(t, o)
	if err := validate.Image(asm.Image); err != nil {
		t.Fatal(err)
	}
	cfg, _ := asm.Image.ConfigFile()
	if got := cfg.Config.Labels["org.opencontainers.image.base.name"]; got != pushed {
		t.Errorf("base.name label %q, want %q", got, pushed)
	}
	if len(cfg.History) != len(cfg.RootFS.DiffIDs) {
		t.Errorf("%d history entries for %d layers", len(cfg.History), len(cfg.RootFS.DiffIDs))
	}
	bl, _ := base.Image.Layers()
	al, _ := asm.Image.Layers()
	for i := range bl {
		db, _ := bl[i].Digest()
		da, _ := al[i].Digest()
		if da != db {
			t.Errorf("base layer %d: %s, want %s", i, da, db)
		}
	}
	o2 := o
	o2.Base = host + "/missing:1"
	if _, err := Assemble(context.Background(), o2); err == nil || !strings.Contains(err.Error(), "missing:1") {
		t.Errorf("missing base: %v", err)
	}
}

func TestHostPackagesInSBOM(t *testing.T) {
	testenv.NeedTools(t, "dpkg-query") // without dpkg the SBOM lists trees only
	testenv.NeedTools(t, "ls")
	ls, _ := exec.LookPath("ls")
	data, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(tree, "bin", "ls"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	asm := assemble(t, Options{Trees: []Tree{{Name: "coreutils", Dir: tree}}, Epoch: testEpoch, Entrypoint: []string{"ls"}})
	var libc *HostPackage
	for i, p := range asm.Summary.HostPackages {
		if p.Name == "libc6" {
			libc = &asm.Summary.HostPackages[i]
		}
	}
	if libc == nil || libc.Version == "" {
		t.Fatalf("libc6 not among the host packages %+v", asm.Summary.HostPackages)
	}
	sbom := extractFiles(t, asm.Image)["opt/tritonserver/share/sbom.spdx.json"]
	var doc struct {
		Packages []struct {
			Name         string `json:"name"`
			VersionInfo  string `json:"versionInfo"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.Unmarshal([]byte(sbom), &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range doc.Packages {
		if p.Name == "libc6" && p.VersionInfo == libc.Version && len(p.ExternalRefs) == 1 && strings.HasPrefix(p.ExternalRefs[0].Locator, "pkg:deb/") {
			found = true
		}
	}
	if !found {
		t.Errorf("SBOM lacks libc6 %s with a purl:\n%s", libc.Version, sbom)
	}
}

func TestProgressOfLargeLayers(t *testing.T) {
	tree := scriptTree(t, "server", true, "")
	big := bytes.Repeat([]byte("tritonbuild progress "), 1<<20) // 21 MiB
	if err := os.WriteFile(filepath.Join(tree.Dir, "lib", "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	var layerReports []Progress
	asm := assemble(t, Options{Trees: []Tree{tree}, Epoch: testEpoch, Progress: func(p Progress) {
		if p.Name == "server" {
			layerReports = append(layerReports, p)
		}
	}})
	if len(layerReports) < 3 {
		t.Fatalf("%d progress reports for a 21 MiB layer: %+v", len(layerReports), layerReports)
	}
	last := layerReports[len(layerReports)-1]
	if last.Stage != "layer" || last.Done != last.Total || last.Total < int64(len(big)) {
		t.Errorf("last report %+v", last)
	}
	for i := 1; i < len(layerReports); i++ {
		if layerReports[i].Done < layerReports[i-1].Done {
			t.Errorf("progress went backwards: %+v", layerReports)
		}
	}
	serverDigest, _ := asm.Summary.LayerDigest("server")
	var written int64
	err := WriteLayout(context.Background(), asm.Image, filepath.Join(t.TempDir(), "oci"), "v1", OutputOptions{Progress: func(p Progress) {
		if p.Stage == "write" && p.Name == serverDigest.String() {
			written = p.Done
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range asm.Summary.Layers {
		if l.Name == "server" && written != l.Size {
			t.Errorf("write progress ended at %d of %d bytes", written, l.Size)
		}
	}
}

func TestHostPaths(t *testing.T) {
	testenv.NeedTools(t, "ls")
	ls, _ := exec.LookPath("ls")
	data, _ := os.ReadFile(ls)
	hostDir := t.TempDir()
	os.MkdirAll(filepath.Join(hostDir, "tool", "empty"), 0o755)
	os.WriteFile(filepath.Join(hostDir, "tool", "ls"), data, 0o755)
	os.Symlink("ls", filepath.Join(hostDir, "tool", "dir"))
	os.Symlink("tool", filepath.Join(hostDir, "current"))

	trees := scriptTrees(t, "server")
	asm := assemble(t, Options{Trees: trees, Epoch: testEpoch, HostPaths: []string{filepath.Join(hostDir, "current")}})
	layers, _ := asm.Image.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got[strings.TrimSuffix(h.Name, "/")] = h
	}
	base := strings.TrimPrefix(hostDir, "/")
	if h := got[base+"/current"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "tool" {
		t.Errorf("symlink to the directory: %+v", h)
	}
	if h := got[base+"/tool/dir"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "ls" {
		t.Errorf("symlink inside the directory: %+v", h)
	}
	if h := got[base+"/tool/ls"]; h == nil || h.Typeflag != tar.TypeReg || h.Size != int64(len(data)) {
		t.Errorf("file: %+v", h)
	}
	if h := got[base+"/tool/empty"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("empty directory: %+v", h)
	}
	libc := false
	for _, f := range asm.Summary.BaseLibraries {
		libc = libc || strings.HasSuffix(f, "/libc.so.6")
	}
	if !libc {
		t.Errorf("the closure of the copied ls lacks libc: %v", asm.Summary.BaseLibraries)
	}

	_, err = Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, HostPaths: []string{"/opt/tritonserver/x"}})
	var he *HostPathError
	if !errors.As(err, &he) {
		t.Errorf("a host path in the prefix: %v", err)
	}
	_, err = Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, HostPaths: []string{filepath.Join(hostDir, "nope")}})
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a missing host path: %v", err)
	}
}

// TestClosureOriginIsTheOpenedPath: a library reached through a symlink
// into another directory (Debian's alternatives make libblas.so.3 such a
// link into openblas-openmp/) expands $ORIGIN to the link's directory, as
// glibc does, so a dependency that sits only beside the link's target is
// missing. The host's own loader, running the same tree, is the referee.
func TestClosureOriginIsTheOpenedPath(t *testing.T) {
	testenv.NeedTools(t, "cc")
	src, tree := t.TempDir(), t.TempDir()
	writeFiles(t, src, map[string]string{
		"dep.c":   "int dep(void) { return 3; }\n",
		"greet.c": "#include <stdio.h>\nint dep(void);\nvoid greet(void) { printf(\"dep %d\\n\", dep()); }\n",
		"main.c":  "void greet(void);\nint main(void) { greet(); return 0; }\n",
	})
	for _, d := range []string{"bin", "lib/alt"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	alt := filepath.Join(tree, "lib", "alt")
	cc("-shared", "-fPIC", "-o", filepath.Join(alt, "libdep.so.1"), "-Wl,-soname,libdep.so.1", filepath.Join(src, "dep.c"))
	cc("-shared", "-fPIC", "-o", filepath.Join(alt, "libgreet.so.1"), "-Wl,-soname,libgreet.so.1", filepath.Join(src, "greet.c"),
		filepath.Join(alt, "libdep.so.1"), "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
	if err := os.Symlink("alt/libgreet.so.1", filepath.Join(tree, "lib", "libgreet.so.1")); err != nil {
		t.Fatal(err)
	}
	cc("-o", filepath.Join(tree, "bin", "hello"), filepath.Join(src, "main.c"), filepath.Join(tree, "lib", "libgreet.so.1"),
		"-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags", "-Wl,-rpath-link,"+alt)

	out, err := exec.Command(filepath.Join(tree, "bin", "hello")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "libdep.so.1") {
		t.Fatalf("the host's loader ran hello (%v, %s): it does not take $ORIGIN from the opened path, and this test's premise is wrong", err, out)
	}
	c := closureOf(t, tree)
	if len(c.missing) != 1 || c.missing[0].Name != "libdep.so.1" || c.missing[0].NeededBy != "/opt/tritonserver/lib/alt/libgreet.so.1" {
		t.Fatalf("missing = %v, want libdep.so.1 needed by lib/alt/libgreet.so.1 (searched beside lib/libgreet.so.1)", c.missing)
	}

	// A link beside the opened path, as the alternatives add: both agree.
	if err := os.Symlink("alt/libdep.so.1", filepath.Join(tree, "lib", "libdep.so.1")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(tree, "bin", "hello")).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "dep 3" {
		t.Fatalf("hello with the link: %v %s", err, out)
	}
	if c := closureOf(t, tree); len(c.missing) != 0 {
		t.Fatalf("missing %v with lib/libdep.so.1 in place", c.missing)
	}
}
