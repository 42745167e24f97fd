// Package machine reports what the benchmark machine is doing and what
// it is like, so that every recorded figure carries the load it was
// measured under and the price of a wake-up there.
package machine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// CPUTime is the CPU time the processes have used so far, summed over
// their threads from /proc/PID/task/*/schedstat (nanoseconds, unlike
// getrusage's children figures, which count only processes already
// reaped). A benchmark takes it before and after a measurement to report
// CPU per request, which other load on the machine disturbs much less
// than latency.
func CPUTime(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil {
			return 0, err
		}
		if len(tasks) == 0 {
			return 0, fmt.Errorf("process %d: no schedstat under /proc", pid)
		}
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // the thread ended between the glob and the read
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				return 0, fmt.Errorf("%s: empty", t)
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", t, err)
			}
			total += time.Duration(ns)
		}
	}
	return total, nil
}
