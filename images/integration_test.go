package images

// Integration tests against the real tools around images: skopeo, umoci +
// chroot, the Docker engine and a distribution registry server. They skip in
// -short mode; a missing tool skips with the reason, or fails under
// TRITONBUILD_REQUIRE_INTEGRATION=1 (CI, see internal/testenv).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/tritonbuild/tritonbuild/images/imagestest"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// helloImage assembles a scratch image around the compiled greet tree: the
// stand-in for tritonserver that exercises the library closure for real.
func helloImage(t *testing.T) *Assembly {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	tree := greetTree(t)
	models := t.TempDir()
	writeFiles(t, models, map[string]string{"hello/config.pbtxt": "name: \"hello\"\nbackend: \"python\"\n"})
	return assemble(t, Options{
		Trees:           []Tree{{Name: "hello", Version: "1.0", Hash: "h1", Dir: tree, License: "MIT"}},
		Entrypoint:      []string{"/opt/tritonserver/bin/hello"},
		Cmd:             []string{},
		ModelRepository: models,
		Epoch:           testEpoch,
		Version:         "0.0.1-test",
	})
}

func TestIntegrationLayoutSkopeoUmociChroot(t *testing.T) {
	asm := helloImage(t)
	testenv.NeedTools(t, "skopeo", "umoci")
	testenv.NeedRoot(t, "unpacking and chrooting into the image")
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(context.Background(), asm.Image, dir, "test", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	info := imagestest.SkopeoInspect(t, "oci:"+dir+":test")
	if info["Digest"] != asm.Summary.Digest.String() {
		t.Errorf("skopeo sees digest %v, assembled %s", info["Digest"], asm.Summary.Digest)
	}
	labels, _ := info["Labels"].(map[string]any)
	if labels["dev.tritonbuild.recipe.hello"] != "1.0@h1" {
		t.Errorf("skopeo labels %v", labels)
	}

	rootfs := imagestest.UmociUnpack(t, dir, "test")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := imagestest.RunChroot(ctx, t, rootfs, []string{"LD_LIBRARY_PATH="}, "/opt/tritonserver/bin/hello")
	if err != nil || strings.TrimSpace(out) != "hello from tritonbuild 3.0" {
		t.Fatalf("running the program in the unpacked image: %v\n%s", err, out)
	}
	// Only the closure is there: no shell, no unrelated libraries.
	if _, err := os.Stat(filepath.Join(rootfs, "bin", "sh")); err == nil {
		t.Error("the scratch image carries /bin/sh")
	}
	st, err := os.Stat(filepath.Join(rootfs, "tmp"))
	if err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("/tmp: %v %v", st.Mode(), err)
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "models", "hello", "config.pbtxt")); err != nil || !strings.Contains(string(b), "hello") {
		t.Errorf("model repository not at /models: %v", err)
	}
}

func TestIntegrationDockerLoadRunInspect(t *testing.T) {
	asm := helloImage(t)
	d := imagestest.NewDocker(t)
	tag := fmt.Sprintf("tritonbuild-test/hello:%d", time.Now().UnixNano())
	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(context.Background(), asm.Image, tb, tag, OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	loaded := d.Load(tb)
	if !strings.HasSuffix(loaded, tag) {
		t.Errorf("docker loaded %q, want %q", loaded, tag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := d.Run(ctx, tag)
	if err != nil || strings.TrimSpace(out) != "hello from tritonbuild 3.0" {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	out, err = d.Run(ctx, tag, "with-an-argument")
	if err != nil || strings.TrimSpace(out) != "hello from tritonbuild 4.0" {
		t.Fatalf("docker run with an argument: %v\n%s", err, out)
	}
	ins := d.Inspect(tag)
	if ins.Config.User != "1000:1000" {
		t.Errorf("user %q", ins.Config.User)
	}
	for _, p := range []string{"8000/tcp", "8001/tcp", "8002/tcp"} {
		if _, ok := ins.Config.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, ins.Config.ExposedPorts)
		}
	}
	if ins.Config.Labels["dev.tritonbuild.recipe.hello"] != "1.0@h1" || ins.Config.Labels["org.opencontainers.image.version"] != "0.0.1-test" {
		t.Errorf("labels %v", ins.Config.Labels)
	}
	cfgName, _ := asm.Image.ConfigName()
	if ins.ID != cfgName.String() {
		t.Errorf("docker image id %s, config digest %s", ins.ID, cfgName)
	}
}

func TestIntegrationRegistryPushPull(t *testing.T) {
	asm := helloImage(t)
	reg := imagestest.StartRegistry(t)
	ref := reg.Ref("tritonbuild/hello:test")
	pushed, err := Push(context.Background(), asm.Image, ref, OutputOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(pushed, "@"+asm.Summary.Digest.String()) {
		t.Fatalf("pushed %s, want digest %s", pushed, asm.Summary.Digest)
	}
	r, err := name.ParseReference(pushed, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r)
	if err != nil {
		t.Fatalf("pulling %s back: %v", pushed, err)
	}
	if err := validate.Image(got); err != nil {
		t.Fatalf("pulled image invalid: %v", err)
	}
	gd, _ := got.Digest()
	if gd != asm.Summary.Digest {
		t.Fatalf("pulled %s, pushed %s", gd, asm.Summary.Digest)
	}
	// An independent client agrees.
	info := imagestest.SkopeoInspect(t, "docker://"+pushed, "--tls-verify=false")
	if info["Digest"] != asm.Summary.Digest.String() {
		t.Errorf("skopeo sees %v", info["Digest"])
	}
	// Pushing again uploads nothing new and gives the same digest.
	again, err := Push(context.Background(), asm.Image, ref, OutputOptions{Insecure: true})
	if err != nil || again != pushed {
		t.Fatalf("second push: %s %v", again, err)
	}
}

// TestIntegrationLibtorchClosure checks the library closure on the large
// real one the serving binary has: a program linked (eagerly, so the loader
// must map everything at start) against the distribution's libtorch, whose
// dependencies include /etc/alternatives symlink chains (BLAS, LAPACK).
func TestIntegrationLibtorchClosure(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	testenv.NeedTools(t, "cc", "umoci")
	testenv.NeedRoot(t, "unpacking and chrooting into the image")
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so"); err != nil {
		testenv.Unavailable(t, "libtorch-dev is not installed: %v", err)
	}
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"main.c": "#include <stdio.h>\nint main(void) { puts(\"torch closure ok\"); return 0; }\n"})
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "bin"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := imagestest.Run(ctx, "cc", "-o", filepath.Join(tree, "bin", "tritonserver"), filepath.Join(src, "main.c"), "-Wl,--no-as-needed", "-ltorch_cpu", "-lc10"); err != nil {
		t.Fatal(err)
	}
	asm := assemble(t, Options{Trees: []Tree{{Name: "torchapp", Dir: tree}}, Epoch: testEpoch, Cmd: []string{}, CompressionLevel: 1})
	if len(asm.Summary.BaseLibraries) < 20 {
		t.Fatalf("libtorch closure has only %d files: %v", len(asm.Summary.BaseLibraries), asm.Summary.BaseLibraries)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(ctx, asm.Image, dir, "torch", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	rootfs := imagestest.UmociUnpack(t, dir, "torch")
	env := []string{"LD_LIBRARY_PATH=" + strings.Join(asm.Summary.LibraryPath, ":")}
	out, err := imagestest.RunChroot(ctx, t, rootfs, env, "/opt/tritonserver/bin/tritonserver")
	if err != nil || strings.TrimSpace(out) != "torch closure ok" {
		t.Fatalf("running the libtorch program in the unpacked image: %v\n%s", err, out)
	}
}

// TestIntegrationHostPythonInScratch copies the host's Python interpreter
// and standard library into a scratch image (what the python backend needs)
// and runs it there, extension modules included.
func TestIntegrationHostPythonInScratch(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	testenv.NeedTools(t, "umoci")
	testenv.NeedRoot(t, "unpacking and chrooting into the image")
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		testenv.Unavailable(t, "no distribution python3: %v", err)
	}
	stdlib := "/usr/lib/" + filepath.Base(py) // e.g. /usr/lib/python3.11
	if _, err := os.Stat(stdlib); err != nil {
		testenv.Unavailable(t, "no standard library at %s: %v", stdlib, err)
	}
	asm := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, CompressionLevel: 1,
		HostPaths: []string{"/usr/bin/python3", stdlib}})
	dir := filepath.Join(t.TempDir(), "oci")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := WriteLayout(ctx, asm.Image, dir, "py", OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	rootfs := imagestest.UmociUnpack(t, dir, "py")
	out, err := imagestest.RunChroot(ctx, t, rootfs, []string{"LD_LIBRARY_PATH="}, "/usr/bin/python3", "-c",
		"import json, hashlib, ctypes; print(json.dumps({'ok': hashlib.sha256(b'x').hexdigest()[:8]}))")
	if err != nil || strings.TrimSpace(out) != `{"ok": "2d711642"}` {
		t.Fatalf("python in the scratch image: %v\n%s", err, out)
	}
}

// TestIntegrationHomeOnABaseImage runs, as the image's user, what the
// python backend does first (create os.UserCacheDir()/tritonserver, i.e.
// $HOME/.cache/tritonserver) in an image whose base has no /home: the C
// library of a scratch image's base layer without its /home, as a gzip
// rootfs padded with NULs after its gzip data.
func TestIntegrationHomeOnABaseImage(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	testenv.NeedTools(t, "cc")
	d := imagestest.NewDocker(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"main.c": `#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
int main(void) {
	const char *home = getenv("HOME");
	const char *sub[] = {"/.cache", "/.cache/tritonserver"};
	char p[4096];
	if (home == NULL) { puts("no HOME"); return 1; }
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof p, "%s%s", home, sub[i]);
		if (mkdir(p, 0755) != 0 && errno != EEXIST) { printf("mkdir %s: %s\n", p, strerror(errno)); return 1; }
	}
	printf("created %s\n", p);
	return 0;
}
`})
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := imagestest.Run(ctx, "cc", "-o", filepath.Join(tree, "bin", "homecheck"), filepath.Join(src, "main.c")); err != nil {
		t.Fatal(err)
	}
	trees := []Tree{{Name: "homecheck", Version: "1.0", Hash: "h1", Dir: tree}}
	ep := []string{"/opt/tritonserver/bin/homecheck"}
	scratch := assemble(t, Options{Trees: trees, Epoch: testEpoch, Entrypoint: ep, Cmd: []string{}})
	layers, err := scratch.Image.Layers()
	if err != nil || scratch.Summary.Layers[0].Name != baseLayerLabel {
		t.Fatalf("scratch image layers %+v: %v", scratch.Summary.Layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var rootfs bytes.Buffer
	zw := gzip.NewWriter(&rootfs)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.TrimSuffix(h.Name, "/"); n == "home" || strings.HasPrefix(n, "home/") {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	rootfs.Write(make([]byte, 4096))
	base := filepath.Join(t.TempDir(), "rootfs.tar.gz")
	if err := os.WriteFile(base, rootfs.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	asm := assemble(t, Options{Trees: trees, Epoch: testEpoch, Base: base, Entrypoint: ep, Cmd: []string{}})
	tag := fmt.Sprintf("tritonbuild-test/home:%d", time.Now().UnixNano())
	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(ctx, asm.Image, tb, tag, OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Load(tb)
	out, err := d.Run(ctx, tag)
	if err != nil || strings.TrimSpace(out) != "created /home/triton/.cache/tritonserver" {
		t.Fatalf("docker run as %s: %v\n%s", DefaultUser, err, out)
	}
}
