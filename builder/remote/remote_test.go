package remote_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/remote"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/images/imagestest"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

var _ builder.TreeCache = (*remote.Cache)(nil)

// world is a recipe dir with a real CMake library and a program using it.
type world struct {
	t       *testing.T
	recipes string
}

func newWorld(t *testing.T) *world {
	testenv.NeedTools(t, "cmake", "ninja", "cc")
	demo, _ := filepath.Abs("testdata/demo")
	dir := t.TempDir()
	for _, name := range []string{"demo", "user"} {
		data, err := os.ReadFile("testdata/recipes/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		out := strings.ReplaceAll(string(data), "{{DEMODIR}}", demo)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &world{t: t, recipes: dir}
}

func (w *world) plan(st *store.Store) *builder.Plan {
	w.t.Helper()
	set, err := recipe.Load(recipe.OSDir(w.recipes))
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := builder.MakePlan(context.Background(), set, builder.PlanOptions{
		Settings: recipe.Settings{Targets: []string{"user"}}, Store: st, HostCompiler: "test-cc"})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

func (w *world) build(st *store.Store, p *builder.Plan) {
	w.t.Helper()
	var log bytes.Buffer
	e := &builder.Executor{Store: st, Out: &log, Jobs: 2}
	if err := e.Run(context.Background(), p, p.Nodes); err != nil {
		w.t.Fatalf("%v\n%s", err, log.String())
	}
}

func statuses(p *builder.Plan) map[string]builder.Status {
	out := map[string]builder.Status{}
	for _, n := range p.Nodes {
		out[n.Name] = n.Status
	}
	return out
}

// TestIntegrationRegistryRoundTrip builds two nodes, pushes them to a real
// registry, empties the store and hydrates it from the registry instead of
// building; then a store elsewhere does not take trees built for another
// root, and a tampered blob is refused without touching the store.
func TestIntegrationRegistryRoundTrip(t *testing.T) {
	w := newWorld(t)
	reg := imagestest.StartRegistry(t)
	ref := reg.Ref("team/tritonbuild-cache")
	ctx := context.Background()
	opts := remote.Options{Insecure: true}
	cache := &remote.Cache{Ref: ref, Options: opts}
	executor := func(st *store.Store) *builder.Executor { return &builder.Executor{Store: st, Cache: cache} }

	root := filepath.Join(t.TempDir(), "store")
	a, err := store.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	pa := w.plan(a)
	w.build(a, pa)
	n, err := executor(a).Push(ctx, pa.Nodes)
	if err != nil || n != 2 {
		t.Fatalf("pushed %d, %v; want 2 nodes", n, err)
	}
	if n, err := executor(a).Push(ctx, pa.Nodes); err != nil || n != 0 {
		t.Fatalf("second push uploaded %d, %v; want nothing", n, err)
	}
	for _, node := range pa.Nodes {
		ok, err := remote.Has(ctx, ref, node.Hash, opts)
		if err != nil || !ok {
			t.Fatalf("Has(%s) = %v, %v", node.Name, ok, err)
		}
	}
	if ok, err := remote.Has(ctx, ref, strings.Repeat("0", 64), opts); err != nil || ok {
		t.Fatalf("Has(unknown) = %v, %v; want false, nil", ok, err)
	}
	wantDigest := map[string]string{}
	for _, node := range pa.Nodes {
		m, err := a.Manifest(node.Key())
		if err != nil {
			t.Fatal(err)
		}
		wantDigest[node.Name] = m.Digest
	}

	// The same root, emptied: plan, mark, pull, nothing built.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	pb := w.plan(b)
	for name, s := range statuses(pb) {
		if s != builder.StatusBuild {
			t.Fatalf("%s is %s in an empty store", name, s)
		}
	}
	if n, err := pb.AskCache(ctx, cache, b.Root, nil); err != nil || n != 2 {
		t.Fatalf("AskCache = %d, %v; want 2", n, err)
	}
	for name, s := range statuses(pb) {
		if s != builder.StatusRemote {
			t.Errorf("%s is %s, want %s", name, s, builder.StatusRemote)
		}
	}
	if n, err := executor(b).Pull(ctx, pb.Nodes); err != nil || n != 2 {
		t.Fatalf("Pull = %d, %v; want 2", n, err)
	}
	w.build(b, pb) // must find nothing to do
	if work, _ := os.ReadDir(filepath.Join(root, "work")); len(work) != 0 {
		t.Errorf("a pulled plan built something: work dirs %v", work)
	}
	for _, node := range pb.Nodes {
		if node.Status != builder.StatusCached {
			t.Errorf("%s: status %s after pull", node.Name, node.Status)
		}
		m, err := b.Manifest(node.Key())
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != wantDigest[node.Name] {
			t.Errorf("%s: pulled digest %s, built %s", node.Name, m.Digest, wantDigest[node.Name])
		}
	}
	out, err := exec.Command(filepath.Join(b.TreeDir(pb.Node("user").Key()), "bin", "user")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "answer 42" {
		t.Fatalf("pulled program printed %q, %v", out, err)
	}
	if fi, err := os.Lstat(filepath.Join(b.TreeDir(pb.Node("demo").Key()), "lib", "libdemo.so")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("libdemo.so symlink not restored: %v %v", fi, err)
	}

	// A store at another root takes these trees too: runpaths are
	// $ORIGIN-relative and the files naming the root are rewritten.
	other, err := store.Open(filepath.Join(t.TempDir(), "elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	po := w.plan(other)
	if n, err := po.AskCache(ctx, cache, other.Root, nil); err != nil || n != len(po.Nodes) {
		t.Fatalf("AskCache for another root = %d, %v; want %d", n, err, len(po.Nodes))
	}
	if n, err := executor(other).Pull(ctx, po.Nodes); err != nil || n != len(po.Nodes) {
		t.Fatalf("Pull into another root = %d, %v", n, err)
	}
	for _, node := range po.Nodes {
		m, err := other.Manifest(node.Key())
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != wantDigest[node.Name] || m.StoreRoot != other.Root {
			t.Errorf("%s pulled into another root: digest %s (built %s), store root %q", node.Name, m.Digest, wantDigest[node.Name], m.StoreRoot)
		}
	}
	out, err = exec.Command(filepath.Join(other.TreeDir(po.Node("user").Key()), "bin", "user")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "answer 42" {
		t.Fatalf("program pulled into another root printed %q, %v", out, err)
	}

	// Tamper with the demo tree's layer in the registry's storage: the
	// pull is refused and nothing enters the store.
	demo := pb.Node("demo")
	layer := layerBlobPath(t, reg, ref, demo.Hash)
	data, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(layer, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := store.Open(filepath.Join(t.TempDir(), "c"))
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(c.Root, "staging", "pull-demo")
	_, err = cache.Pull(ctx, demo.Hash, dest)
	var de *remote.DigestError
	if !errors.As(err, &de) {
		t.Fatalf("pull of a tampered blob: %v, want a *remote.DigestError", err)
	}
	if !strings.Contains(err.Error(), "tampered") {
		t.Errorf("error %q does not say what happened", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("tampered pull left %s behind: %v", dest, err)
	}
	// Through the plan: the node is refused, the store stays empty.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	d, err := store.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	pd := w.plan(d)
	if _, err := pd.AskCache(ctx, cache, d.Root, nil); err != nil {
		t.Fatal(err)
	}
	_, err = executor(d).Pull(ctx, pd.Nodes)
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "demo") {
		t.Fatalf("Pull with a tampered layer: %v", err)
	}
	if nodes, _ := os.ReadDir(filepath.Join(root, "nodes")); len(nodes) != 0 {
		t.Errorf("store holds %d nodes after a refused pull", len(nodes))
	}
	if staged, _ := os.ReadDir(filepath.Join(root, "staging")); len(staged) != 0 {
		t.Errorf("staging not cleaned: %v", staged)
	}
	// A build pulls what the cache holds and builds what it refuses.
	pe := w.plan(d)
	if n, err := pe.AskCache(ctx, cache, d.Root, nil); err != nil || n != 2 {
		t.Fatalf("AskCache = %d, %v; want 2", n, err)
	}
	var log bytes.Buffer
	e := &builder.Executor{Store: d, Cache: cache, Out: &log, Jobs: 2}
	if err := e.Run(ctx, pe, pe.Nodes); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "demo 1.2: ") || !strings.Contains(log.String(), "building it instead") {
		t.Errorf("the refused pull is not reported:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(d.LogDir(pe.Node("demo").Key()), "build.log")); err != nil {
		t.Errorf("demo was not built after its pull was refused: %v", err)
	}
	if _, err := os.Stat(d.LogDir(pe.Node("user").Key())); !os.IsNotExist(err) {
		t.Errorf("user was built although the cache holds it: %v", err)
	}
	for _, node := range pe.Nodes {
		if !d.Has(node.Key()) || node.Status != builder.StatusCached {
			t.Errorf("%s: %s, in store %v", node.Name, node.Status, d.Has(node.Key()))
		}
	}
}

// layerBlobPath finds the tree layer's data file in the registry's
// filesystem storage.
func layerBlobPath(t *testing.T, reg *imagestest.Registry, ref, hash string) string {
	t.Helper()
	ann, err := remote.Lookup(context.Background(), ref, hash, remote.Options{Insecure: true})
	if err != nil || ann == nil {
		t.Fatalf("lookup: %v %v", ann, err)
	}
	digest, err := remote.LayerDigest(context.Background(), ref, hash, remote.Options{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	hex := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(reg.Root, "docker", "registry", "v2", "blobs", "sha256", hex[:2], hex, "data")
}
