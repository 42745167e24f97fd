package toolchain_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/tritonbuild/tritonbuild/toolchain"
)

// Example shows how a builder runs one CMake+Ninja node under the memory
// broker with OOM retries. (It is compiled, not run.)
func Example() {
	ctx := context.Background()
	srcDir, buildDir, statsDir := "/work/src/llvm", "/work/build/llvm", "/var/cache/tritonbuild/stats"
	declared := toolchain.Profile{CompileBytes: 1536 << 20, LinkBytes: 4 << 30} // from the recipe

	host, err := toolchain.Probe(ctx, toolchain.ProbeOptions{Dirs: []string{buildDir}})
	if err != nil {
		panic(err)
	}
	statsPath := toolchain.StatsFile(statsDir, "llvm", "15.0.7")
	stats, err := toolchain.LoadStats(statsPath, "llvm", "15.0.7")
	if err != nil {
		panic(err)
	}
	plan := toolchain.PlanJobs(host, toolchain.ResolveProfile(stats.Profile(), declared), toolchain.PlanOptions{})
	fmt.Println(plan.Reason, "/", plan.LinkReason)

	broker, err := toolchain.StartBroker(ctx, toolchain.BrokerOptions{
		Budget: plan.Budget, Stats: stats, StatsPath: statsPath, Declared: declared,
		TrimPrefixes: []string{srcDir, buildDir},
	})
	if err != nil {
		panic(err)
	}
	defer broker.Close() // saves the learned stats

	exe, _ := os.Executable()
	configure := append([]string{"-G", "Ninja", "-S", srcDir, "-B", buildDir},
		toolchain.Launcher{Exe: exe}.CMakeArgs()...)
	configure = append(configure, plan.CMakeJobDefines()...)
	if err := exec.CommandContext(ctx, "cmake", configure...).Run(); err != nil {
		panic(err)
	}

	// Ninja gets -j = CPUs; the broker decides how many actually run.
	policy := toolchain.RetryPolicy{Jobs: host.CPU.Usable, Budget: plan.Budget,
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }}
	_, err = policy.Run(ctx, func(ctx context.Context, a toolchain.Attempt) error {
		broker.SetBudget(a.Budget)
		mon := toolchain.NewOOMMonitor(host.Memory.Cgroup, broker)
		cmd := exec.CommandContext(ctx, "ninja", "-C", buildDir, fmt.Sprintf("-j%d", a.Jobs))
		cmd.Env = append(os.Environ(), broker.Env()...)
		out, err := cmd.CombinedOutput()
		return mon.Classify(err, out)
	})
	if err != nil {
		fmt.Println("build failed:", err)
	}
	c := broker.Counters()
	fmt.Printf("peak %d commands at once, %d OOM kills\n", c.PeakConcurrency, c.OOMKills)
}
