package toolchain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassifyCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want CommandID
	}{
		{[]string{"/usr/bin/c++", "-DX=1", "-I", "inc.cpp", "-O2", "-o", "lib/CMakeFiles/a.dir/Foo.cpp.o", "-c", "/src/llvm/lib/Foo.cpp"},
			CommandID{KindCompile, "/src/llvm/lib/Foo.cpp"}},
		{[]string{"cc", "-MD", "-MF", "dep.c", "-c", "x.c", "-ox.o"}, CommandID{KindCompile, "x.c"}},
		{[]string{"cc", "-c", "-x", "c", "-", "-o", "stdin.o"}, CommandID{KindCompile, "stdin.o"}},
		{[]string{"c++", "-O2", "a.o", "b.o", "-o", "bin/llc", "-lpthread"}, CommandID{KindLink, "bin/llc"}},
		{[]string{"cc", "--version"}, CommandID{Kind: KindOther}},
		{nil, CommandID{Kind: KindOther}},
	} {
		if got := ClassifyCommand(tc.args); got != tc.want {
			t.Errorf("ClassifyCommand(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

func TestStatsP95AndPersistence(t *testing.T) {
	s := NewStats("llvm", "15.0.7")
	id := CommandID{KindCompile, "lib/Foo.cpp"}
	for _, v := range []int64{100, 900, 300, 200, 250, 260, 270, 280, 290, 310} {
		s.Record(id, Sample{PeakRSS: v, WallMS: 5}, false)
	}
	// Only the last 8 runs are kept: 300..310 -> sorted 200 250 260 270 280 290 300 310.
	v, n := s.CommandP95(id)
	if n != 8 || v != 310 {
		t.Errorf("CommandP95 = %d over %d, want 310 over 8", v, n)
	}
	for i, v := range []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200} {
		s.Record(CommandID{KindLink, filepath.Join("bin", string(rune('a'+i)))}, Sample{PeakRSS: v}, false)
	}
	if got := s.KindP95(KindLink); got != 190 {
		t.Errorf("KindP95(link) over 10..200 = %d, want 190 (nearest rank 19 of 20)", got)
	}
	s.Record(id, Sample{PeakRSS: 1}, true)
	if s.OOMKills() != 1 {
		t.Errorf("OOM kill not counted")
	}
	if _, n := s.CommandP95(id); n != 8 {
		t.Errorf("an OOM-killed run's peak was recorded")
	}
	if p := s.Profile(); p.CompileBytes != 310 || p.LinkBytes != 190 {
		t.Errorf("Profile = %+v", p)
	}

	path := filepath.Join(t.TempDir(), "stats.json")
	if err := s.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadStats(path, "llvm", "15.0.7")
	if err != nil {
		t.Fatal(err)
	}
	if v, n := back.CommandP95(id); v != 310 || n != 8 || back.KindP95(KindLink) != 190 || back.OOMKills() != 1 {
		t.Errorf("reloaded stats differ: p95 %d/%d", v, n)
	}
	other, err := LoadStats(path, "llvm", "16.0.0")
	if err != nil || other.Len() != 0 {
		t.Errorf("another version's stats were used: %v, %d commands", err, other.Len())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := os.WriteFile(path, []byte(`{"format":1,"commands":{`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadStats(path, "llvm", "15.0.7"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("corrupt stats: err = %v, want one naming the file", err)
	}
	if s, err := LoadStats(filepath.Join(t.TempDir(), "none.json"), "x", "1"); err != nil || s.Len() != 0 {
		t.Errorf("missing file: %v", err)
	}
}

func TestStatsFile(t *testing.T) {
	if got := StatsFile("/var/stats", "llvm/../x", "15.0.7+b1"); got != "/var/stats/llvm-..-x@15.0.7+b1.json" {
		t.Errorf("StatsFile = %q", got)
	}
}
