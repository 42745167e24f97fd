package backend

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HostPolicy is what one host policy (--host-policy=<policy>,<setting>=...,
// repeatable per policy) applies to the instances under it, as Triton
// applies it to the thread that creates and runs an instance. The zero
// value applies nothing.
type HostPolicy struct {
	// CPUs are the CPUs the instance's threads may run on (cpu-cores);
	// nil: any.
	CPUs []int
	// NUMANodes are the NUMA nodes the instance's threads allocate memory
	// from (numa-node; set_mempolicy's MPOL_BIND); nil: any.
	NUMANodes []int
}

// IsZero reports whether p applies nothing.
func (p HostPolicy) IsZero() bool { return len(p.CPUs) == 0 && len(p.NUMANodes) == 0 }

// MaxNUMANode bounds the node numbers a host policy may name: the
// kernel's largest MAX_NUMNODES (NODES_SHIFT 10).
const MaxNUMANode = 1023

// ParseNUMANode reads numa-node's value: one node number, as Triton takes
// it.
func ParseNUMANode(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxNUMANode {
		return 0, fmt.Errorf("'%s' is not a NUMA node number from 0 to %d", s, MaxNUMANode)
	}
	return n, nil
}

// BindMemory binds the memory the calling thread allocates from now on to
// nodes (set_mempolicy with MPOL_BIND, as Triton binds an instance's
// thread); the threads and processes it starts inherit the binding, a
// process across exec too. The caller holds its OS thread
// (runtime.LockOSThread) and either resets it with UnbindMemory or lets
// the thread end with its goroutine: the runtime must not get a bound
// thread back. The kernel refuses nodes that have no memory or that the
// process's cpuset excludes (EINVAL).
func BindMemory(nodes []int) error {
	var mask [(MaxNUMANode + 1) / 64]uint64
	for _, n := range nodes {
		if n < 0 || n > MaxNUMANode {
			return fmt.Errorf("NUMA node %d is out of range (0 to %d)", n, MaxNUMANode)
		}
		mask[n/64] |= 1 << (n % 64)
	}
	// maxnode counts the mask's bits plus one: the kernel reads maxnode-1.
	_, _, errno := unix.Syscall(unix.SYS_SET_MEMPOLICY, unix.MPOL_BIND, uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64+1))
	if errno != 0 {
		return fmt.Errorf("cannot bind memory to NUMA nodes %s: %w", FormatCPUList(nodes), errno)
	}
	return nil
}

// UnbindMemory puts the calling thread back on the default memory policy
// (allocate on the node it runs on).
func UnbindMemory() error {
	if _, _, errno := unix.Syscall(unix.SYS_SET_MEMPOLICY, unix.MPOL_DEFAULT, 0, 0); errno != 0 {
		return fmt.Errorf("cannot reset the memory policy: %w", errno)
	}
	return nil
}

// MaxCPU bounds the CPU numbers a host policy may name: the kernel's
// affinity masks as glibc's cpu_set_t holds them.
const MaxCPU = 1023

// ParseCPUList reads a CPU list as the kernel writes one ("0-3,8,10-11"):
// comma-separated CPU numbers and inclusive ranges. It returns the CPUs in
// ascending order, each once.
func ParseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty CPU list (want e.g. 0-3,6)")
	}
	seen := map[int]bool{}
	for _, item := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first > MaxCPU {
			return nil, fmt.Errorf("'%s' in %q is not a CPU number from 0 to %d", item, s, MaxCPU)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first || last > MaxCPU {
				return nil, fmt.Errorf("'%s' in %q is not a range of CPUs from low to high (0 to %d)", item, s, MaxCPU)
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			seen[cpu] = true
		}
	}
	cpus := make([]int, 0, len(seen))
	for cpu := range seen {
		cpus = append(cpus, cpu)
	}
	slices.Sort(cpus)
	return cpus, nil
}

// FormatCPUList writes cpus (or NUMA nodes) as comma-separated numbers, a
// list ParseCPUList reads back: for messages and the python stub's --cpus.
func FormatCPUList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// InstancePolicy is the host policy of instance idx of s: the zero policy
// when it has none.
func (s *ModelSpec) InstancePolicy(idx int) HostPolicy {
	if idx < 0 || idx >= len(s.InstancePolicies) {
		return HostPolicy{}
	}
	return s.InstancePolicies[idx]
}
