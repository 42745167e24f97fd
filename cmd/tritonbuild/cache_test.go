package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/tritonbuild/tritonbuild/images/imagestest"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// With `cache: {registry: REF}` in build.yaml, one machine's build pushes
// its trees and a machine with a cold store (same store path) plans them as
// "cached (remote)" and pulls instead of building.
func TestBinaryCacheThroughBuildYAML(t *testing.T) {
	testenv.NeedTools(t, "docker-registry")
	reg := imagestest.StartRegistry(t)
	proj, _, release := slowProject(t)
	os.WriteFile(release, nil, 0o644) // the fixture build runs straight through
	cfg := filepath.Join(proj, "build.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(data, []byte("cache: {registry: "+reg.Ref("team/trees")+", insecure: true}\n")...), 0o644)

	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("first build: %v\n%s", err, stderr)
	}
	// A cold machine: the same store path, emptied.
	store := filepath.Join(proj, "store")
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run(t, proj, "plan", "--json")
	if err != nil || !strings.Contains(out, `"status": "cached (remote)"`) {
		t.Fatalf("plan on a cold store: %v\n%s\n%s", err, out, stderr)
	}
	// The build script would block without the release file: pulling must
	// not run it.
	os.Remove(release)
	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("second build: %v\n%s", err, stderr)
	}
	if n := nodesIn(t, store); len(n) != 1 {
		t.Fatalf("store after pull: %v", n)
	}
	if _, err := os.Stat(filepath.Join(store, "nodes", nodesIn(t, store)[0], "tree", "share", "full")); err != nil {
		t.Errorf("pulled tree incomplete: %v", err)
	}
}

// `tritonbuild plan` makes no network request unless build.yaml names a
// binary cache; with one, it asks the cache about the nodes it would build
// and says so.
func TestPlanAsksTheCacheOnlyWhenConfigured(t *testing.T) {
	var requests atomic.Int64
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	proj, _, _ := slowProject(t)

	out, stderr, err := run(t, proj, "plan")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	if n := requests.Load(); n != 0 || strings.Contains(stderr, "binary cache") {
		t.Errorf("plan without a cache made %d requests:\n%s", n, stderr)
	}
	if !strings.Contains(out, "not in store") {
		t.Errorf("plan output:\n%s", out)
	}

	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/trees"
	cfg := filepath.Join(proj, "build.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(data, []byte("cache: {registry: "+ref+", insecure: true}\n")...), 0o644)
	out, stderr, err = run(t, proj, "plan")
	if err != nil {
		t.Fatalf("plan with a cache: %v\n%s", err, stderr)
	}
	if requests.Load() == 0 || !strings.Contains(stderr, "asking binary cache "+ref+" about 1 node(s)") {
		t.Errorf("plan with a cache: %d requests, stderr:\n%s", requests.Load(), stderr)
	}
	if !strings.Contains(out, "not in store or binary cache") {
		t.Errorf("plan output does not say the cache lacks the node:\n%s", out)
	}
}

// `cache pull` says why it pulled nothing, and a store at another root
// takes the trees another root pushed (defect 8).
func TestCachePullExplainsAndRelocates(t *testing.T) {
	testenv.NeedTools(t, "docker-registry")
	reg := imagestest.StartRegistry(t)
	proj, _, release := slowProject(t)
	os.WriteFile(release, nil, 0o644)
	ref := reg.Ref("team/relocated")
	if _, stderr, err := run(t, proj, "build", "slow"); err != nil {
		t.Fatalf("build: %v\n%s", err, stderr)
	}
	if _, stderr, err := run(t, proj, "cache", "push", "--insecure", ref); err != nil {
		t.Fatalf("push: %v\n%s", err, stderr)
	}
	_, stderr, err := run(t, proj, "cache", "pull", "--insecure", ref)
	if err != nil || !strings.Contains(stderr, "pulled 0 tree(s)") || !strings.Contains(stderr, "slow 1: not pulled: already in the store") {
		t.Fatalf("pull into the store that has it: %v\n%s", err, stderr)
	}
	other := filepath.Join(t.TempDir(), "another-root")
	_, stderr, err = run(t, proj, "cache", "pull", "--insecure", "--store", other, ref)
	if err != nil || !strings.Contains(stderr, "pulled 1 tree(s)") {
		t.Fatalf("pull into a store at another root: %v\n%s", err, stderr)
	}
	if n := nodesIn(t, other); len(n) != 1 {
		t.Fatalf("other store after pull: %v", n)
	}
}
