package atomicfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

func TestWriteFileReplacesWithPerm(t *testing.T) {
	old := syscall.Umask(0o077) // the umask must not change the result
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old content, longer than the new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "new" {
		t.Fatalf("content %q, %v", got, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestWriteFileFailureLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename makes the write fail late.
	sub := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(sub, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := atomicfile.WriteFile(sub, []byte("new"), 0o644)
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("got %v, want an error naming %s", err, sub)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("want only f and d left, got %v", entries)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "missing", "f"), nil, 0o644); err == nil {
		t.Error("want an error for a missing directory")
	}
}

func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("a longer previous content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.CopyFile(src, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if string(got) != "payload" {
		t.Errorf("copied %q", got)
	}
	if err := atomicfile.CopyFile(filepath.Join(dir, "missing"), dst, 0o644); err == nil {
		t.Error("want an error for a missing source")
	}
}

// A streamed file is invisible under its name until Commit, readable at
// its temporary name before, and Abort leaves nothing behind.
func TestCreateCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big.tar.gz")
	f, err := atomicfile.Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if _, err := f.Write([]byte("part one, ")); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("part two"))
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("target visible before Commit: %v", err)
	}
	if got, _ := os.ReadFile(f.TempName()); string(got) != "part one, part two" {
		t.Errorf("temporary content %q", got)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // after Commit: nothing
	if got, _ := os.ReadFile(p); string(got) != "part one, part two" {
		t.Errorf("committed content %q", got)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}

	g, err := atomicfile.Create(filepath.Join(dir, "other"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("never seen"))
	g.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "big.tar.gz" {
		t.Errorf("after Abort the directory holds %v", entries)
	}
}
