// Package recipes holds tritonbuild's built-in recipes, one YAML file per
// package, embedded in the binary. User recipes (--recipes DIR or
// recipes_dirs in build.yaml) override these by name.
package recipes

import (
	"embed"
	"io/fs"
)

//go:embed *.yaml
var files embed.FS

// FS returns the built-in recipe files.
func FS() fs.FS { return files }
