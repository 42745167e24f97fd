package toolchain

import (
	"fmt"
)

// Default per-job figures used when neither the learned stats nor the
// recipe declare any: a large C++ translation unit with optimisation, and a
// link of a big binary with debug info off.
const (
	DefaultCompileBytes = 1 << 30
	DefaultLinkBytes    = 2 << 30
)

// Profile is the expected peak memory of one job of each kind.
type Profile struct {
	CompileBytes int64 `json:"compile_bytes,omitempty"`
	LinkBytes    int64 `json:"link_bytes,omitempty"`
}

// ResolveProfile picks each figure from learned stats, then from the
// recipe's declaration, then from the defaults.
func ResolveProfile(learned, declared Profile) Profile {
	pick := func(vals ...int64) int64 {
		for _, v := range vals {
			if v > 0 {
				return v
			}
		}
		return 0
	}
	return Profile{
		CompileBytes: pick(learned.CompileBytes, declared.CompileBytes, DefaultCompileBytes),
		LinkBytes:    pick(learned.LinkBytes, declared.LinkBytes, DefaultLinkBytes),
	}
}

// DefaultReserve is the memory kept free for everything that is not a
// compile or link: the build tool, launchers, the page cache the compilers
// read through, the rest of the machine. It is 1/16 of usable memory, at
// least 256 MiB and at most 2 GiB.
func DefaultReserve(usable int64) int64 {
	return min(max(usable/16, 256<<20), 2<<30)
}

// PlanOptions adjusts PlanJobs.
type PlanOptions struct {
	// Jobs overrides the compile job count (the user's --jobs); 0 = plan.
	Jobs int
	// LinkJobs overrides the link job count; 0 = plan.
	LinkJobs int
	// Reserve is memory kept out of the budget; 0 = DefaultReserve, <0 = none.
	Reserve int64
}

// JobPlan is how many jobs a build runs and why.
type JobPlan struct {
	Jobs     int   `json:"jobs"`
	LinkJobs int   `json:"link_jobs"`
	CPUs     int   `json:"cpus"`
	Memory   int64 `json:"memory"`
	Reserve  int64 `json:"reserve"`
	// Budget is Memory minus Reserve: what the broker may grant at once.
	Budget  int64   `json:"budget"`
	Profile Profile `json:"profile"`
	// Reason and LinkReason explain the counts for logs and the plan output,
	// e.g. "jobs 2 (2 CPUs; 21.3 GiB available / 1.5 GiB per compile = 14)".
	Reason     string `json:"reason"`
	LinkReason string `json:"link_reason"`
}

// PlanJobs computes job counts from the probed host and a resolved profile:
// as many compile jobs as CPUs, but no more than fit into the memory budget,
// and as many link jobs as fit (never more than compile jobs). It is pure:
// the same inputs give the same plan.
func PlanJobs(h *Host, p Profile, o PlanOptions) JobPlan {
	p = ResolveProfile(Profile{}, p)
	cpus := max(h.CPU.Usable, 1)
	mem := max(h.Memory.Usable, 0)
	reserve := o.Reserve
	switch {
	case reserve == 0:
		reserve = DefaultReserve(mem)
	case reserve < 0:
		reserve = 0
	}
	budget := max(mem-reserve, 0)
	if budget <= 0 {
		// Less memory than the reserve: keeping it would leave nothing to
		// run even one job with. Run one at a time in half of what there is.
		budget = max(mem/2, 1<<20)
		reserve = mem - budget
	}
	jp := JobPlan{CPUs: cpus, Memory: mem, Reserve: reserve, Budget: budget, Profile: p}

	memJobs := max(int(budget/p.CompileBytes), 1)
	memText := fmt.Sprintf("%s available - %s reserve / %s per compile = %d",
		FormatBytes(mem), FormatBytes(reserve), FormatBytes(p.CompileBytes), memJobs)
	switch {
	case o.Jobs > 0:
		jp.Jobs = o.Jobs
		jp.Reason = fmt.Sprintf("jobs %d (set explicitly; planned would be %d: %d CPUs; %s)", o.Jobs, min(cpus, memJobs), cpus, memText)
	case memJobs < cpus:
		jp.Jobs = memJobs
		jp.Reason = fmt.Sprintf("jobs %d (memory-bound: %d CPUs; %s)", memJobs, cpus, memText)
	default:
		jp.Jobs = cpus
		jp.Reason = fmt.Sprintf("jobs %d (%d CPUs; %s)", cpus, cpus, memText)
	}

	linkMem := max(int(budget/p.LinkBytes), 1)
	linkText := fmt.Sprintf("%s / %s per link = %d", FormatBytes(budget), FormatBytes(p.LinkBytes), linkMem)
	switch {
	case o.LinkJobs > 0:
		jp.LinkJobs = o.LinkJobs
		jp.LinkReason = fmt.Sprintf("link jobs %d (set explicitly; %s)", o.LinkJobs, linkText)
	case linkMem < jp.Jobs:
		jp.LinkJobs = linkMem
		jp.LinkReason = fmt.Sprintf("link jobs %d (%s)", linkMem, linkText)
	default:
		jp.LinkJobs = jp.Jobs
		jp.LinkReason = fmt.Sprintf("link jobs %d (= compile jobs; %s)", jp.Jobs, linkText)
	}
	return jp
}

// CMakeJobDefines returns the LLVM job-pool defines for a plan. LLVM turns
// them into Ninja pools, which bound links even when the broker is not used.
func (jp JobPlan) CMakeJobDefines() []string {
	return []string{
		fmt.Sprintf("-DLLVM_PARALLEL_COMPILE_JOBS=%d", jp.Jobs),
		fmt.Sprintf("-DLLVM_PARALLEL_LINK_JOBS=%d", jp.LinkJobs),
	}
}
