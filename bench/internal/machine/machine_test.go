package machine

import (
	"os"
	"strings"
	"testing"
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
