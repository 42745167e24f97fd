package builder

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

// assignJobs fills each build node's starting parallelism from the host
// probe and the node's memory profile (learned figures first, then the
// recipe's declaration, then defaults). jobs > 0 overrides the count.
func assignJobs(plan *Plan, st *store.Store, host *toolchain.Host, jobs int, reserve recipe.ByteSize) {
	for _, n := range plan.Nodes {
		if n.Status == StatusExternal {
			continue
		}
		prof := nodeProfile(st, n)
		jp := toolchain.PlanJobs(host, prof, toolchain.PlanOptions{Jobs: jobs, Reserve: int64(reserve)})
		n.Jobs = &JobPlan{Compile: jp.Jobs, Link: jp.LinkJobs, Why: jp.Reason + "; " + jp.LinkReason, budget: jp.Budget}
	}
}

// MemoryProfile is the memory per compile and link job the plan uses for
// n: learned figures first, then the recipe's declaration, then defaults.
func MemoryProfile(st *store.Store, n *Node) toolchain.Profile { return nodeProfile(st, n) }

func nodeProfile(st *store.Store, n *Node) toolchain.Profile {
	declared := toolchain.Profile{CompileBytes: int64(n.Recipe.Memory.Compile), LinkBytes: int64(n.Recipe.Memory.Link)}
	var learned toolchain.Profile
	if st != nil {
		if stats, err := toolchain.LoadStats(st.StatsFile(n.Key()), n.Name, n.Version); err == nil {
			learned = stats.Profile()
		}
	}
	return toolchain.ResolveProfile(learned, declared)
}

// memoryLauncher routes a node's compile and link commands through
// `tritonbuild launch`, which asks an in-process broker for memory before
// each command runs; it also turns OOM kills into retries with fewer jobs.
type memoryLauncher struct {
	// Exe is the tritonbuild executable the build tools call back.
	Exe  string
	Host *toolchain.Host
	// Logf receives broker notes.
	Logf func(format string, args ...any)
}

// Prepare starts the broker for one node's build.
func (m *memoryLauncher) Prepare(ctx context.Context, n *Node, jobs JobPlan, statsPath, workDir string) (Launch, error) {
	st, err := toolchain.LoadStats(statsPath, n.Name, n.Version)
	if err != nil {
		st = toolchain.NewStats(n.Name, n.Version)
	}
	budget := jobs.budget
	if budget <= 0 {
		jp := toolchain.PlanJobs(m.Host, nodeProfileFromStats(st, n), toolchain.PlanOptions{})
		budget = jp.Budget
	}
	b, err := toolchain.StartBroker(ctx, toolchain.BrokerOptions{
		Budget:    budget,
		Stats:     st,
		StatsPath: statsPath,
		Declared:  toolchain.Profile{CompileBytes: int64(n.Recipe.Memory.Compile), LinkBytes: int64(n.Recipe.Memory.Link)},
		Logf:      m.Logf,
		// Key per-file history by paths relative to the work dir, so it
		// carries over to the next build of this recipe version.
		TrimPrefixes: []string{filepath.Join(workDir, "src"), filepath.Join(workDir, "build"), workDir},
	})
	if err != nil {
		return nil, err
	}
	var cg *toolchain.Cgroup
	if m.Host != nil {
		cg = m.Host.Memory.Cgroup
	}
	policy := toolchain.RetryPolicy{Jobs: jobs.Compile, Budget: budget}
	// The monitor must exist before the first command runs so that a rise
	// of the cgroup's oom_kill counter during the step is seen.
	return &memoryLaunch{l: toolchain.Launcher{Exe: m.Exe}, broker: b, cg: cg, policy: policy,
		mon: toolchain.NewOOMMonitor(cg, b), cur: policy.First()}, nil
}

func nodeProfileFromStats(st *toolchain.Stats, n *Node) toolchain.Profile {
	return toolchain.ResolveProfile(st.Profile(), toolchain.Profile{CompileBytes: int64(n.Recipe.Memory.Compile), LinkBytes: int64(n.Recipe.Memory.Link)})
}

type memoryLaunch struct {
	l      toolchain.Launcher
	broker *toolchain.Broker
	cg     *toolchain.Cgroup
	policy toolchain.RetryPolicy
	mon    *toolchain.OOMMonitor
	cur    toolchain.Attempt
}

func (m *memoryLaunch) Env() []string       { return m.broker.Env() }
func (m *memoryLaunch) CMakeArgs() []string { return m.l.CMakeArgs() }

func (m *memoryLaunch) Wrap(cc, cxx string) (string, string) {
	env := m.l.MakeEnv(cc, cxx)
	return strings.TrimPrefix(env[0], "CC="), strings.TrimPrefix(env[1], "CXX=")
}

// Retry classifies a failed step; an OOM kill resumes with half the jobs
// and half the budget, down to one job.
func (m *memoryLaunch) Retry(err error, attempt int, jobs JobPlan) (JobPlan, string, bool) {
	var out []byte
	var se *StepError
	if asStepError(err, &se) {
		out = []byte(strings.Join(se.Tail, "\n"))
	}
	classified := m.mon.Classify(err, out)
	next, ok := m.policy.Next(m.cur, classified)
	// Watch the next attempt from its own start.
	m.mon = toolchain.NewOOMMonitor(m.cg, m.broker)
	if !ok {
		if toolchain.IsOOM(classified) {
			return jobs, fmt.Sprintf("still OOM-killed at %d job(s) after %d attempts: the largest command needs more memory than this machine has free; free memory or add swap", m.cur.Jobs, attempt), false
		}
		return jobs, "", false
	}
	m.cur = next
	m.broker.SetBudget(next.Budget)
	return JobPlan{Compile: next.Jobs, Link: max(min(jobs.Link, next.Jobs), 1), Why: next.Reason, budget: next.Budget}, next.Reason, true
}

func (m *memoryLaunch) Close() error { return m.broker.Close() }
