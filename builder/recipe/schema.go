package recipe

import (
	"slices"

	"github.com/invopop/jsonschema"
	orderedmap "github.com/pb33f/ordered-map/v2"
)

// Schema returns the JSON Schema of recipe files, for editors: generated
// from the Go types, plus what the types alone cannot say (sizes as
// strings or numbers, one source kind with its required fields, one build
// system, option defaults of the option's type).
func Schema() *jsonschema.Schema {
	r := &jsonschema.Reflector{FieldNameTag: "yaml", RequiredFromJSONSchemaTags: true, AllowAdditionalProperties: false}
	s := r.Reflect(&Recipe{})
	// The id names the schema, not the Go package it is generated from:
	// keep it stable for editors that cache it.
	s.ID = "https://github.com/tritonbuild/tritonbuild/builder/recipe"
	s.Title = "tritonbuild recipe"
	return s
}

// sizePattern is what ParseByteSize accepts.
const sizePattern = `^\s*[0-9]+(\.[0-9]+)?\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB|T|G|M|K|B)?\s*$`

// JSONSchema lets a size be written 512MiB, 1.5GiB, 2G or a byte count.
func (ByteSize) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Description: "a size: 512MiB, 1.5GiB, 2G or a byte count",
		OneOf: []*jsonschema.Schema{
			{Type: "integer", Minimum: "0"},
			{Type: "string", Pattern: sizePattern},
		},
	}
}

// JSONSchemaExtend states the source kinds: exactly one of url, git, apt
// and local, each with its required fields and none of another kind's.
func (Source) JSONSchemaExtend(s *jsonschema.Schema) {
	kinds := []struct {
		key      string
		required []string
		own      []string
	}{
		{"url", []string{"url", "sha256"}, []string{"url", "sha256", "mirrors", "strip"}},
		{"git", []string{"git", "tag", "commit"}, []string{"git", "tag", "commit", "submodules"}},
		{"apt", []string{"apt", "apt_version", "file", "sha256"}, []string{"apt", "apt_version", "file", "sha256", "strip"}},
		{"local", []string{"local"}, []string{"local", "exclude", "include"}},
	}
	all := []string{"url", "sha256", "mirrors", "git", "tag", "commit", "submodules", "apt", "apt_version", "file", "local", "exclude", "include", "strip"}
	for _, k := range kinds {
		var foreign []*jsonschema.Schema
		for _, f := range all {
			if !slices.Contains(k.own, f) {
				foreign = append(foreign, &jsonschema.Schema{Required: []string{f}})
			}
		}
		s.OneOf = append(s.OneOf, &jsonschema.Schema{
			Title:    k.key + " source",
			Required: k.required,
			Not:      &jsonschema.Schema{AnyOf: foreign},
		})
	}
}

// JSONSchemaExtend requires exactly one build system.
func (Build) JSONSchemaExtend(s *jsonschema.Schema) {
	for _, k := range []string{"cmake", "make", "meson", "go", "script"} {
		s.OneOf = append(s.OneOf, &jsonschema.Schema{Required: []string{k}})
	}
}

// JSONSchemaExtend ties an option's default to its type, and requires the
// values of an enum.
func (Option) JSONSchemaExtend(s *jsonschema.Schema) {
	rule := func(typ string, def *jsonschema.Schema, required ...string) *jsonschema.Schema {
		props := orderedmap.New[string, *jsonschema.Schema]()
		props.Set("type", &jsonschema.Schema{Const: typ})
		thenProps := orderedmap.New[string, *jsonschema.Schema]()
		thenProps.Set("default", def)
		return &jsonschema.Schema{
			If:   &jsonschema.Schema{Properties: props, Required: []string{"type"}},
			Then: &jsonschema.Schema{Properties: thenProps, Required: append([]string{"default"}, required...)},
		}
	}
	s.AllOf = append(s.AllOf,
		rule("bool", &jsonschema.Schema{Type: "boolean"}),
		rule("string", &jsonschema.Schema{Type: "string"}),
		rule("list", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"}}),
		rule("enum", &jsonschema.Schema{Type: "string"}, "values"),
	)
}
