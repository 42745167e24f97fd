package python

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// stubSched decides the policy of the stubs of models on
// stub-scheduling=auto, across every python model of a Backend: SCHED_BATCH
// while the loaded models together ask for more instances than there are
// CPUs for them to run on, SCHED_OTHER otherwise. Counting one model alone
// left two models of two instances each on two cores preempting each other
// as the report's four did. A stub may run on the server's own CPUs, or
// on those of its instance's host policy (ModelSpec.InstancePolicies): two
// instances confined to one CPU contend however many the machine has.
// When a load or an unload moves the count across, the stubs already
// running on auto are switched.
type stubSched struct {
	own    []int // the CPUs a stub without a host policy may run on
	mu     sync.Mutex
	models map[schedKey]*schedModel
	batch  bool // the policy of auto stubs now
}

type schedKey struct {
	name    string
	version int64
}

// schedModel is one loaded model version: the instances its config asks
// for and those whose stubs were started.
type schedModel struct {
	spec *backend.ModelSpec
	want int
	live map[*Instance]bool // true: on auto
}

// newStubSched decides for stubs that may run on the CPUs own, those of
// the server's affinity, unless a host policy confines them.
func newStubSched(own []int) *stubSched {
	if len(own) == 0 {
		own = []int{0}
	}
	return &stubSched{own: own, models: map[schedKey]*schedModel{}}
}

// defaultStubSched is newStubSched over the server's affinity, or over
// runtime.NumCPU() CPUs where it is not known (nil).
func defaultStubSched(affinity *unix.CPUSet) *stubSched {
	var own []int
	if affinity != nil {
		for c := 0; c <= backend.MaxCPU; c++ {
			if affinity.IsSet(c) {
				own = append(own, c)
			}
		}
	}
	if len(own) == 0 {
		for c := range runtime.NumCPU() {
			own = append(own, c)
		}
	}
	return newStubSched(own)
}

// demand is, per instance the loaded models ask for, the CPUs its stub
// may run on: each model's config count of instances, or as many as it
// started when it has no config or started more.
func (s *stubSched) demand() [][]int {
	var sets [][]int
	for _, m := range s.models {
		for idx := range max(m.want, len(m.live)) {
			cpus := m.spec.InstancePolicy(idx).CPUs
			if cpus == nil {
				cpus = s.own
			}
			sets = append(sets, cpus)
			if len(sets) > backend.MaxCPU+1 {
				return sets // more than any machine's CPUs: oversubscribed
			}
		}
	}
	return sets
}

// oversubscribed reports whether instances, each allowed the CPUs of its
// set, cannot each have a CPU of its own: whether a matching of instances
// to CPUs that covers every instance fails (Kuhn's augmenting paths).
// Instances that share one set of n CPUs come down to the count against n.
func oversubscribed(sets [][]int) bool {
	cpus := map[int]bool{}
	for _, set := range sets {
		for _, c := range set {
			cpus[c] = true
		}
	}
	if len(sets) > len(cpus) {
		return true // also bounds the search below by the CPUs there are
	}
	owner := map[int]int{} // CPU -> the instance it is given to
	var seen map[int]bool
	var place func(i int) bool
	place = func(i int) bool {
		// A free CPU first: instances sharing one set then never search.
		for _, c := range sets[i] {
			if _, taken := owner[c]; !taken {
				owner[c] = i
				return true
			}
		}
		for _, c := range sets[i] {
			if seen[c] {
				continue
			}
			seen[c] = true
			if place(owner[c]) {
				owner[c] = i
				return true
			}
		}
		return false
	}
	for i := range sets {
		seen = map[int]bool{}
		if !place(i) {
			return true
		}
	}
	return false
}

// join counts in, an instance of spec about to start its stub, and
// returns whether a stub on auto starts SCHED_BATCH now. Stubs already
// running on auto are switched when in's model moves the count over the
// cores; a switch that fails is logged through warn.
func (s *stubSched) join(in *Instance, spec *backend.ModelSpec, auto bool, warn func(error)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := schedKey{spec.Name, spec.Version}
	m := s.models[k]
	if m == nil {
		m = &schedModel{spec: spec, want: instanceCount(spec), live: map[*Instance]bool{}}
		s.models[k] = m
	}
	m.live[in] = auto
	s.update(warn)
	return s.batch
}

// leave forgets in (its stub gone for good); a model whose last instance
// left no longer counts.
func (s *stubSched) leave(in *Instance, spec *backend.ModelSpec, warn func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := schedKey{spec.Name, spec.Version}
	m := s.models[k]
	if m == nil {
		return
	}
	delete(m.live, in)
	if len(m.live) == 0 {
		delete(s.models, k)
	}
	s.update(warn)
}

// autoBatch reports the policy a stub on auto starts with now (a restart).
func (s *stubSched) autoBatch() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch
}

// update recomputes the policy and, when it changed, applies it to the
// running stubs on auto. Callers hold mu.
func (s *stubSched) update(warn func(error)) {
	batch := oversubscribed(s.demand())
	if batch == s.batch {
		return
	}
	s.batch = batch
	for _, m := range s.models {
		for in, auto := range m.live {
			// A stub that exited is skipped: once reaped, its pid may
			// name another process.
			if p := in.running.Load(); auto && p != nil && p.alive() {
				if err := setGroupPolicy(p.pid, batch); err != nil {
					warn(fmt.Errorf("stub-scheduling=auto: switching the stub of instance %d of %q: %w", in.idx, in.spec.Name, err))
				}
			}
		}
	}
}

// settle switches proc, a stub on auto just started with policy
// launched, when the policy changed while it started (before update
// could see it).
func (s *stubSched) settle(proc *stubProc, launched bool, warn func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batch == launched || !proc.alive() {
		return
	}
	if err := setGroupPolicy(proc.pid, s.batch); err != nil {
		warn(fmt.Errorf("stub-scheduling=auto: switching a stub that just started: %w", err))
	}
}

// setGroupPolicy puts every thread of the processes in process group pgid
// (a stub and the processes its model started) under SCHED_BATCH or
// SCHED_OTHER, keeping each thread's nice value. Threads and processes
// that end meanwhile are skipped.
func setGroupPolicy(pgid int, batch bool) error {
	policy := uint32(unix.SCHED_NORMAL)
	if batch {
		policy = unix.SCHED_BATCH
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || processGroup(pid) != pgid {
			continue
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // ended
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			attr, err := unix.SchedGetAttr(tid, 0)
			if err == nil {
				attr.Policy = policy
				attr.Flags = 0
				err = unix.SchedSetAttr(tid, attr, 0)
			}
			if err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// processGroup is field 5 of /proc/pid/stat, or -1 when it cannot be read.
func processGroup(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 3 {
		return -1
	}
	pg, err := strconv.Atoi(f[2]) // state, ppid, pgrp
	if err != nil {
		return -1
	}
	return pg
}
