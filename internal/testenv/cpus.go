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
	return perThread(t, pid, "status", func(data string) (string, bool) {
		for _, line := range strings.Split(data, "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				return strings.TrimSpace(v), true
			}
		}
		return "", false
	})
}

// ThreadMemoryPolicies maps each thread of process pid to its memory
// policy as numa_maps writes it ("default", "bind:0", ...): the policy of
// the thread's first mapping, which has none of its own unless a program
// set one with mbind.
func ThreadMemoryPolicies(t testing.TB, pid int) map[int]string {
	t.Helper()
	return perThread(t, pid, "numa_maps", func(data string) (string, bool) {
		fields := strings.Fields(data)
		if len(fields) < 2 {
			return "", false
		}
		return fields[1], true
	})
}

// perThread reads /proc/<pid>/task/<tid>/<file> of each thread of pid and
// maps the thread to what value finds in it; a thread that ended since the
// listing, or whose file value finds nothing in, is left out.
func perThread(t testing.TB, pid int, file string, value func(string) (string, bool)) map[int]string {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", file))
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
		if v, ok := value(string(data)); ok {
			out[tid] = v
		}
	}
	return out
}

// MemoryNode is the lowest NUMA node this process may allocate memory from
// (Mems_allowed_list), for a test that binds memory to it. A kernel built
// without NUMA support (no numa_maps) is a missing component: Unavailable.
func MemoryNode(t testing.TB) int {
	t.Helper()
	if _, err := os.Stat("/proc/self/numa_maps"); err != nil {
		Unavailable(t, "this kernel has no NUMA support (/proc/self/numa_maps: %v)", err)
	}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("reading this process's status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Mems_allowed_list:"); ok {
			first := strings.FieldsFunc(strings.TrimSpace(v), func(r rune) bool { return r == ',' || r == '-' })
			if len(first) > 0 {
				if n, err := strconv.Atoi(first[0]); err == nil {
					return n
				}
			}
			t.Fatalf("this process's Mems_allowed_list %q names no node", v)
		}
	}
	t.Fatal("this process's status has no Mems_allowed_list")
	return 0
}
