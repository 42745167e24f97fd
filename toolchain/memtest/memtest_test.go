package memtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"200M": 200 << 20, "1G": 1 << 30, "512k": 512 << 10, "4096": 4096} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "M", "-1M", "1.5G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestFakeCompilerAndProject(t *testing.T) {
	p, err := WriteProject(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(p.Dir, "Makefile"))
	if err != nil || !strings.Contains(string(mk), "OBJS = unit00.o unit01.o unit02.o") {
		t.Fatalf("Makefile: %v\n%s", err, mk)
	}
	out := filepath.Join(p.Dir, "unit00.o")
	if code := FakeCompiler([]string{"--mem=8M", "--hold=20ms", "-c", filepath.Join(p.Dir, "src/unit00.c"), "-o", out}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	data, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(data), "8388608 bytes touched") {
		t.Errorf("output %q, %v", data, err)
	}
	if code := FakeCompiler([]string{"-c", "missing.c"}); code != 1 {
		t.Errorf("missing input: exit %d, want 1", code)
	}
	if code := FakeCompiler([]string{"--mem=lots"}); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	if err := p.Clean(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("Clean left %s", out)
	}
}
