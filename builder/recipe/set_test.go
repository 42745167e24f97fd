package recipe

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/recipes"
)

func builtinSet(t *testing.T) *Set {
	t.Helper()
	set, err := Load(Dir{FS: recipes.FS(), Label: "recipes", Builtin: true})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestApplySets(t *testing.T) {
	set := builtinSet(t)
	base := Settings{
		Versions:  map[string]string{"pytorch": "1.13.1+dfsg"},
		Externals: map[string]string{"pytorch": "/usr"},
		Options:   map[string]map[string]any{"llvm": {"rtti": true}},
	}
	got, err := ApplySets(base, set, []string{
		"llvm.version=15.0.6",
		"llvm.options.linker=lld",
		"llvm.options.assertions=on",
		"llvm.options.targets=X86,AArch64",
		"llvm.options.projects=",
		"llvm.options.build_type=Debug",
		"llvm.options.build_type=RelWithDebInfo", // the later one wins
		"pytorch.version=",                       // back to the default
		"pytorch.external=",                      // build it
		"llvm.external=opt/llvm",                 // relative to where it was typed
	}, "/home/me")
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Versions:  map[string]string{"llvm": "15.0.6"},
		Externals: map[string]string{"llvm": "/home/me/opt/llvm"},
		Options: map[string]map[string]any{"llvm": {
			"rtti": true, "linker": "lld", "assertions": true, "targets": []string{"X86", "AArch64"},
			"projects": []string{}, "build_type": "RelWithDebInfo",
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
	// The settings passed in (build.yaml's) are left as they were.
	if base.Versions["pytorch"] != "1.13.1+dfsg" || base.Externals["pytorch"] != "/usr" || len(base.Options["llvm"]) != 1 {
		t.Errorf("ApplySets modified its input: %#v", base)
	}
	// What it produces is what planning accepts: resolving the options
	// against the recipe succeeds with the typed values.
	if _, err := set.Get("llvm").ResolveOptions(got.Options["llvm"]); err != nil {
		t.Errorf("resolved options refused: %v", err)
	}
}

func TestApplySetsErrors(t *testing.T) {
	set := builtinSet(t)
	for _, c := range []struct{ set, want string }{
		{"llvm=15.0.6", "--set llvm=15.0.6: want NAME.version=VERSION, NAME.options.OPTION=VALUE or NAME.external=PATH"},
		{"llvm.version", "--set llvm.version: want NAME.version=VERSION"},
		{"clang.version=15", `--set clang.version=15: no recipe is named "clang" (known: llvm, python-backend-utils, pytorch, runtime, tritonserver)`},
		{"llvm.version=15.0.9", `--set llvm.version=15.0.9: llvm (recipes/llvm.yaml) has no version "15.0.9"; it has 15.0.7 (url, default), 15.0.6 (apt)`},
		{"llvm.options.linkr=lld", `--set llvm.options.linkr=lld: llvm (recipes/llvm.yaml) declares no option "linkr" (it has: assertions, build_dylib, build_type, link_dylib, linker, projects, rtti, targets)`},
		{"llvm.options.assertions=maybe", `--set llvm.options.assertions=maybe: option assertions of llvm is a bool: want true or false (or on/off, yes/no, 1/0), got "maybe"`},
		{"llvm.options.build_type=Fast", `--set llvm.options.build_type=Fast: option build_type of llvm is an enum: want one of Release, RelWithDebInfo, MinSizeRel, Debug, got "Fast"`},
		{"llvm.options.targets=X86,,AArch64", `--set llvm.options.targets=X86,,AArch64: option targets of llvm is a list: want comma-separated items`},
		{"llvm.prefix=/x", `--set llvm.prefix=/x: unknown field "prefix"`},
		{"runtime.external=/usr", `--set runtime.external=/usr: runtime (recipes/runtime.yaml) has no probe`},
	} {
		_, err := ApplySets(Settings{}, set, []string{c.set}, "/")
		var se *SetError
		if !errors.As(err, &se) || se.Flag != c.set || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s...", c.set, err, c.want)
		}
	}
}
