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
// computed before the recipe and store packages were split out of builder;
// a change here must be deliberate.
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
			"base":     "2df41e088cd6d6e542a8817b5d23583481e1c92c3e51369695b700e36a1862f3",
			"gitdep":   "608b68cc01ac682fa6feef34fbbbe6ca9ea48a102c8fb8fae8bbeb78a2534be1",
			"aptdep":   "097bdbd4e4de35c9ef1b30b13913844a6ac987ad792eb349a52346ae8c7439e5",
			"localapp": "3914ec2137ce7cf3ac8f337b3b9dfd6f7937f5cc73190e7aadf90c306e8cf69f",
		}},
		{recipe.Settings{
			Targets:  []string{"localapp"},
			Versions: map[string]string{"base": "2.0"},
			Options:  map[string]map[string]any{"base": {"shout": true, "extra": []any{"x"}, "flavour": "fancy", "suffix": "s"}},
		}, map[string]string{
			"base":     "1b1275df089f7b43ba8b51443ede56d61da07da8f218de0b3385275be1ac4d37",
			"gitdep":   "bee089fc81d49d1c12d484eb4f98bbe8171b9f8f3ccfb2b003ebe9db8248f6b5",
			"aptdep":   "c6135a606be1bcd025463383852d92a6868d4948f9d8b80d39da36d4c36da119",
			"localapp": "7e05e92f719e8d92a5a60e65e1fbad9ff613f661a73ae81cb119ed70be65e336",
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
