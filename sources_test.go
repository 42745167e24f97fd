package tritonbuild_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	tritonbuild "github.com/tritonbuild/tritonbuild"
	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/recipes"
)

// The embedded copy is a faithful stand-in for the checkout: every
// built-in recipe's local source hashes the same from both (so a binary
// far from any checkout plans the same nodes) and every patch is there
// byte for byte.
func TestEmbeddedSourcesMatchCheckout(t *testing.T) {
	set, err := recipe.Load(recipe.Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	emb := tritonbuild.Embedded()
	locals, patches := 0, 0
	for _, name := range set.Names() {
		r := set.Get(name)
		for i := range r.Versions {
			v := &r.Versions[i]
			if s := v.Source; s.Kind() == recipe.SourceLocal {
				locals++
				want, err := fetch.HashDir(s.Local, s.Excluded)
				if err != nil {
					t.Fatal(err)
				}
				sub, err := fs.Sub(emb, filepath.ToSlash(filepath.Clean(s.Local)))
				if err != nil {
					t.Fatal(err)
				}
				got, err := fetch.HashFS(sub, s.Excluded)
				if err != nil {
					t.Fatalf("%s %s: the embedded copy lacks %s: %v (add it to the go:embed line of sources.go)", name, v.Version, s.Local, err)
				}
				if got != want {
					t.Errorf("%s %s: local source %s hashes %s in the checkout and %s embedded: a file the recipe hashes is missing from the go:embed line of sources.go, or is executable (an embed.FS has no exec bits)", name, v.Version, s.Local, want, got)
				}
			}
			for _, p := range append(append([]recipe.Patch{}, r.Patches...), v.Patches...) {
				patches++
				want, err := os.ReadFile(p.File)
				if err != nil {
					t.Fatal(err)
				}
				got, err := fs.ReadFile(emb, p.File)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s %s: patch %s embedded differs or is missing: %v", name, v.Version, p.File, err)
				}
			}
		}
	}
	if locals < 2 || patches == 0 {
		t.Errorf("%d local sources and %d patches checked: the built-in recipes changed, update this test", locals, patches)
	}
}

func TestCheckoutIsThisTree(t *testing.T) {
	wd, _ := os.Getwd()
	if got := tritonbuild.Checkout(); got != wd {
		t.Errorf("Checkout() = %q, want %q (the tests run in the checkout)", got, wd)
	}
}
