package python

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogLimitDropsAndReports: past its byte budget a stub's output is
// dropped, the next line let through (once the bucket refills) first says
// how many lines and bytes were dropped, and the failure tail still holds
// the dropped lines.
func TestLogLimitDropsAndReports(t *testing.T) {
	logs := &logBuffer{}
	now := time.Unix(1000, 0)
	lim := newLogLimit(100)
	lim.now = func() time.Time { return now }
	l := &lineLogger{log: slog.New(slog.NewTextHandler(logs, nil)), limit: lim}
	for i := range 30 {
		fmt.Fprintf(l, "line %02d\n", i) // 7 bytes each: 14 fit in 100
	}
	got := strings.Count(logs.String(), "msg=\"line ")
	if got != 14 {
		t.Errorf("%d lines logged within the burst, want 14:\n%s", got, logs)
	}
	if !strings.Contains(l.lastLines(), "line 29") {
		t.Errorf("tail lost the dropped lines: %q", l.lastLines())
	}
	now = now.Add(time.Second)
	fmt.Fprintf(l, "after\n")
	out := logs.String()
	if !strings.Contains(out, "dropped over the log bound") || !strings.Contains(out, "lines=16 bytes=112") ||
		!strings.Contains(out, "stub-log-bytes-per-sec=100") || !strings.Contains(out, "msg=after") {
		t.Errorf("no report of the dropped lines before the next one:\n%s", out)
	}
	// Dropped output at the end is reported by flush.
	for range 20 {
		fmt.Fprintf(l, "more 00\n")
	}
	l.flush()
	if n := strings.Count(logs.String(), "dropped over the log bound"); n != 2 {
		t.Errorf("%d drop reports, want 2:\n%s", n, logs)
	}
	if newLogLimit(0) != nil {
		t.Error("rate 0 should turn the bound off")
	}
}

// TestStubLogBounded: a model printing 2 MB at initialize reaches the log
// bounded by stub-log-bytes-per-sec, with a warning counting the rest;
// a bad setting is refused.
func TestStubLogBounded(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.BackendConfig[KeyLogBytesPerSec] = "2000"
	writeFile(t, spec.VersionDir+"/model.py", `import sys
class TritonPythonModel:
    def initialize(self, args):
        for i in range(20000):
            print("chatter %05d %s" % (i, "x" * 80))
        sys.stdout.flush()
    def execute(self, requests):
        return []
`)
	// Closed at once: what was dropped is reported by the time the stub's
	// output ends at the latest.
	if err := load(t, b, spec, 0).Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "dropped over the log bound") }, "the drop report")
	// The burst (2000 bytes, 22 lines of 94) plus 2000 bytes per second
	// of the time initialize took; far from 20000.
	if n := strings.Count(logs.String(), "chatter "); n == 0 || n > 400 {
		t.Errorf("%d chatter lines logged, want a few dozen", n)
	}

	if err := loadErr(t, b, nil, map[string]string{KeyLogBytesPerSec: "-1"}); err == nil || !strings.Contains(err.Error(), "stub-log-bytes-per-sec") {
		t.Errorf("negative bound: %v", err)
	}
}
