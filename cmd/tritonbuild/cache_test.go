package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/images/imagestest"
)

// With `cache: {registry: REF}` in build.yaml, one machine's build pushes
// its trees and a machine with a cold store (same store path) plans them as
// "cached (remote)" and pulls instead of building.
func TestBinaryCacheThroughBuildYAML(t *testing.T) {
	imagestest.NeedTools(t, "docker-registry")
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
