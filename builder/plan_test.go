package builder

import (
	"context"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// The node hash is the store's key and the binary cache's tag: a change to
// what planning hashes (the canonical recipe JSON, source digests, option
// rendering, the order of anything) turns every tree in every store and
// cache into a miss, including an LLVM build of hours. These hashes were
// computed before the recipe and store packages were split out of builder,
// and again when the scheduling hints (memory, disk) left the hash (base
// declares both, the others depend on it); a change here must be
// deliberate.
func TestPlanHashesArePinned(t *testing.T) {
	set, err := recipe.Load(recipe.OSDir("testdata/hashpin"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		settings recipe.Settings
		want     map[string]string
	}{
		{recipe.Settings{Targets: []string{"localapp"}}, map[string]string{
			"base":     "caaf96ee9b68ce4334150ffb83748c049b62475738c92b9713c83f36d8023f3a",
			"gitdep":   "1bbed0cfe2244072d15ff80819b95a38f9e2f27dc6553d8cf3f7563900215ab1",
			"aptdep":   "2ff27dfbf69c9bcf877e1a16f8c9ab3e9bd50616f517302eaeb16d28b213c6f2",
			"localapp": "8fd99e5f4bb530d3ddcacb65ef92350124d6b5e3822021fd0b401f9344c55179",
		}},
		{recipe.Settings{
			Targets:  []string{"localapp"},
			Versions: map[string]string{"base": "2.0"},
			Options:  map[string]map[string]any{"base": {"shout": true, "extra": []any{"x"}, "flavour": "fancy", "suffix": "s"}},
		}, map[string]string{
			"base":     "d0b85aa9765b8310ab37e15eeedc0b72db76f7972d7f26ec9bf9f45f955c9873",
			"gitdep":   "bc2c90c411ea10752770f5ca861892b03621da73dd1764231f50bbaa64e32c4b",
			"aptdep":   "3d7cd22eb9ec57f188b1890b26da4bc1f11f3434a91ea18e9e0adf1729f476cd",
			"localapp": "9ea41636c2dad03c0584d41d1a8ddf7aa086c22afc332a3d3213c496c9dd06a1",
		}},
	}
	for i, c := range cases {
		p, err := MakePlan(context.Background(), set, PlanOptions{Settings: c.settings, HostCompiler: "pin-cc 1.0", Platform: "linux/amd64"})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Nodes) != len(c.want) {
			t.Fatalf("case %d: %d nodes, want %d", i, len(p.Nodes), len(c.want))
		}
		for _, n := range p.Nodes {
			if n.Hash != c.want[n.Name] {
				t.Errorf("case %d: %s hashes to %s, pinned %s", i, n.Name, n.Hash, c.want[n.Name])
			}
		}
	}
}

// The scheduling hints, memory per job and disk, change how a build is
// run, not its tree: tuning them plans the same nodes (an LLVM build of
// hours is not thrown away), while a field that does reach the build (a
// CMake define) still changes the hash.
func TestSchedulingHintsAreNotHashed(t *testing.T) {
	plan := func(edit func(r *recipe.Recipe)) map[string]string {
		t.Helper()
		set, err := recipe.Load(recipe.OSDir("testdata/hashpin"))
		if err != nil {
			t.Fatal(err)
		}
		edit(set.Get("base"))
		p, err := MakePlan(context.Background(), set, PlanOptions{Settings: recipe.Settings{Targets: []string{"localapp"}}, HostCompiler: "pin-cc 1.0", Platform: "linux/amd64"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, n := range p.Nodes {
			out[n.Name] = n.Hash
		}
		return out
	}
	before := plan(func(*recipe.Recipe) {})
	tuned := plan(func(r *recipe.Recipe) {
		r.Memory = recipe.MemoryProfile{Compile: 3 << 30, Link: 9 << 30}
		r.Disk = 80 << 30
	})
	for name, h := range before {
		if tuned[name] != h {
			t.Errorf("%s: tuning base's memory and disk changed its hash from %s to %s", name, h, tuned[name])
		}
	}
	defined := plan(func(r *recipe.Recipe) { r.Build.CMake.Defines["TUNED"] = "1" })
	if defined["base"] == before["base"] || defined["localapp"] == before["localapp"] {
		t.Errorf("a new CMake define left the hashes as they were: %v", defined)
	}
}
