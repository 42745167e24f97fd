package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/fetch"
)

func TestTransferLines(t *testing.T) {
	var out bytes.Buffer
	p := newTransferLines(&out, 5*time.Second)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	const MiB = 1 << 20
	p.update("llvm.tar.xz", 0, 130*MiB)
	now = now.Add(2 * time.Second)
	p.update("llvm.tar.xz", 20*MiB, 130*MiB) // within the interval: silent
	if out.Len() != 0 {
		t.Fatalf("printed before the interval: %q", out.String())
	}
	now = now.Add(3*time.Second + 300*time.Millisecond)
	p.update("llvm.tar.xz", 40*MiB, 130*MiB)
	want := "fetching llvm.tar.xz: 40.0 MiB / 130 MiB (30%), 7.5 MiB/s\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	now = now.Add(5 * time.Second)
	p.update("other", 5, -1)
	p.update("llvm.tar.xz", 130*MiB, 130*MiB)
	p.finish("llvm.tar.xz", nil)
	p.finish("other", errors.New("boom"))
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

func TestTransferBars(t *testing.T) {
	var out bytes.Buffer
	p := newTransferBars(&out)
	for i := int64(1); i <= 4; i++ {
		p.update("x.tar", i<<20, 4<<20)
	}
	p.finish("x.tar", nil)
	s := out.String()
	if !strings.Contains(s, "fetching x.tar") || !strings.Contains(s, "100%") || !strings.Contains(s, "MiB") {
		t.Fatalf("bar output %q", s)
	}
}

func TestStepLines(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	p := &stepLines{w: &out, every: 15 * time.Second, now: func() time.Time { return now }}
	p.start("llvm build")
	now = now.Add(10 * time.Second)
	p.update(100, 4877)
	if out.Len() != 0 {
		t.Fatalf("printed before the interval: %q", out.String())
	}
	now = now.Add(10 * time.Second)
	p.update(200, 1000)
	if want := "    llvm build: 200/1000 (20%) after 20s, about 1m20s left\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// Updates sent on the channels reach the drawing; on a file (not a
// terminal) it is lines, and stop returns once everything is drawn.
func TestProgressDrawsLinesOnAFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := startProgress(f)
	p.fetch <- fetch.Update{Name: "a.tar", Complete: 10, Total: 10}
	p.steps <- builder.StepUpdate{Label: "x build", Total: -1}
	p.steps <- builder.StepUpdate{Label: "x build", Complete: 1, Total: 2}
	p.steps <- builder.StepUpdate{Label: "x build", Done: true}
	p.fetch <- fetch.Update{Name: "a.tar", Done: true}
	p.stop()
	data, _ := os.ReadFile(f.Name())
	if !strings.HasPrefix(string(data), "fetched a.tar: 10 B in ") || strings.Contains(string(data), "\r") {
		t.Errorf("drawn on a file: %q", data)
	}
	// A writer that is not a file gets nothing: no channels to send on.
	var buf bytes.Buffer
	if q := startProgress(&buf); q.fetch != nil || q.steps != nil {
		t.Error("progress drawn on a buffer")
	}
}

// Defect 10: a file reported only once complete (an apt download) gets no
// invented "0 B/s".
func TestTransferLinesNoRateWithoutTransfer(t *testing.T) {
	var out bytes.Buffer
	p := newTransferLines(&out, time.Second)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	p.update("x.orig.tar.xz", 1500000, 1500000)
	p.finish("x.orig.tar.xz", nil)
	if got := out.String(); got != "fetched x.orig.tar.xz: 1.4 MiB in 0s\n" {
		t.Errorf("got %q", got)
	}
}

// Defect 10: a step without counts (make, a script) shows it runs.
func TestStepLinesTick(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	p := &stepLines{w: &out, every: 15 * time.Second, now: func() time.Time { return now }}
	p.start("xz-utils build")
	now = now.Add(20 * time.Second)
	p.tick(812)
	if want := "    xz-utils build: running for 20s, 812 lines of output\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
