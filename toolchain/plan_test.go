package toolchain

import (
	"context"
	"strings"
	"testing"
)

func host(cpus int, mem int64) *Host {
	return &Host{CPU: CPUInfo{Usable: cpus}, Memory: MemoryInfo{Usable: mem}}
}

func TestPlanJobs(t *testing.T) {
	for _, tc := range []struct {
		name           string
		h              *Host
		p              Profile
		o              PlanOptions
		jobs, link     int
		reasonContains string
	}{
		{"cpu-bound", host(2, 23*gib), Profile{CompileBytes: 3 * gib / 2}, PlanOptions{}, 2, 2,
			"jobs 2 (2 CPUs; 23.0 GiB available - 1.4 GiB reserve / 1.5 GiB per compile = 14)"},
		{"memory-bound", host(16, 8*gib), Profile{CompileBytes: 2 * gib, LinkBytes: 6 * gib}, PlanOptions{}, 3, 1,
			"jobs 3 (memory-bound: 16 CPUs"},
		{"defaults", host(4, 4*gib), Profile{}, PlanOptions{Reserve: -1}, 4, 2, "/ 1.0 GiB per compile = 4"},
		{"too little memory still runs one", host(8, 100*mib), Profile{}, PlanOptions{}, 1, 1, "= 1"},
		{"override", host(2, 23*gib), Profile{}, PlanOptions{Jobs: 8, LinkJobs: 1}, 8, 1, "jobs 8 (set explicitly; planned would be 2"},
	} {
		jp := PlanJobs(tc.h, tc.p, tc.o)
		if jp.Jobs != tc.jobs || jp.LinkJobs != tc.link || !strings.Contains(jp.Reason, tc.reasonContains) {
			t.Errorf("%s: jobs %d link %d reason %q; want %d, %d, containing %q", tc.name, jp.Jobs, jp.LinkJobs, jp.Reason, tc.jobs, tc.link, tc.reasonContains)
		}
		if jp.Budget != jp.Memory-jp.Reserve && jp.Memory > jp.Reserve {
			t.Errorf("%s: budget %d != memory %d - reserve %d", tc.name, jp.Budget, jp.Memory, jp.Reserve)
		}
	}
	d := PlanJobs(host(2, 23*gib), Profile{}, PlanOptions{}).CMakeJobDefines()
	if d[0] != "-DLLVM_PARALLEL_COMPILE_JOBS=2" || d[1] != "-DLLVM_PARALLEL_LINK_JOBS=2" {
		t.Errorf("CMakeJobDefines = %q", d)
	}
}

func TestResolveProfile(t *testing.T) {
	got := ResolveProfile(Profile{CompileBytes: 5}, Profile{CompileBytes: 7, LinkBytes: 9})
	if got != (Profile{5, 9}) {
		t.Errorf("learned+declared = %+v", got)
	}
	if got := ResolveProfile(Profile{}, Profile{}); got != (Profile{DefaultCompileBytes, DefaultLinkBytes}) {
		t.Errorf("defaults = %+v", got)
	}
}

// Defect 10: -j 2 under a memory limit below the reserve planned a budget
// of 0, and the broker refused to start ("budget 0 is not positive").
func TestPlanJobsTightMemoryKeepsAPositiveBudget(t *testing.T) {
	jp := PlanJobs(host(2, 600*mib), Profile{}, PlanOptions{Jobs: 2, Reserve: int64(gib)})
	if jp.Budget <= 0 || jp.Budget > 600*mib {
		t.Fatalf("budget %d with 600 MiB usable and a 1 GiB reserve", jp.Budget)
	}
	b, err := StartBroker(context.Background(), BrokerOptions{Budget: jp.Budget})
	if err != nil {
		t.Fatalf("the broker refuses the planned budget: %v", err)
	}
	b.Close()
}
