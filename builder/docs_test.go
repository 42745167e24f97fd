package builder

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// Defect 11: docs/recipes.md documents every recipe field (exports was
// missing) and every variable a build step takes from the caller (PATH and
// HOME leaked in undocumented).
func TestRecipeDocsCoverFieldsAndEnvironment(t *testing.T) {
	data, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, at string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || !f.IsExported() {
				continue
			}
			if !strings.Contains(doc, "`"+name+"`") && !strings.Contains(doc, name+":") {
				t.Errorf("docs/recipes.md does not document %s.%s", at, name)
			}
			walk(f.Type, at+"."+name)
		}
	}
	walk(reflect.TypeOf(recipe.Recipe{}), "recipe")
	for _, v := range append(append([]string{}, passThroughEnv...), "PATH", "SOURCE_DATE_EPOCH", "PKG_CONFIG_PATH", "PREFIX=") {
		if !strings.Contains(doc, v) {
			t.Errorf("docs/recipes.md does not say that build steps see %s", v)
		}
	}
}
