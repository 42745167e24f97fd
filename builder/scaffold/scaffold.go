// Package scaffold writes the starting point of a custom TorchScript
// operator project (`tritonbuild new op NAME`): a build.yaml, a recipe that
// compiles the op against the pytorch node, the op's C++ and CMakeLists, a
// script that makes a TorchScript model calling the op, and a model
// repository whose config loads the op library. The templates are embedded.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"text/template"
)

//go:embed templates/*.tmpl
var templates embed.FS

// Scale is the s of the example model's a + s*b.
const Scale = "0.5"

// Options say what to scaffold and where.
type Options struct {
	// Name is the op library: its recipe, C++ namespace and lib<Name>.so.
	Name string
	// Dir is the project directory to write (created when missing).
	Dir string
	// Source is the tritonbuild source tree (the module that holds
	// cmd/tritonserver). Built-in recipes with local sources name paths in
	// it; the project gets copies of those recipes pointing there, since
	// built-ins resolve local sources against the project directory.
	Source string
	// Builtin holds the built-in recipe files (recipes.FS()).
	Builtin fs.FS
}

// File is one file of the scaffold, with a slash path relative to Dir.
type File struct {
	Path string
	Mode os.FileMode
	Data []byte
}

// NameError says why a name cannot name an op library.
type NameError struct {
	Name   string
	Reason string
}

func (e *NameError) Error() string { return fmt.Sprintf("invalid op name %q: %s", e.Name, e.Reason) }

// ExistsError lists the scaffold files already present; nothing was
// written.
type ExistsError struct {
	Dir   string
	Paths []string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%s already holds %s; refusing to overwrite (nothing written)", e.Dir, strings.Join(e.Paths, ", "))
}

// ModuleName is the Go module a tritonbuild source tree declares.
const ModuleName = "github.com/tritonbuild/tritonbuild"

// nameRE is where C++ identifiers and recipe names agree: lowercase, a
// letter first, no '.' or '-'.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// reservedReason says why name may not name an op library, or "": C++ and
// Python keywords (the name is a C++ namespace and a Python attribute of
// torch.ops), TorchScript's own operator namespaces, and the built-in
// recipes of the stack.
func reservedReason(name string) string {
	groups := []struct{ why, words string }{
		{"a C++ keyword", `alignas alignof and and_eq asm auto bitand bitor bool break case catch
			char char8_t char16_t char32_t class compl concept const consteval constexpr constinit const_cast
			continue co_await co_return co_yield decltype default delete do double dynamic_cast else enum
			explicit export extern false float for friend goto if inline int long mutable namespace new
			noexcept not not_eq nullptr operator or or_eq private protected public register reinterpret_cast
			requires return short signed sizeof static static_assert static_cast struct switch template this
			thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
			wchar_t while xor xor_eq`},
		{"a Python keyword (torch.ops." + name + " cannot be written)", `as assert async await def del elif
			except finally from global import in is lambda nonlocal pass raise with yield`},
		{"a namespace TorchScript uses itself", `aten prim prims torch quantized onnx cuda attr scope user
			profiler mkldnn mkldnn_prepacked quantized_decomposed static_runtime tensorexpr ops`},
		{"a built-in recipe of the stack", `llvm pytorch runtime tritonserver`},
	}
	for _, g := range groups {
		for _, w := range strings.Fields(g.words) {
			if w == name {
				return g.why
			}
		}
	}
	return ""
}

// ValidateName checks that name works as a recipe name, a C++ namespace,
// a torch.ops attribute and a file name.
func ValidateName(name string) error {
	switch {
	case name == "":
		return &NameError{Name: name, Reason: "empty"}
	case len(name) > 64:
		return &NameError{Name: name, Reason: "longer than 64 characters"}
	case !nameRE.MatchString(name):
		return &NameError{Name: name, Reason: "want a lowercase letter followed by lowercase letters, digits and '_' (a C++ identifier that is also a recipe name)"}
	case strings.Contains(name, "__"):
		return &NameError{Name: name, Reason: "C++ reserves identifiers containing '__'"}
	}
	if why := reservedReason(name); why != "" {
		return &NameError{Name: name, Reason: why}
	}
	return nil
}

// data is what the templates see.
type data struct {
	Name  string
	Model string
	Scale string
	// LibraryPath is op_library_filename: relative to the model's version
	// directory, the same in the project and in the image.
	LibraryPath string
}

// ModelName is the example model's name in the scaffold's repository.
func ModelName(name string) string { return name + "_scaled_add" }

// Files renders the scaffold without writing anything.
func Files(opts Options) ([]File, error) {
	if err := ValidateName(opts.Name); err != nil {
		return nil, err
	}
	d := data{Name: opts.Name, Model: ModelName(opts.Name), Scale: Scale,
		LibraryPath: "../../../opt/tritonserver/lib/lib" + opts.Name + ".so"}
	layout := []struct{ tmpl, out string }{
		{"build.yaml.tmpl", "build.yaml"},
		{"recipe.yaml.tmpl", "recipes/" + d.Name + ".yaml"},
		{"CMakeLists.txt.tmpl", "op/CMakeLists.txt"},
		{"op.cpp.tmpl", "op/src/" + d.Name + ".cpp"},
		{"make_model.py.tmpl", "scripts/make_model.py"},
		{"config.pbtxt.tmpl", "models/" + d.Model + "/config.pbtxt"},
		{"README.md.tmpl", "README.md"},
		{"gitignore.tmpl", ".gitignore"},
	}
	var files []File
	for _, l := range layout {
		t, err := template.New(l.tmpl).Option("missingkey=error").ParseFS(templates, "templates/"+l.tmpl)
		if err != nil {
			return nil, fmt.Errorf("scaffold template %s: %w", l.tmpl, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return nil, fmt.Errorf("scaffold template %s: %w", l.tmpl, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(l.out, ".py") {
			mode = 0o755
		}
		files = append(files, File{Path: l.out, Mode: mode, Data: b.Bytes()})
	}
	overrides, err := sourceOverrides(opts)
	if err != nil {
		return nil, err
	}
	return append(files, overrides...), nil
}

var (
	localRE = regexp.MustCompile(`(?m)^(\s+local:[ \t]*)(\S+)[ \t]*$`)
	plainRE = regexp.MustCompile(`^[A-Za-z0-9_./+-]+$`)
)

// sourceOverrides copies the built-in recipes that build from local sources
// (the runtime library, the server) into the project's recipes/ with their
// local path made absolute in opts.Source. Built-ins resolve local sources
// against the directory of build.yaml, which here is the op's project, not
// tritonbuild's tree. Only that one value changes.
func sourceOverrides(opts Options) ([]File, error) {
	if opts.Builtin == nil {
		return nil, nil
	}
	entries, err := fs.ReadDir(opts.Builtin, ".")
	if err != nil {
		return nil, fmt.Errorf("reading built-in recipes: %w", err)
	}
	var files []File
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".yaml" {
			continue
		}
		src, err := fs.ReadFile(opts.Builtin, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading built-in recipe %s: %w", e.Name(), err)
		}
		if !localRE.Match(src) {
			continue
		}
		if opts.Source == "" {
			return nil, fmt.Errorf("built-in recipe %s builds from the tritonbuild source tree: the scaffold needs its location (Options.Source)", e.Name())
		}
		var bad error
		out := localRE.ReplaceAllFunc(src, func(m []byte) []byte {
			sub := localRE.FindSubmatch(m)
			rel := string(sub[2])
			if filepath.IsAbs(rel) {
				return m
			}
			abs := filepath.Join(opts.Source, filepath.FromSlash(strings.Trim(rel, `"'`)))
			if _, err := os.Stat(abs); err != nil {
				bad = fmt.Errorf("built-in recipe %s: local source %s: %w", e.Name(), abs, err)
			}
			return append(append([]byte{}, sub[1]...), []byte(quoteYAML(abs))...)
		})
		if bad != nil {
			return nil, bad
		}
		header := fmt.Sprintf("# Copy of tritonbuild's built-in recipe %s, made by `tritonbuild new op`.\n"+
			"# Only the local source differs: it names the tritonbuild tree at\n# %s,\n"+
			"# because built-in recipes resolve local sources against this project.\n", e.Name(), opts.Source)
		files = append(files, File{Path: "recipes/" + e.Name(), Mode: 0o644, Data: append([]byte(header), out...)})
	}
	return files, nil
}

// quoteYAML double-quotes s when plain YAML could misread it.
func quoteYAML(s string) string {
	if plainRE.MatchString(s) {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// Write renders the scaffold into opts.Dir. When any of its files exists it
// writes nothing and returns an *ExistsError. Files are written to
// temporary names and renamed, and on failure everything written so far is
// removed. It returns the written paths, relative to Dir.
func Write(opts Options) ([]string, error) {
	if opts.Dir == "" {
		return nil, errors.New("scaffold: no directory given")
	}
	files, err := Files(opts)
	if err != nil {
		return nil, err
	}
	var exists []string
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(opts.Dir, filepath.FromSlash(f.Path))); err == nil {
			exists = append(exists, f.Path)
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("checking %s: %w", filepath.Join(opts.Dir, f.Path), err)
		}
	}
	if len(exists) > 0 {
		sort.Strings(exists)
		return nil, &ExistsError{Dir: opts.Dir, Paths: exists}
	}
	var written []string
	var madeDirs []string
	undo := func() {
		for _, p := range written {
			os.Remove(filepath.Join(opts.Dir, filepath.FromSlash(p)))
		}
		for i := len(madeDirs) - 1; i >= 0; i-- {
			os.Remove(madeDirs[i]) // only when empty
		}
	}
	mkdir := func(dir string) error {
		var missing []string
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			missing = append(missing, d)
			if filepath.Dir(d) == d {
				break
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for i := len(missing) - 1; i >= 0; i-- {
			madeDirs = append(madeDirs, missing[i])
		}
		return nil
	}
	// The example model's version directory, where make_model.py writes.
	versionDir := filepath.Join(opts.Dir, "models", ModelName(opts.Name), "1")
	for _, f := range files {
		dst := filepath.Join(opts.Dir, filepath.FromSlash(f.Path))
		if err := mkdir(filepath.Dir(dst)); err != nil {
			undo()
			return nil, fmt.Errorf("creating %s: %w", filepath.Dir(dst), err)
		}
		if err := writeNew(dst, f.Data, f.Mode); err != nil {
			undo()
			return nil, err
		}
		written = append(written, f.Path)
	}
	if err := mkdir(versionDir); err != nil {
		undo()
		return nil, fmt.Errorf("creating %s: %w", versionDir, err)
	}
	return written, nil
}

// writeNew writes a file through a temporary name and links it into place,
// failing rather than replacing a file that appeared meanwhile.
func writeNew(dst string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".scaffold-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Link(tmp.Name(), dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return &ExistsError{Dir: filepath.Dir(dst), Paths: []string{filepath.Base(dst)}}
		}
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}

// FindSource returns the tritonbuild source tree containing dir: the
// nearest ancestor whose go.mod declares ModuleName.
func FindSource(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if IsSource(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no tritonbuild source tree (a go.mod of module %s) at or above %s", ModuleName, dir)
		}
	}
}

// IsSource reports whether dir is a tritonbuild source tree.
func IsSource(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && f[1] == ModuleName {
			return true
		}
	}
	return false
}
