package builder

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/remote"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// TestMain lets the test binary stand in for tritonbuild as the memory
// broker's launcher: Build routes every compile and link through
// `EXE launch -- ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "launch" {
		args := os.Args[2:]
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		os.Exit(toolchain.Launch(context.Background(), args, os.Environ()))
	}
	os.Exit(m.Run())
}

// countingRegistry is an in-process OCI registry that counts requests.
type countingRegistry struct {
	ref      string
	requests atomic.Int64
}

func newCountingRegistry(t *testing.T) *countingRegistry {
	r := &countingRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	r.ref = u.Host + "/team/trees"
	return r
}

func (f *fixture) project() *Project {
	f.t.Helper()
	set, err := recipe.Load(recipe.OSDir(f.recipes))
	if err != nil {
		f.t.Fatal(err)
	}
	return &Project{Recipes: set, Settings: f.settings, Store: f.store}
}

func (f *fixture) buildOptions(out *bytes.Buffer, c TreeCache) BuildOptions {
	f.t.Helper()
	host, err := toolchain.Probe(context.Background(), toolchain.ProbeOptions{Tools: []string{}})
	if err != nil {
		f.t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatal(err)
	}
	opts := BuildOptions{Host: host, Exe: exe, Jobs: 2, Out: out, Fetch: f.executor(nil).FetchOptions}
	if c != nil {
		opts.Cache = c
	}
	return opts
}

// Build is the whole pipeline: with a binary cache it pushes every tree
// it commits, and a cold store at the same root then pulls the trees
// instead of building them (no source is fetched). Without a cache,
// planning and building ask no server anything.
func TestBuildPullsAndPushesThroughTheCache(t *testing.T) {
	f := newFixture(t)
	reg := newCountingRegistry(t)
	cache := &remote.Cache{Ref: reg.ref}
	ctx := context.Background()

	var out bytes.Buffer
	res, err := f.project().Build(ctx, f.buildOptions(&out, cache))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Built != 3 || res.Pushed != 3 || res.Pulled != 0 {
		t.Fatalf("first build: built %d, pushed %d, pulled %d; want 3, 3, 0\n%s", res.Built, res.Pushed, res.Pulled, out.String())
	}
	if !strings.Contains(out.String(), "asking binary cache "+reg.ref+" about 3 node(s)") {
		t.Errorf("planning asked the cache without saying so:\n%s", out.String())
	}
	for _, n := range res.Plan.Nodes {
		if root, relocatable, ok, err := cache.Lookup(ctx, n.Hash); err != nil || !ok || root != f.store.Root || !relocatable {
			t.Errorf("%s in the cache: %v, %q, relocatable %v, %v", n.Name, ok, root, relocatable, err)
		}
	}

	// A forced node is rebuilt, not taken from the cache: planning asks
	// nothing about it.
	before := reg.requests.Load()
	out.Reset()
	forced := f.buildOptions(&out, cache)
	forced.Force = []string{"app"}
	plan, err := f.project().PlanBuild(ctx, forced)
	if err != nil {
		t.Fatal(err)
	}
	if n := plan.Node("app"); n.Status != StatusBuild || !n.Forced || reg.requests.Load() != before || out.Len() != 0 {
		t.Errorf("forced app: %s (forced %v), %d requests, output %q", n.Status, n.Forced, reg.requests.Load()-before, out.String())
	}

	// A cold machine with the same store root pulls, builds nothing and
	// downloads no source.
	root := f.store.Root
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if f.store, err = store.Open(root); err != nil {
		t.Fatal(err)
	}
	hits := f.hits.Load()
	out.Reset()
	res, err = f.project().Build(ctx, f.buildOptions(&out, cache))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Pulled != 3 || res.Built != 0 || res.Pushed != 0 {
		t.Fatalf("cold build: pulled %d, built %d, pushed %d; want 3, 0, 0\n%s", res.Pulled, res.Built, res.Pushed, out.String())
	}
	if f.hits.Load() != hits {
		t.Errorf("a pulled build fetched sources")
	}
	for _, n := range res.Plan.Nodes {
		if n.Status != StatusCached || !f.store.Has(n.Key()) {
			t.Errorf("%s: %s after the pull", n.Name, n.Status)
		}
	}

	// Without a cache: no request at all, in planning or building.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if f.store, err = store.Open(root); err != nil {
		t.Fatal(err)
	}
	before = reg.requests.Load()
	out.Reset()
	p := f.project()
	plan, err = p.PlanBuild(ctx, f.buildOptions(&out, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range plan.Nodes {
		if n.Status != StatusBuild || n.Jobs == nil {
			t.Errorf("%s: %s, jobs %v without a cache", n.Name, n.Status, n.Jobs)
		}
	}
	if res, err = p.Build(ctx, f.buildOptions(&out, nil)); err != nil || res.Built != 3 {
		t.Fatalf("build without a cache: %v, %+v\n%s", err, res, out.String())
	}
	if n := reg.requests.Load() - before; n != 0 || strings.Contains(out.String(), "binary cache") {
		t.Errorf("without a cache the pipeline made %d registry requests:\n%s", n, out.String())
	}
}

// A build never runs without the memory broker: no launcher executable,
// or one that is not there, is an error before anything is fetched.
func TestBuildNeedsTheLauncher(t *testing.T) {
	f := newFixture(t)
	for _, exe := range []string{"", "/nonexistent/tritonbuild"} {
		var out bytes.Buffer
		opts := f.buildOptions(&out, nil)
		opts.Exe = exe
		_, err := f.project().Build(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), "memory broker") {
			t.Errorf("exe %q: %v, want an error naming the memory broker", exe, err)
		}
	}
	if f.hits.Load() != 0 {
		t.Errorf("a build without its launcher fetched sources")
	}
	if entries, _ := os.ReadDir(f.store.Root + "/nodes"); len(entries) != 0 {
		t.Errorf("a build without its launcher committed %d nodes", len(entries))
	}
}
