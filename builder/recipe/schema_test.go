package recipe

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compiledSchema compiles Schema() with a real JSON Schema validator.
func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := json.Marshal(Schema())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("recipe.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("recipe.json")
	if err != nil {
		t.Fatalf("the generated schema does not compile: %v", err)
	}
	return s
}

// placeholders are the test recipes' template fields, filled in by their
// tests before loading.
var placeholders = regexp.MustCompile(`\{\{[A-Z_]+\}\}`)

func validateRecipe(t *testing.T, s *jsonschema.Schema, file string) error {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data = placeholders.ReplaceAllFunc(data, func(m []byte) []byte {
		switch string(m) {
		case "{{SHA}}":
			return []byte(strings.Repeat("0", 64))
		case "{{GENERATOR}}":
			return []byte("Ninja")
		}
		return []byte("placeholder")
	})
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return s.Validate(v)
}

// Defect 6: every built-in and test recipe validates against the schema
// `tritonbuild schema` prints, sizes written as documented included.
func TestSchemaAcceptsEveryRecipe(t *testing.T) {
	s := compiledSchema(t)
	var files []string
	for _, glob := range []string{
		"../../recipes/*.yaml",
		"../testdata/recipes/*.yaml",
		"../testdata/hashpin/*.yaml",
		"../remote/testdata/recipes/*.yaml",
		"../../cmd/tritonbuild/testdata/outside/*.yaml",
		"testdata/badset/*/*.yaml",
	} {
		m, _ := filepath.Glob(glob)
		if len(m) == 0 {
			t.Errorf("no recipes match %s", glob)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		if err := validateRecipe(t, s, f); err != nil {
			t.Errorf("%s: rejected by the schema: %v", f, err)
		}
	}
}

// The schema encodes the cross-field rules: one source kind with its
// required fields and none of another's, one build system, sizes. (An
// enum default outside its values is beyond JSON Schema: the loader
// catches it.)
func TestSchemaRejectsBadRecipes(t *testing.T) {
	s := compiledSchema(t)
	for _, f := range []string{"nosha", "twokinds", "nobuild", "unknownkey", "badsize", "badsha", "gitnocommit", "foreignfield", "badgenerator", "unquotedversion", "epochtype"} {
		if err := validateRecipe(t, s, "testdata/bad/"+f+".yaml"); err == nil {
			t.Errorf("%s.yaml: accepted by the schema", f)
		}
	}
}
