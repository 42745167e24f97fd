package builder

import (
	"context"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/recipes"
)

// The built-in llvm recipe at 15.0.6 with default options is a build of
// hours whose tree (store node llvm-87c47005703f33f4) and binary cache tag
// are keyed by this hash, computed with the reference machine's compiler
// line and platform. Anything that changes it (recipes/llvm.yaml, how
// recipes are hashed, a new field without omitempty) throws that build
// away: it must be deliberate, and said so to whoever owns the tree.
func TestBuiltinLLVMHashIsPinned(t *testing.T) {
	set, err := recipe.Load(recipe.Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		settings recipe.Settings
		want     string
	}{
		{recipe.Settings{Targets: []string{"llvm"}, Versions: map[string]string{"llvm": "15.0.6"}}, "87c47005703f33f4f58f3340c2e9d8d1ed63d4b3bf62e01469bc36e4713a9334"},
		// --set llvm.options.linker= (the default, spelled out) is the same node.
		{recipe.Settings{Targets: []string{"llvm"}, Versions: map[string]string{"llvm": "15.0.6"}, Options: map[string]map[string]any{"llvm": {"linker": ""}}}, "87c47005703f33f4f58f3340c2e9d8d1ed63d4b3bf62e01469bc36e4713a9334"},
	} {
		p, err := MakePlan(context.Background(), set, PlanOptions{Settings: c.settings, HostCompiler: "cc (Debian 12.2.0-14+deb12u1) 12.2.0", Platform: "linux/amd64"})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Node("llvm").Hash; got != c.want {
			t.Errorf("llvm 15.0.6 %v hashes to %s, pinned %s", c.settings.Options, got, c.want)
		}
	}
}
