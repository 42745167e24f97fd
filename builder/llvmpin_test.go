package builder

import (
	"context"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/recipes"
)

// The built-in llvm recipe at 15.0.6 with default options is a build of
// hours whose tree (store node llvm-bd5662aed4303e5f) and binary cache tag
// are keyed by this hash, computed with the reference machine's compiler
// line and platform. Anything that changes it (recipes/llvm.yaml, how
// recipes are hashed, a new field without omitempty) throws that build
// away: it must be deliberate, and said so to whoever owns the tree. It
// was 87c47005703f33f4 until the scheduling hints (memory, disk) left the
// hash, which rebuilt it once.
func TestBuiltinLLVMHashIsPinned(t *testing.T) {
	set, err := recipe.Load(recipe.Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		settings recipe.Settings
		want     string
	}{
		{recipe.Settings{Targets: []string{"llvm"}, Versions: map[string]string{"llvm": "15.0.6"}}, "bd5662aed4303e5f67dd24bfb6cdcc99844bbc29665eeec388ce13cda359e2e9"},
		// --set llvm.options.linker= (the default, spelled out) is the same node.
		{recipe.Settings{Targets: []string{"llvm"}, Versions: map[string]string{"llvm": "15.0.6"}, Options: map[string]map[string]any{"llvm": {"linker": ""}}}, "bd5662aed4303e5f67dd24bfb6cdcc99844bbc29665eeec388ce13cda359e2e9"},
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
