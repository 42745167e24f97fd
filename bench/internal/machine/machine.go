// Package machine reports what the benchmark machine is doing, so that
// every recorded figure carries the load it was measured under.
package machine

import (
	"os"
	"strings"
)

// LoadAvg is /proc/loadavg's three load averages ("1 5 15" minutes), or
// "unknown" where the file cannot be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
