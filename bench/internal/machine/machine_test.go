package machine

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestLoadAvg(t *testing.T) {
	got := LoadAvg()
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if got != "unknown" {
			t.Fatalf("no /proc/loadavg but LoadAvg() = %q", got)
		}
		return
	}
	if f := strings.Fields(got); len(f) != 3 {
		t.Fatalf("LoadAvg() = %q, want three figures", got)
	}
}

func TestCPUTimeGrowsWithWork(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc here")
	}
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the clock of this process moves by 20 ms of CPU: the
	// figure must follow work done, whatever else runs on the machine.
	x := 0
	for {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		now, err := CPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 20*time.Millisecond {
			break
		}
	}
	_ = x
	if _, err := CPUTime(1 << 30); err == nil {
		t.Fatal("CPUTime of a process that does not exist did not fail")
	}
}
