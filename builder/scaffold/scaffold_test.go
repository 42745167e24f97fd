package scaffold

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/recipes"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// repoRoot is the tritonbuild tree this package lives in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !IsSource(root) {
		t.Fatalf("%s is not a tritonbuild tree", root)
	}
	return root
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"myops", "a", "ops2", "my_ops", "x1_y2"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, why := range map[string]string{
		"":                      "empty",
		"MyOps":                 "lowercase",
		"my-ops":                "lowercase letters, digits and '_'",
		"my.ops":                "lowercase letters, digits and '_'",
		"2ops":                  "a lowercase letter",
		"_ops":                  "a lowercase letter",
		"my__ops":               "'__'",
		"class":                 "C++ keyword",
		"lambda":                "Python keyword",
		"aten":                  "TorchScript uses itself",
		"tritonserver":          "built-in recipe",
		strings.Repeat("a", 65): "longer than 64",
	} {
		err := ValidateName(name)
		var ne *NameError
		if !errors.As(err, &ne) || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: got %v, want a NameError about %q", name, err, why)
		}
	}
}

// The rendered project is one a person can build: every YAML file loads
// with the builder's strict loader, build.yaml plans the op with the
// server in its closure, and the model config parses and names the op
// library by the path that works in the prefix and the image.
func TestRenderedProjectLoadsAndPlans(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "proj")
	written, err := Write(Options{Name: "myops", Dir: dir, Source: root, Builtin: recipes.FS()})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"build.yaml", "recipes/myops.yaml", "recipes/runtime.yaml", "recipes/tritonserver.yaml",
		"recipes/python-backend-utils.yaml", "op/CMakeLists.txt", "op/src/myops.cpp", "scripts/make_model.py", "models/myops_scaled_add/config.pbtxt", "README.md"} {
		found := false
		for _, w := range written {
			found = found || w == want
		}
		if !found {
			t.Errorf("%s not written (wrote %v)", want, written)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "models", "myops_scaled_add", "1")); err != nil || !st.IsDir() {
		t.Errorf("the example model's version directory is missing: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "scripts", "make_model.py")); st == nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("make_model.py is not executable")
	}

	p, err := builder.OpenProject(builder.ProjectOptions{
		ConfigFile: filepath.Join(dir, "build.yaml"), ConfigExplicit: true,
		Builtin: recipes.FS(), StoreDir: t.TempDir(), ProjectDirHint: dir,
	})
	if err != nil {
		t.Fatalf("opening the scaffold: %v", err)
	}
	for name, file := range map[string]string{"myops": "recipes/myops.yaml", "runtime": "recipes/runtime.yaml", "tritonserver": "recipes/tritonserver.yaml"} {
		r := p.Recipes.Get(name)
		if r == nil || r.File() != filepath.Join(dir, file) {
			t.Fatalf("recipe %s comes from %v, want %s", name, r, file)
		}
	}
	for _, name := range []string{"runtime", "python-backend-utils", "tritonserver"} {
		local := p.Recipes.Get(name).DefaultVersion().Source.Local
		if !filepath.IsAbs(local) || !strings.HasPrefix(local, root) {
			t.Errorf("%s's local source %q is not in %s", name, local, root)
		}
	}
	// Without the profile the plan builds LLVM and libtorch too, but it
	// is made without running anything.
	plan, err := p.Plan(context.Background(), nil, nil)
	if err != nil {
		t.Fatalf("planning the scaffold: %v", err)
	}
	names := strings.Join(plan.SortedNames(), " ")
	if !strings.HasSuffix(names, "myops") {
		t.Errorf("plan order %q: the op should come last", names)
	}
	op := plan.Node("myops")
	for _, dep := range []string{"pytorch", "tritonserver", "llvm"} {
		found := false
		for _, d := range op.Depends {
			found = found || d == dep
		}
		if !found {
			t.Errorf("myops does not depend on %s: %v", dep, op.Depends)
		}
	}
	if p.Settings.Image == nil || p.Settings.Image.Target != "myops" || p.Settings.Prefix != "opt/tritonserver" {
		t.Errorf("image %+v prefix %q", p.Settings.Image, p.Settings.Prefix)
	}
	if sys, err := p.Config.Resolve("system"); err != nil || sys.Externals["pytorch"] != "/usr" || sys.Externals["llvm"] != "/usr/lib/llvm-15" {
		t.Errorf("system profile: %+v %v", sys.Externals, err)
	}

	cfg, err := modelconfig.LoadFile(filepath.Join(dir, "models", "myops_scaled_add", "config.pbtxt"))
	if err != nil {
		t.Fatalf("model config: %v", err)
	}
	libs := cfg.GetModelOperations().GetOpLibraryFilename()
	if len(libs) != 1 {
		t.Fatalf("op libraries %v", libs)
	}
	// Relative to the version directory: the project's prefix locally and
	// /opt/tritonserver in the image (models at /models).
	vdir := filepath.Join(dir, "models", "myops_scaled_add", "1")
	if got, want := filepath.Join(vdir, libs[0]), filepath.Join(dir, p.Settings.Prefix, "lib", "libmyops.so"); got != want {
		t.Errorf("locally the library resolves to %s, want %s", got, want)
	}
	if got := path.Join("/models/myops_scaled_add/1", libs[0]); got != "/opt/tritonserver/lib/libmyops.so" {
		t.Errorf("in the image the library resolves to %s", got)
	}

	cpp, _ := os.ReadFile(filepath.Join(dir, "op", "src", "myops.cpp"))
	py, _ := os.ReadFile(filepath.Join(dir, "scripts", "make_model.py"))
	if !strings.Contains(string(cpp), "TORCH_LIBRARY(myops, m)") || !strings.Contains(string(py), "torch.ops.myops.scaled_add(") {
		t.Errorf("the op and the model script disagree on the namespace")
	}
	cmake, _ := os.ReadFile(filepath.Join(dir, "op", "CMakeLists.txt"))
	for _, want := range []string{"$ENV{TORCH_CXX11_ABI}", "$ENV{TORCH_CXX_STANDARD}", "find_package(Torch", "LIBRARY DESTINATION lib"} {
		if !strings.Contains(string(cmake), want) {
			t.Errorf("CMakeLists.txt lacks %s", want)
		}
	}
}

func TestWriteRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "op", "CMakeLists.txt")
	os.MkdirAll(filepath.Dir(keep), 0o755)
	os.WriteFile(keep, []byte("mine\n"), 0o644)
	_, err := Write(Options{Name: "myops", Dir: dir, Source: repoRoot(t), Builtin: recipes.FS()})
	var ee *ExistsError
	if !errors.As(err, &ee) || len(ee.Paths) != 1 || ee.Paths[0] != "op/CMakeLists.txt" {
		t.Fatalf("got %v, want an ExistsError naming op/CMakeLists.txt", err)
	}
	if data, _ := os.ReadFile(keep); string(data) != "mine\n" {
		t.Errorf("the existing file changed: %q", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("something was written beside the refusal: %v", entries)
	}
}

// A failure halfway (an unwritable directory) removes what was written.
func TestWriteUndoesOnFailure(t *testing.T) {
	dir := t.TempDir()
	// "scripts" is a file, so scripts/make_model.py cannot be created
	// after build.yaml, the recipes and op/ were (permission bits would
	// not stop root).
	os.WriteFile(filepath.Join(dir, "scripts"), []byte("x"), 0o644)
	_, err := Write(Options{Name: "myops", Dir: dir, Source: repoRoot(t), Builtin: recipes.FS()})
	if err == nil || !strings.Contains(err.Error(), "scripts") {
		t.Fatalf("got %v, want a failure creating scripts/", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "scripts" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left behind after the failure: %v", names)
	}
}

func TestOverridesNeedSource(t *testing.T) {
	builtin := fstest.MapFS{
		"srv.yaml":  {Data: []byte("name: srv\nversions:\n  - version: \"1\"\n    source:\n      local: cmd/srv\n")},
		"tool.yaml": {Data: []byte("name: tool\nversions:\n  - version: \"1\"\n    source:\n      url: https://example.invalid/t.tar.gz\n")},
	}
	if _, err := Files(Options{Name: "myops", Builtin: builtin}); err == nil || !strings.Contains(err.Error(), "srv.yaml") {
		t.Errorf("no source: got %v, want an error naming srv.yaml", err)
	}
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "cmd", "srv"), 0o755)
	files, err := Files(Options{Name: "myops", Builtin: builtin, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	var srv *File
	for i := range files {
		if files[i].Path == "recipes/tool.yaml" {
			t.Errorf("a recipe without a local source was copied")
		}
		if files[i].Path == "recipes/srv.yaml" {
			srv = &files[i]
		}
	}
	if srv == nil || !strings.Contains(string(srv.Data), "local: "+quoteYAML(filepath.Join(src, "cmd", "srv"))+"\n") {
		t.Fatalf("srv override: %+v", srv)
	}
	if _, err := Files(Options{Name: "myops", Builtin: builtin, Source: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "cmd/srv") {
		t.Errorf("a source tree without cmd/srv: got %v", err)
	}
}

func TestFindSource(t *testing.T) {
	root := repoRoot(t)
	got, err := FindSource(filepath.Join(root, "builder", "scaffold"))
	if err != nil || got != root {
		t.Errorf("FindSource = %q, %v; want %s", got, err, root)
	}
	if _, err := FindSource(t.TempDir()); err == nil {
		t.Errorf("found a tritonbuild tree in an empty temp dir")
	}
}
