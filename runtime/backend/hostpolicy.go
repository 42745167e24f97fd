package backend

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

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

// FormatCPUList writes cpus as comma-separated numbers, a list
// ParseCPUList reads back: for messages and the python stub's --cpus.
func FormatCPUList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}
