package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/recipes"
)

// Every bad recipe must be refused before anything runs, with the exact
// file:line:column, the field and a message a person can act on.
func TestBadRecipes(t *testing.T) {
	cases := map[string]string{
		"badenum.yaml":         `testdata/bad/badenum.yaml:9:14: options.mode.default: "huge" is not one of fast, small`,
		"badgenerator.yaml":    `testdata/bad/badgenerator.yaml:7:16: build.cmake.generator: unknown generator "Xcode" (want Ninja or "Unix Makefiles")`,
		"badpackage.yaml":      `testdata/bad/badpackage.yaml:5:33: versions[0].host_packages[1]: invalid package name "libfmt dev" (a distribution package: lowercase letters, digits, '+', '-', '.')`,
		"badref.yaml":          `testdata/bad/badref.yaml:11:26: build.cmake.defines.BUILD_SHARED_LIBS: reference ${options.shraed} names option "shraed", which the recipe does not declare`,
		"badsha.yaml":          `testdata/bad/badsha.yaml:6:15: versions[0].source.sha256: sha256 "DEADBEEF" is not 64 lowercase hex digits`,
		"badsize.yaml":         `testdata/bad/badsize.yaml:8:12: memory.compile: invalid size "lots" (want e.g. 512MiB, 1.5GiB)`,
		"foreignfield.yaml":    `testdata/bad/foreignfield.yaml:6:15: versions[0].source.sha256: field sha256 does not apply to a local source`,
		"gitnocommit.yaml":     `testdata/bad/gitnocommit.yaml:5:12: versions[0].source.git: a git source needs commit (the full hash the tag must resolve to)`,
		"namemismatch.yaml":    `testdata/bad/namemismatch.yaml:1:7: name: name "something-else" does not match the file name "namemismatch.yaml"`,
		"nobuild.yaml":         `testdata/bad/nobuild.yaml:1:1: build: build needs exactly one of cmake, make, meson, go or script`,
		"nosha.yaml":           `testdata/bad/nosha.yaml:5:12: versions[0].source.url: a url source needs sha256`,
		"twodefaults.yaml":     `testdata/bad/twodefaults.yaml:7:14: versions[1].default: more than one version is marked default`,
		"twokinds.yaml":        `testdata/bad/twokinds.yaml:5:10: versions[0].source: source sets several kinds; exactly one of url, git, apt or local is allowed`,
		"unknownkey.yaml":      `testdata/bad/unknownkey.yaml:9:5: build.cmake.generatr: unknown field "generatr"`,
		"wrongtype.yaml":       `testdata/bad/wrongtype.yaml:12:12: build.script.steps: string was used where sequence is expected`,
		"unquotedversion.yaml": `testdata/bad/unquotedversion.yaml:3:14: versions[0].version: version 1.10 is a number to YAML; quote it ("1.10") so that it stays as written`,
		"epochtype.yaml":       `testdata/bad/epochtype.yaml:4:12: versions[0].epoch: expected a whole number, got a string`,
		"badglob.yaml":         `testdata/bad/badglob.yaml:6:27: versions[0].source.include[1]: "[abc" is not a valid glob (path.Match syntax plus **)`,
		"escapingglob.yaml":    `testdata/bad/escapingglob.yaml:6:17: versions[0].source.exclude[0]: "../secrets/**" must be relative to the source's directory and stay inside it`,
	}
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(cases) {
		t.Fatalf("testdata/bad has %d files, the table %d: keep them in step", len(files), len(cases))
	}
	for _, f := range files {
		want, ok := cases[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: no expected message in the table", f)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(f, data)
		if err == nil {
			t.Errorf("%s: accepted, want %q", f, want)
			continue
		}
		if got := strings.SplitN(err.Error(), "\n", 2)[0]; got != want {
			t.Errorf("%s:\n got %s\nwant %s", f, got, want)
		}
		var pe *PosError
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %T is not a *PosError", f, err)
		}
	}
}

func TestBadRecipeSets(t *testing.T) {
	cases := []struct{ dir, want string }{
		{"cycle", "testdata/badset/cycle/b.yaml:6:11: depends[0].name: dependency cycle: a -> b -> a"},
		{"unknowndep", `testdata/badset/unknowndep/c.yaml:6:11: depends[0].name: unknown dependency "zlib" (no recipe of that name)` + "\n" +
			`testdata/badset/unknowndep/c.yaml:8:12: toolchain: unknown toolchain "gcc" (no recipe of that name)`},
	}
	for _, c := range cases {
		_, err := Load(OSDir("testdata/badset/" + c.dir))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.dir, err, c.want)
		}
	}
}

func TestBuiltinRecipesLoad(t *testing.T) {
	set, err := Load(Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llvm", "pytorch", "runtime", "tritonserver"} {
		if set.Get(name) == nil {
			t.Errorf("built-in recipe %s missing", name)
		}
	}
	llvm := set.Get("llvm")
	if v := llvm.DefaultVersion().Version; v != "15.0.7" {
		t.Errorf("llvm default version %s, want 15.0.7", v)
	}
	if s := llvm.FindVersion("15.0.6").Source; s.Kind() != SourceApt || s.Apt != "llvm-toolchain-15" {
		t.Errorf("llvm 15.0.6 source %+v, want the distribution's source package", s)
	}
}

// A user directory overrides a built-in recipe of the same name.
func TestUserRecipesOverride(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "runtime.yaml"), []byte(`name: runtime
versions:
  - version: "9.9"
    source: {local: .}
build:
  make: {}
`), 0o644)
	set, err := Load(Dir{FS: recipes.FS(), Label: "recipes", Builtin: true}, OSDir(dir))
	if err == nil {
		// tritonserver depends on runtime without a constraint: still valid.
		if v := set.Get("runtime").DefaultVersion().Version; v != "9.9" {
			t.Errorf("runtime version %s, want the user's 9.9", v)
		}
		return
	}
	t.Fatal(err)
}

func TestConstraints(t *testing.T) {
	cases := []struct {
		c    Constraint
		v    string
		want bool
	}{
		{"", "1.0", true},
		{"1.13", "1.13.1", true},
		{"1.13", "1.13.0a0", true},
		{"1.13", "1.14.0", false},
		{">=1.13,<2", "1.13.1", true},
		{">=1.13,<2", "2.0", false},
		{"=15.0.6", "15.0.6", true},
		{">15", "15.0.7", true},
		{"<=15.0.6", "15.0.7", false},
	}
	for _, c := range cases {
		if got := c.c.Match(c.v); got != c.want {
			t.Errorf("%q.Match(%q) = %v, want %v", c.c, c.v, got, c.want)
		}
	}
	if err := Constraint(">= 1 2").Validate(); err == nil {
		t.Error("malformed constraint accepted")
	}
}

func TestConfigErrorsAndProfiles(t *testing.T) {
	_, err := ParseConfig("build.yaml", []byte("targets: [a]\nprofiles:\n  sys:\n    externalz: {}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "build.yaml:4:5: profiles.sys.externalz: unknown field") {
		t.Errorf("got %v", err)
	}
	c, err := ParseConfig("build.yaml", []byte("targets: [a]\noptions: {a: {x: 1}}\nprofiles:\n  sys:\n    targets: [b]\n    options: {a: {y: 2}}\n    externals: {llvm: /usr/lib/llvm-15}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Resolve("sys")
	if err != nil {
		t.Fatal(err)
	}
	if s.Targets[0] != "b" || s.Options["a"]["x"] == nil || s.Options["a"]["y"] == nil || s.Externals["llvm"] == "" {
		t.Errorf("profile not merged: %+v", s)
	}
	if _, err := c.Resolve("nope"); err == nil || !strings.Contains(err.Error(), `unknown profile "nope"`) {
		t.Errorf("got %v", err)
	}
}

func TestLocalSourceSelection(t *testing.T) {
	s := &Source{Local: ".",
		Include: []string{"go.mod", "cmd/server/*.go", "runtime/py/stub/*.py", "docs/**"},
		Exclude: []string{"**/*_test.go", "docs/private"}}
	for rel, want := range map[string]bool{
		"go.mod": false, "go.sum": true, // only go.mod is included
		"cmd": false, "cmd/server": false, "cmd/server/main.go": false, // on the way, then matched
		"cmd/server/main_test.go": true, "cmd/builder": true, "cmd/builder/main.go": true,
		"cmd/server/testdata": true, // a directory * matches: nothing below it can match *.go
		"runtime":             false, "runtime/py": false, "runtime/py/stub": false, "runtime/py/stub/a.py": false,
		"runtime/py/x.go": true, "builder": true,
		"docs": false, "docs/a/b.md": false, "docs/private": true, "docs/private/x.md": true,
		"x_test.go": true,
	} {
		if got := s.Excluded(rel); got != want {
			t.Errorf("Excluded(%q) = %v, want %v", rel, got, want)
		}
	}
	// Without include, exclude alone decides, as before.
	s = &Source{Local: ".", Exclude: []string{".git", "out", "builder/*.go"}}
	for rel, want := range map[string]bool{".git": true, ".git/HEAD": true, "builder/x.go": true, "builder/fetch/y.go": false, "src/out": false} {
		if got := s.Excluded(rel); got != want {
			t.Errorf("exclude only: Excluded(%q) = %v, want %v", rel, got, want)
		}
	}
}

// Defect 10: one broken recipe in a user directory does not break loading;
// it and what depends on it are set aside with their errors.
func TestBrokenUserRecipeIsSetAside(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"ok.yaml":     "name: ok\nversions:\n  - version: \"1\"\n    source: {local: .}\nbuild:\n  make: {}\n",
		"broken.yaml": "name: broken\nversions: \"1.0\"\nbuild:\n  make: {}\n",
		"user.yaml":   "name: user\nversions:\n  - version: \"1\"\n    source: {local: .}\ndepends: [{name: broken}]\nbuild:\n  make: {}\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := Load(OSDir(dir))
	if err != nil {
		t.Fatalf("one broken recipe failed the whole load: %v", err)
	}
	if set.Get("ok") == nil {
		t.Error("the good recipe is missing")
	}
	if got := strings.Join(set.BrokenNames(), " "); got != "broken user" {
		t.Errorf("broken: %q", got)
	}
	if err := set.Broken("user"); err == nil || !strings.Contains(err.Error(), "needs recipe broken") || !strings.Contains(err.Error(), "broken.yaml:2:11") {
		t.Errorf("user's error: %v", err)
	}
}
