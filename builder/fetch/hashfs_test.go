package fetch

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// A tree held in memory (as an embed.FS is) hashes like the same tree on
// disk, ignore function included; an exec bit on disk tells them apart.
func TestHashFSMatchesHashDir(t *testing.T) {
	mem := fstest.MapFS{
		"a.txt":       {Data: []byte("alpha\n")},
		"a/b.c":       {Data: []byte("int b;\n")},
		"a/skip/x.o":  {Data: []byte("junk")},
		"bin/tool.sh": {Data: []byte("#!/bin/sh\n")},
	}
	dir := t.TempDir()
	for name, f := range mem {
		writeFile(t, filepath.Join(dir, name), string(f.Data), 0o644)
	}
	ignore := func(rel string) bool { return rel == "a/skip" }
	got, err := HashFS(mem, ignore)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustHash(t, dir, ignore); got != want {
		t.Fatalf("HashFS %s, HashDir %s", got, want)
	}
	if err := os.Chmod(filepath.Join(dir, "bin/tool.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if mustHash(t, dir, ignore) == got {
		t.Fatal("the exec bit did not count")
	}
}
