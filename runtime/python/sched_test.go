package python

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// threadModel starts a thread in initialize, after the stub set its
// policy, and a child process in execute: both must have inherited it.
const threadModel = `import subprocess, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        self.t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
        self.t.start()
        self.child = subprocess.Popen(["sleep", "3600"])
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()),
            pb_utils.Tensor("BATCH", np.array([1], np.int64)), pb_utils.Tensor("CWD", np.array([b"."], np.object_))]) for r in requests]
    def finalize(self):
        self.child.kill()
`

// schedPolicies reads the scheduling policy (field 41 of stat) of every
// thread of pid and of its children's threads.
func schedPolicies(t *testing.T, pid int) map[string]int {
	t.Helper()
	out := map[string]int{}
	var walk func(pid int)
	walk = func(pid int) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		for _, task := range tasks {
			dir := fmt.Sprintf("/proc/%d/task/%s", pid, task.Name())
			stat, err := os.ReadFile(filepath.Join(dir, "stat"))
			if err != nil {
				continue // the thread ended
			}
			// Fields after the command, which is in parentheses and may
			// hold spaces: the state is field 3, the policy field 41.
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			policy, err := strconv.Atoi(fields[41-3])
			if err != nil {
				t.Fatalf("%s/stat: policy %q", dir, fields[41-3])
			}
			out[dir] = policy
			children, _ := os.ReadFile(filepath.Join(dir, "children"))
			for _, c := range strings.Fields(string(children)) {
				n, _ := strconv.Atoi(c)
				walk(n)
			}
		}
	}
	walk(pid)
	return out
}

// TestStubScheduling: by default (auto) every thread of a stub, those
// model.py starts and the processes it starts run SCHED_BATCH when the
// model asks for more instances than the machine has cores, SCHED_OTHER
// otherwise; batch and normal force either; another value is refused at
// load with the key and the value named.
func TestStubScheduling(t *testing.T) {
	requirePython(t)
	const other, batch = 0, 3 // SCHED_OTHER, SCHED_BATCH
	b, _ := newTestBackend(t, Options{})
	many := runtime.NumCPU() + 1
	for _, c := range []struct {
		setting   string
		instances int // in the config's instance_group; 0: no config
		want      int
	}{
		{"", many, batch}, {"", 1, other}, {"", 0, other}, {"auto", many, batch},
		{"batch", 1, batch}, {"normal", many, other},
	} {
		name := fmt.Sprintf("%q with %d instances", c.setting, c.instances)
		spec := probeSpec(t, 8)
		if c.setting != "" {
			spec.BackendConfig[KeyStubScheduling] = c.setting
		}
		if c.instances > 0 {
			spec.ConfigJSON = fmt.Appendf(nil, `{"name":"probe","backend":"python","max_batch_size":8,"instance_group":[{"name":"probe","kind":"KIND_CPU","count":%d}]}`, c.instances)
		}
		writeFile(t, spec.VersionDir+"/model.py", threadModel)
		inst := load(t, b, spec, 0)
		if r := execute(t, inst, probeRequest(1))[0]; r.Err != nil {
			t.Fatalf("%s: %v", name, r.Err)
		}
		got := schedPolicies(t, inst.PID())
		// The stub's main thread, the model's thread, the sleep child.
		if len(got) < 3 {
			t.Fatalf("%s: found only %v", name, got)
		}
		for task, policy := range got {
			if policy != c.want {
				t.Errorf("%s: %s has policy %d, want %d", name, task, policy, c.want)
			}
		}
		inst.Close()
	}
	err := loadErr(t, b, nil, map[string]string{KeyStubScheduling: "fifo"})
	if err == nil || !strings.Contains(err.Error(), `python,stub-scheduling="fifo": want auto, batch or normal`) {
		t.Errorf("a bad value: %v", err)
	}
}

// TestStubSchedulingAcrossModels: auto counts the instances every loaded
// python model asks for. On two cores a model of one instance runs
// SCHED_OTHER alone, is switched to SCHED_BATCH (its model's thread and
// child too) once a second model of two instances loads, and back once
// that model unloads; a model on normal stays on it throughout.
func TestStubSchedulingAcrossModels(t *testing.T) {
	requirePython(t)
	const other, batch = 0, 3 // SCHED_OTHER, SCHED_BATCH
	b, _ := newTestBackend(t, Options{})
	b.sched = newStubSched([]int{0, 1})
	model := func(name string, instances int, setting string) *backend.ModelSpec {
		spec := probeSpec(t, 8)
		spec.Name = name
		spec.ConfigJSON = fmt.Appendf(nil, `{"name":%q,"backend":"python","max_batch_size":8,"instance_group":[{"kind":"KIND_CPU","count":%d}]}`, name, instances)
		if setting != "" {
			spec.BackendConfig[KeyStubScheduling] = setting
		}
		writeFile(t, spec.VersionDir+"/model.py", threadModel)
		return spec
	}
	expect := func(when string, inst *Instance, want int) {
		t.Helper()
		got := schedPolicies(t, inst.PID())
		if len(got) < 3 { // the stub's main thread, the model's thread, the sleep child
			t.Fatalf("%s: found only %v", when, got)
		}
		for task, policy := range got {
			if policy != want {
				t.Errorf("%s: %s of %q has policy %d, want %d", when, task, inst.spec.Name, policy, want)
			}
		}
	}
	a := load(t, b, model("a", 1, ""), 0)
	pinned := load(t, b, model("pinned", 1, "normal"), 0)
	expect("one instance of auto on two cores", a, other)
	big := model("b", 2, "")
	b0 := load(t, b, big, 0)
	expect("a second model asking for two more", a, batch)
	expect("a second model asking for two more", b0, batch)
	expect("a second model asking for two more", pinned, other)
	b0.Close()
	expect("the second model unloaded", a, other)
	expect("the second model unloaded", pinned, other)
}

// TestSetGroupPolicy switches every thread of a process group, a child
// of its leader included, and back, with no python involved.
func TestSetGroupPolicy(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	for len(schedPolicies(t, pid)) < 2 { // sh and its sleep
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range []struct {
		batch bool
		want  int
	}{{true, 3}, {false, 0}} {
		if err := setGroupPolicy(pid, c.batch); err != nil {
			t.Fatal(err)
		}
		for task, policy := range schedPolicies(t, pid) {
			if policy != c.want {
				t.Errorf("batch %v: %s has policy %d, want %d", c.batch, task, policy, c.want)
			}
		}
	}
	if g := processGroup(pid); g != pid {
		t.Errorf("processGroup(%d) = %d, want the leader's own pid", pid, g)
	}
	if g := processGroup(1 << 30); g != -1 {
		t.Errorf("processGroup of no process = %d, want -1", g)
	}
}

func TestInstanceCount(t *testing.T) {
	for _, c := range []struct {
		config string
		want   int
	}{
		{``, 0},
		{`{"name":"m"}`, 0},
		{`{"instance_group":[{"count":4}]}`, 4},
		{`{"instance_group":[{"count":"3"},{"count":2}]}`, 5},
		{`{"instance_group":[{"kind":"KIND_CPU"}]}`, 1},
		{`{"instance_group":[{"count":0}]}`, 1},
		{`{"instance_group":"x"}`, 0},
	} {
		if got := instanceCount(&backend.ModelSpec{ConfigJSON: []byte(c.config)}); got != c.want {
			t.Errorf("instanceCount(%s) = %d, want %d", c.config, got, c.want)
		}
	}
}

// TestInstanceName: initialize's model_instance_name is Triton's, the
// group's name and the index in the group: <model>_<i> for the group
// Triton adds (named after the model), <group>_<i> for a named one.
func TestInstanceName(t *testing.T) {
	for _, c := range []struct {
		config string
		idx    int
		want   string
	}{
		{`{"instance_group":[{"name":"m","count":2}]}`, 1, "m_1"},
		{`{"instance_group":[{"name":"a","count":2},{"name":"b","count":3}]}`, 0, "a_0"},
		{`{"instance_group":[{"name":"a","count":2},{"name":"b","count":3}]}`, 3, "b_1"},
		{`{"instance_group":[{"name":"m_0","count":1},{"name":"m_1","count":1}]}`, 1, "m_1_0"},
		{``, 2, "m_2"},
	} {
		if got := instanceName(&backend.ModelSpec{Name: "m", ConfigJSON: []byte(c.config)}, c.idx); got != c.want {
			t.Errorf("instanceName(%s, %d) = %q, want %q", c.config, c.idx, got, c.want)
		}
	}
}

func TestOversubscribed(t *testing.T) {
	two := []int{0, 1}
	for _, c := range []struct {
		name string
		sets [][]int
		want bool
	}{
		{"none", nil, false},
		{"two on two", [][]int{two, two}, false},
		{"three on two", [][]int{two, two, two}, true},
		{"two confined to one CPU of two", [][]int{{1}, {1}}, true},
		{"one on each CPU", [][]int{{0}, {1}}, false},
		{"two unconfined beside one on CPU 1", [][]int{two, two, {1}}, true},
		{"one unconfined beside one on CPU 1", [][]int{two, {1}}, false},
		// The first takes CPU 0, the second must move it to CPU 1.
		{"a choice to undo", [][]int{two, {0}}, false},
		{"a CPU the server does not run on", [][]int{two, two, {5}}, false},
		{"chains of overlapping sets", [][]int{{0, 1}, {1, 2}, {2, 0}}, false},
		{"four sets over three CPUs", [][]int{{0, 1}, {1, 2}, {2, 0}, {0, 1, 2}}, true},
	} {
		if got := oversubscribed(c.sets); got != c.want {
			t.Errorf("%s: oversubscribed(%v) = %v, want %v", c.name, c.sets, got, c.want)
		}
	}
	// As many instances as the largest machine has CPUs, all on one set.
	all := make([]int, backend.MaxCPU+1)
	for c := range all {
		all[c] = c
	}
	sets := slices.Repeat([][]int{all}, len(all))
	if oversubscribed(sets) {
		t.Errorf("%d instances on %d CPUs: oversubscribed", len(sets), len(all))
	}
	if !oversubscribed(append(sets, all)) {
		t.Errorf("%d instances on %d CPUs: not oversubscribed", len(sets)+1, len(all))
	}
}

// TestStubSchedHostPolicies: auto's decision counts the CPUs a host
// policy confines each instance to, not the server's. Two instances
// confined to one CPU contend on a machine of four, so their stubs go
// SCHED_BATCH; spread over two CPUs, or unconfined, they do not.
func TestStubSchedHostPolicies(t *testing.T) {
	spec := func(name string, cpus [][]int) *backend.ModelSpec {
		policies := make([]backend.HostPolicy, len(cpus))
		for i, c := range cpus {
			policies[i].CPUs = c
		}
		return &backend.ModelSpec{Name: name, Version: 1, InstancePolicies: policies,
			ConfigJSON: fmt.Appendf(nil, `{"instance_group":[{"count":%d}]}`, len(cpus))}
	}
	warn := func(err error) { t.Errorf("warned: %v", err) }
	for _, c := range []struct {
		name string
		cpus [][]int
		want bool
	}{
		{"unconfined", [][]int{nil, nil}, false},
		{"both on CPU 1", [][]int{{1}, {1}}, true},
		{"CPU 1 and CPU 2", [][]int{{1}, {2}}, false},
		{"one unconfined, one on CPU 1", [][]int{nil, {1}}, false},
	} {
		s := newStubSched([]int{0, 1, 2, 3})
		sp := spec(c.name, c.cpus)
		got := s.join(&Instance{idx: 0, spec: sp}, sp, true, warn)
		if got != c.want {
			t.Errorf("%s: auto stubs run SCHED_BATCH: %v, want %v", c.name, got, c.want)
		}
	}
	// The count is across models: a second model confined to CPU 1 next
	// to one already there tips the first into SCHED_BATCH too.
	s := newStubSched([]int{0, 1, 2, 3})
	a, b := spec("a", [][]int{{1}}), spec("b", [][]int{{1}})
	ia := &Instance{idx: 0, spec: a}
	if s.join(ia, a, true, warn) {
		t.Errorf("one instance on CPU 1: SCHED_BATCH, want SCHED_OTHER")
	}
	ib := &Instance{idx: 0, spec: b}
	if !s.join(ib, b, true, warn) {
		t.Errorf("a second model's instance on CPU 1: SCHED_OTHER, want SCHED_BATCH")
	}
	s.leave(ib, b, warn)
	if s.autoBatch() {
		t.Errorf("the second model unloaded: SCHED_BATCH, want SCHED_OTHER")
	}
}
