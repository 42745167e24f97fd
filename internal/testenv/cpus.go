package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// maxCPU is the last CPU an affinity mask holds (glibc's cpu_set_t, as
// backend.MaxCPU; testenv imports nothing of the server).
const maxCPU = 1023

// AllowedCPUs is the CPUs the calling thread may run on, ascending.
func AllowedCPUs(t testing.TB) []int {
	t.Helper()
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatalf("reading this thread's CPUs: %v", err)
	}
	var allowed []int
	for cpu := range maxCPU + 1 {
		if mine.IsSet(cpu) {
			allowed = append(allowed, cpu)
		}
	}
	return allowed
}

// ConfinableCPU is the highest CPU this process may run on, for a test
// that confines something to it and checks that it kept to it. Such a
// check means nothing where the process may run on one CPU only, so the
// test is skipped there (a plain skip: a machine of one CPU lacks no
// component).
func ConfinableCPU(t testing.TB) int {
	t.Helper()
	allowed := AllowedCPUs(t)
	if len(allowed) < 2 {
		t.Skipf("this process may run on %d CPU: confining to fewer needs two", len(allowed))
	}
	return allowed[len(allowed)-1]
}

// ThreadCPUs maps each thread of process pid to the CPU list it may run
// on, as the kernel writes it (Cpus_allowed_list, e.g. "0-1").
func ThreadCPUs(t testing.TB, pid int) map[int]string {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("listing the threads of process %d: %v", pid, err)
	}
	out := map[int]string{}
	for _, f := range tasks {
		tid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended since the listing
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				out[tid] = strings.TrimSpace(v)
			}
		}
	}
	return out
}
