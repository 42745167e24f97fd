package fetch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func makeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n", 0o644)
	writeFile(t, filepath.Join(dir, "a", "b.c"), "int b;\n", 0o644)
	writeFile(t, filepath.Join(dir, "bin", "run.sh"), "#!/bin/sh\n", 0o755)
	writeFile(t, filepath.Join(dir, "build", "out.o"), "junk", 0o644)
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	if err := os.Symlink("a/b.c", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustHash(t *testing.T, dir string, ignore func(string) bool) string {
	t.Helper()
	h, err := HashDir(dir, ignore)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidSHA256(h) {
		t.Fatalf("HashDir returned %q", h)
	}
	return h
}

func TestHashDir(t *testing.T) {
	base := mustHash(t, makeTree(t), nil)
	if again := mustHash(t, makeTree(t), nil); again != base {
		t.Fatal("two identical trees hash differently")
	}
	for _, tc := range []struct {
		name   string
		change func(dir string) error
		same   bool
	}{
		{"mtime", func(d string) error {
			old := time.Unix(1e9, 0)
			return os.Chtimes(filepath.Join(d, "a.txt"), old, old)
		}, true},
		{"non-exec mode bits", func(d string) error { return os.Chmod(filepath.Join(d, "a.txt"), 0o600) }, true},
		{"content", func(d string) error { return os.WriteFile(filepath.Join(d, "a.txt"), []byte("alphA\n"), 0o644) }, false},
		{"exec bit", func(d string) error { return os.Chmod(filepath.Join(d, "bin", "run.sh"), 0o644) }, false},
		{"symlink target", func(d string) error {
			os.Remove(filepath.Join(d, "link"))
			return os.Symlink("a.txt", filepath.Join(d, "link"))
		}, false},
		{"rename", func(d string) error { return os.Rename(filepath.Join(d, "a.txt"), filepath.Join(d, "a2.txt")) }, false},
		{"empty dir removed", func(d string) error { return os.Remove(filepath.Join(d, "empty")) }, false},
		{"new empty file", func(d string) error { return os.WriteFile(filepath.Join(d, "empty", "x"), nil, 0o644) }, false},
		{"symlink replaced by a file with the target as content", func(d string) error {
			os.Remove(filepath.Join(d, "link"))
			return os.WriteFile(filepath.Join(d, "link"), []byte("a/b.c"), 0o644)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := makeTree(t)
			if err := tc.change(d); err != nil {
				t.Fatal(err)
			}
			if got := mustHash(t, d, nil); (got == base) != tc.same {
				t.Fatalf("hash changed: %v, want changed: %v", got != base, !tc.same)
			}
		})
	}
}

func TestHashDirIgnore(t *testing.T) {
	ignoreBuild := func(rel string) bool { return rel == "build" || strings.HasSuffix(rel, ".o") }
	d1 := makeTree(t)
	d2 := makeTree(t)
	writeFile(t, filepath.Join(d2, "build", "more.o"), "other junk", 0o644)
	writeFile(t, filepath.Join(d2, "a", "x.o"), "obj", 0o644)
	if mustHash(t, d1, ignoreBuild) != mustHash(t, d2, ignoreBuild) {
		t.Fatal("ignored paths changed the digest")
	}
	if mustHash(t, d1, nil) == mustHash(t, d2, nil) {
		t.Fatal("without ignore the extra files must change the digest")
	}
	var seen []string
	mustHash(t, d1, func(rel string) bool { seen = append(seen, rel); return false })
	want := "a a/b.c a.txt bin bin/run.sh build build/out.o empty link"
	if strings.Join(seen, " ") != want {
		t.Fatalf("ignore saw %q, want %q", strings.Join(seen, " "), want)
	}
}

func TestHashDirErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	writeFile(t, f, "x", 0o644)
	if _, err := HashDir(f, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file: %v", err)
	}
	if _, err := HashDir(filepath.Join(t.TempDir(), "none"), nil); err == nil {
		t.Error("missing directory accepted")
	}
}
