// Package tritonbuild holds the project's own source trees that the
// built-in recipes build: runtime/csrc (recipe runtime), the serving
// binary's Go packages with the module files (recipe tritonserver), and the
// recipes' patches. A tritonbuild binary builds them from the checkout it
// was compiled in while that exists, else from the copy embedded here, so
// it works wherever it runs and whatever the current directory is.
package tritonbuild

import (
	"bytes"
	"embed"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Module is this module's path.
const Module = "github.com/tritonbuild/tritonbuild"

// embedded is what the built-in recipes' relative local sources and patch
// files name. all: keeps files whose names start with '.' or '_'; no tree
// here may hold an executable file that a recipe hashes, since an embed.FS
// has no exec bits (a test holds the hashes of both copies equal).
//
//go:embed go.mod go.sum all:cmd/tritonserver all:runtime all:internal all:recipes/patches
var embedded embed.FS

// Embedded returns the embedded copy, with the repository's paths.
func Embedded() fs.FS { return embedded }

// buildYAML is the project's own build.yaml. Its profiles (system, archive)
// are documented as built in, so they must work from a directory that has
// no build.yaml too.
//
//go:embed build.yaml
var buildYAML []byte

// BuildConfig returns the project's own build.yaml as compiled in.
func BuildConfig() []byte { return buildYAML }

// Checkout returns the root of the checkout this binary was compiled from,
// or "" when that is unknown (a -trimpath build), gone, or no longer this
// module.
func Checkout() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module "+Module+"\n")) {
		return ""
	}
	return dir
}
