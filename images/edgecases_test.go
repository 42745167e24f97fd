package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// A model repository (or tree) given as a symlink to a directory must be
// copied, not turned into an empty /models.
func TestSymlinkedModelRepositoryIsCopied(t *testing.T) {
	real := t.TempDir()
	writeFiles(t, real, map[string]string{"simple/config.pbtxt": "name: \"simple\"\n"})
	link := filepath.Join(t.TempDir(), "models")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	a := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, ModelRepository: link})
	if got := extractFiles(t, a.Image)["models/simple/config.pbtxt"]; got != "name: \"simple\"\n" {
		t.Fatalf("models/simple/config.pbtxt = %q: the symlinked model repository was not copied", got)
	}
}

// A path that is a directory in one tree and a file or symlink in another
// is a conflict: the later layer would hide the earlier tree's directory.
func TestDirectoryFileConflictBetweenTrees(t *testing.T) {
	for _, order := range []string{"dir-first", "link-first"} {
		t.Run(order, func(t *testing.T) {
			a := scriptTree(t, "a", true, "")
			writeFiles(t, a.Dir, map[string]string{"lib64/libx.txt": "x\n"})
			b := scriptTree(t, "b", false, "")
			if err := os.Symlink("lib", filepath.Join(b.Dir, "lib64")); err != nil {
				t.Fatal(err)
			}
			trees := []Tree{a, b}
			first, second := "a", "b"
			if order == "link-first" {
				trees = []Tree{b, a}
				first, second = "b", "a"
			}
			_, err := Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, Entrypoint: []string{}})
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Path != "/opt/tritonserver/lib64" || ce.First != first || ce.Second != second {
				t.Fatalf("want a ConflictError on /opt/tritonserver/lib64 (%s, %s), got %v", first, second, err)
			}
		})
	}
}

// Every layer, a rootfs base's included, has its history entry, so that
// `docker history` and builders using the image as a base line them up.
func TestRootfsBaseHasHistory(t *testing.T) {
	rootfs := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.Close()
	f.Close()
	a := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, Base: rootfs})
	cfg, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range cfg.History {
		if !h.EmptyLayer {
			n++
		}
	}
	if n != len(cfg.RootFS.DiffIDs) {
		t.Fatalf("%d history entries for %d layers: %+v", n, len(cfg.RootFS.DiffIDs), cfg.History)
	}
}

// The base layer may carry tens of thousands of host files (HostPaths with
// a whole site-packages): asking dpkg about them must not overflow the
// argument list of one command.
func TestHostPackagesOfManyFiles(t *testing.T) {
	testenv.NeedTools(t, "dpkg-query")
	libc := ""
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			libc = p
		}
	}
	if libc == "" {
		testenv.Unavailable(t, "no multiarch libc.so.6")
	}
	files := []string{libc}
	for i := range 16000 {
		files = append(files, fmt.Sprintf("/usr/lib/python3/dist-packages/not-a-package/%s/module_%06d.py", strings.Repeat("x", 40), i))
	}
	pkgs, err := hostPackages(context.Background(), files)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range pkgs {
		found = found || p.Name == "libc6"
	}
	if !found {
		t.Fatalf("libc6 not among %+v", pkgs)
	}
}

// A model repository that is not a directory is an error, not an empty
// /models.
func TestModelRepositoryMustBeADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "model.pt")
	if err := os.WriteFile(file, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Assemble(context.Background(), Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, ModelRepository: file})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("want an error for a model repository that is a file, got %v", err)
	}
}

// On scratch, an entrypoint that exists on the host but is neither in the
// trees nor carried by HostPaths is not in the image: refuse it rather than
// write an image that cannot start.
func TestEntrypointOnlyOnTheHostIsRefused(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		testenv.Unavailable(t, "no /bin/sh")
	}
	trees := scriptTrees(t, "server")
	_, err := Assemble(context.Background(), Options{Trees: trees, Epoch: testEpoch, Entrypoint: []string{"/bin/sh", "-c", "true"}})
	if err == nil || !strings.Contains(err.Error(), "/bin/sh") {
		t.Fatalf("want an error naming the entrypoint /bin/sh, got %v", err)
	}
	// Carried by HostPaths, it is in the image.
	a := assemble(t, Options{Trees: trees, Epoch: testEpoch, Entrypoint: []string{"/bin/sh", "-c", "true"}, HostPaths: []string{"/bin/sh"}, AllowMissingLibraries: true})
	if len(a.Summary.BaseLibraries) == 0 {
		t.Fatal("HostPaths /bin/sh not carried")
	}
}

// On a merged-/usr host dpkg registers dash's /bin/dash, which the closure
// finds as /usr/bin/dash: the SBOM must still name dash.
func TestHostPackagesUnderMergedUsrBin(t *testing.T) {
	testenv.NeedTools(t, "dpkg-query")
	if l, err := os.Readlink("/bin"); err != nil || strings.TrimPrefix(l, "/") != "usr/bin" {
		testenv.Unavailable(t, "/bin is not a link to usr/bin")
	}
	if out, err := exec.Command("dpkg-query", "-S", "/bin/dash").Output(); err != nil || !strings.HasPrefix(string(out), "dash") {
		testenv.Unavailable(t, "dpkg does not register /bin/dash")
	}
	pkgs, err := hostPackages(context.Background(), []string{"/usr/bin/dash"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || pkgs[0].Name != "dash" {
		t.Fatalf("owners of /usr/bin/dash: %+v, want dash", pkgs)
	}
}

// Host files under /tmp or /home/triton (HostPaths, absolute
// ExtraLibraries) must not turn the sticky world-writable /tmp or the
// user's home into plain root-owned 0755 directories.
func TestBaseLayerKeepsSpecialDirectories(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "tritonbuild-base-")
	if err != nil {
		testenv.Unavailable(t, "no /tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lib := filepath.Join(dir, "libx.so")
	if err := os.WriteFile(lib, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := baseLayerSpec(&closure{files: []string{lib}, dirs: []string{"/home/triton/venv"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range spec.entries {
		switch e.name {
		case "tmp":
			if e.mode != 0o1777 {
				t.Errorf("/tmp mode %o, want 1777", e.mode)
			}
		case "home/triton":
			if e.uid != 1000 || e.gid != 1000 {
				t.Errorf("/home/triton owned by %d:%d, want 1000:1000", e.uid, e.gid)
			}
		}
	}
}

// A layout base whose config records no history gets entries for its
// layers too.
func TestLayoutBaseWithoutHistoryHasHistory(t *testing.T) {
	base := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch})
	cfg, err := base.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.History = nil
	img, err := mutate.ConfigFile(base.Image, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(context.Background(), img, dir, "base", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	a := assemble(t, Options{Trees: scriptTrees(t, "other"), Epoch: testEpoch, Base: dir})
	got, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range got.History {
		if !h.EmptyLayer {
			n++
		}
	}
	if n != len(got.RootFS.DiffIDs) {
		t.Fatalf("%d history entries for %d layers", n, len(got.RootFS.DiffIDs))
	}
}

// dpkg-query -S prints "local diversion from: PATH" for a locally diverted
// file: that is no package to ask dpkg-query -W about.
func TestHostPackagesSkipsLocalDiversions(t *testing.T) {
	bin := t.TempDir()
	script := `#!/bin/sh
if [ "$1" = -S ]; then
	echo "local diversion from: /usr/lib/libx.so.1"
	echo "local diversion to: /usr/lib/libx.so.1.distrib"
	echo "libx1:amd64: /usr/lib/libx.so.1"
	exit 0
fi
shift 3
[ "$1" = -- ] && shift
for p in "$@"; do
	case "$p" in
	*" "*) echo "dpkg-query: no packages found matching $p" >&2; exit 1;;
	esac
done
for p in "$@"; do printf '%s\t1.0\tamd64\t\n' "${p%%:*}"; done
`
	if err := os.WriteFile(filepath.Join(bin, "dpkg-query"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	pkgs, err := hostPackages(context.Background(), []string{"/usr/lib/libx.so.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || pkgs[0].Name != "libx1" {
		t.Fatalf("packages %+v, want libx1", pkgs)
	}
}
