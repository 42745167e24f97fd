package images

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

var testEpoch = time.Unix(1700000000, 0).UTC()

// writeFiles creates files (relative path -> content) under dir; content
// starting with "#!" is made executable.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if len(content) > 2 && content[:2] == "#!" {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptTree is a tree without ELF objects (so the base layer holds only
// the users and /tmp); with entrypoint it carries bin/tritonserver as a
// script. extra varies the content of its library file.
func scriptTree(t testing.TB, name string, entrypoint bool, extra string) Tree {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lib/lib" + name + ".txt":       "library of " + name + extra + "\n",
		"share/doc/" + name + "/README": "docs of " + name + "\n",
	}
	if entrypoint {
		files["bin/tritonserver"] = "#!/bin/sh\necho serving\n"
	}
	writeFiles(t, dir, files)
	return Tree{Name: name, Version: "1.0", Hash: "h-" + name, Dir: dir,
		SourceURL: "https://example.org/" + name + "-1.0.tar.gz",
		SHA256:    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		License:   "Apache-2.0"}
}

// scriptTrees makes one scriptTree per name; the first holds the entrypoint.
func scriptTrees(t testing.TB, names ...string) []Tree {
	t.Helper()
	var trees []Tree
	for i, n := range names {
		trees = append(trees, scriptTree(t, n, i == 0, ""))
	}
	return trees
}

// greetTree compiles a tiny C program and a shared library into a tree:
// bin/hello needs lib/libgreet.so.1 through DT_RUNPATH $ORIGIN/../lib, and
// libgreet needs the host's libm and libc. It prints
// "hello from tritonbuild 3.0".
func greetTree(t testing.TB) string {
	t.Helper()
	testenv.NeedTools(t, "cc")
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"greet.c": "#include <math.h>\n#include <stdio.h>\nvoid greet(double x) { printf(\"hello from tritonbuild %.1f\\n\", sqrt(x)); }\n",
		"main.c":  "void greet(double);\nint main(int argc, char **argv) { (void)argv; greet(argc > 1 ? 16.0 : 9.0); return 0; }\n",
	})
	dir := t.TempDir()
	for _, d := range []string{"bin", "lib"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "cc", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	run("-shared", "-fPIC", "-o", filepath.Join(dir, "lib", "libgreet.so.1"), "-Wl,-soname,libgreet.so.1", filepath.Join(src, "greet.c"), "-lm")
	if err := os.Symlink("libgreet.so.1", filepath.Join(dir, "lib", "libgreet.so")); err != nil {
		t.Fatal(err)
	}
	run("-o", filepath.Join(dir, "bin", "hello"), filepath.Join(src, "main.c"),
		"-L"+filepath.Join(dir, "lib"), "-lgreet", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags")
	return dir
}
