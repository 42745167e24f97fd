package fetch

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestLineProgress(t *testing.T) {
	var out bytes.Buffer
	p := NewLineProgress(&out, 5*time.Second).(*lineProgress)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	const MiB = 1 << 20
	p.Update("llvm.tar.xz", 0, 130*MiB)
	now = now.Add(2 * time.Second)
	p.Update("llvm.tar.xz", 20*MiB, 130*MiB) // within the interval: silent
	if out.Len() != 0 {
		t.Fatalf("printed before the interval: %q", out.String())
	}
	now = now.Add(3*time.Second + 300*time.Millisecond)
	p.Update("llvm.tar.xz", 40*MiB, 130*MiB)
	want := "fetching llvm.tar.xz: 40.0 MiB / 130 MiB (30%), 7.5 MiB/s\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	now = now.Add(5 * time.Second)
	p.Update("other", 5, -1)
	p.Update("llvm.tar.xz", 130*MiB, 130*MiB)
	p.Finish("llvm.tar.xz", nil)
	p.Finish("other", errors.New("boom"))
	got := out.String()
	for _, w := range []string{
		"fetching llvm.tar.xz: 130 MiB / 130 MiB (100%), 18.0 MiB/s\n",
		"fetched llvm.tar.xz: 130 MiB in 10.3s, 12.6 MiB/s\n",
		"fetching other failed: boom\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 136794284: "130 MiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBarProgress(t *testing.T) {
	var out bytes.Buffer
	p := NewBarProgress(&out)
	for i := int64(1); i <= 4; i++ {
		p.Update("x.tar", i<<20, 4<<20)
	}
	p.Finish("x.tar", nil)
	s := out.String()
	if !strings.Contains(s, "fetching x.tar") || !strings.Contains(s, "100%") || !strings.Contains(s, "MiB") {
		t.Fatalf("bar output %q", s)
	}
}

func TestNewProgressPicksLinesWhenNotATerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := NewProgress(f).(*lineProgress); !ok {
		t.Fatalf("NewProgress on a file gave %T", NewProgress(f))
	}
}
