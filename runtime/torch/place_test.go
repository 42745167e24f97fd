package torch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// threadSeen is a forwarder that records the OS thread each forward runs
// on and that thread's CPUs.
type threadSeen struct {
	tids []int
	cpus []unix.CPUSet
}

func (f *threadSeen) Forward(in []backend.Tensor) ([]backend.Tensor, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	f.tids = append(f.tids, unix.Gettid())
	f.cpus = append(f.cpus, set)
	if len(in) == 0 {
		return nil, errors.New("no inputs")
	}
	return in, nil
}

// opened is an open function for placeForwards that hands it f.
func opened(f forwarder) func() (forwarder, error) {
	return func() (forwarder, error) { return f, nil }
}

// TestPlacedOpenOnBoundThread: placeForwards opens the forwarder on the
// instance's thread once the policy applies (what a module allocates as
// it loads comes from the policy's node), the forwards run on that same
// thread, and an open that fails fails the placement with its error and
// ends the thread.
func TestPlacedOpenOnBoundThread(t *testing.T) {
	node := testenv.MemoryNode(t)
	seen := &threadSeen{}
	openedOn, policy := 0, ""
	p, err := placeForwards(backend.HostPolicy{NUMANodes: []int{node}}, func() (forwarder, error) {
		// The thread's policy while open runs, as numa_maps writes it
		// (testenv.ThreadMemoryPolicies reads the same field).
		openedOn = unix.Gettid()
		if maps, err := os.ReadFile("/proc/thread-self/numa_maps"); err == nil && len(strings.Fields(string(maps))) > 1 {
			policy = strings.Fields(string(maps))[1]
		}
		return seen, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if want := "bind:" + strconv.Itoa(node); policy != want {
		t.Errorf("the forwarder was opened under memory policy %q: want %q", policy, want)
	}
	in := []backend.Tensor{{Name: "x", DataType: backend.FP32, Shape: []int64{1}, Data: make([]byte, 4)}}
	if _, err := p.Forward(in); err != nil {
		t.Fatal(err)
	}
	if seen.tids[0] != openedOn {
		t.Errorf("opened on thread %d, forwarded on %d: want one thread", openedOn, seen.tids[0])
	}

	failed := 0
	refused := errors.New("no such module")
	if _, err := placeForwards(backend.HostPolicy{NUMANodes: []int{node}}, func() (forwarder, error) {
		failed = unix.Gettid()
		return nil, refused
	}); !errors.Is(err, refused) {
		t.Fatalf("a failed open placed as %v, want its own error", err)
	}
	task := filepath.Join("/proc/self/task", strconv.Itoa(failed))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still runs after its open failed", failed)
		}
	}
}

// TestPlacedForwardsRunConfined: every forward of a placed instance runs
// on one OS thread whose CPUs are the policy's, results and errors come
// back as the forwarder gave them, the caller's own CPUs are untouched,
// and the thread ends when the instance stops it (it does not go back to
// the Go runtime with the policy's affinity).
func TestPlacedForwardsRunConfined(t *testing.T) {
	cpu := testenv.ConfinableCPU(t)
	n := len(testenv.AllowedCPUs(t))
	seen := &threadSeen{}
	p, err := placeForwards(backend.HostPolicy{CPUs: []int{cpu}}, opened(seen))
	if err != nil {
		t.Fatal(err)
	}
	in := []backend.Tensor{{Name: "x", DataType: backend.FP32, Shape: []int64{1}, Data: make([]byte, 4)}}
	for range 3 {
		out, err := p.Forward(in)
		if err != nil || len(out) != 1 || out[0].Name != "x" {
			t.Fatalf("forward: %v %v", out, err)
		}
	}
	if _, err := p.Forward(nil); err == nil || err.Error() != "no inputs" {
		t.Fatalf("the forwarder's error came back as %v", err)
	}
	for i, set := range seen.cpus {
		if set.Count() != 1 || !set.IsSet(cpu) {
			t.Errorf("forward %d ran on a thread allowed %d CPUs, want CPU %d only", i, set.Count(), cpu)
		}
		if seen.tids[i] != seen.tids[0] {
			t.Errorf("forward %d ran on thread %d, forward 0 on %d: want one thread", i, seen.tids[i], seen.tids[0])
		}
	}
	if m := len(testenv.AllowedCPUs(t)); m != n {
		t.Errorf("the caller's thread may now run on %d CPUs, %d before", m, n)
	}
	if seen.tids[0] == os.Getpid() {
		t.Fatal("forwards ran on the process's main thread, which the runtime never ends")
	}
	task := filepath.Join("/proc/self/task", strconv.Itoa(seen.tids[0]))
	if _, err := os.Stat(task); err != nil {
		t.Fatalf("the placed thread is gone before stop: %v", err)
	}
	p.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still runs after stop", seen.tids[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPlacementRefusedCPUs: CPUs the kernel will not give the thread fail
// the placement, naming them and the host policy.
func TestPlacementRefusedCPUs(t *testing.T) {
	if allowed := testenv.AllowedCPUs(t); allowed[len(allowed)-1] == backend.MaxCPU {
		t.Skipf("this process may run on CPU %d, the one this test needs to be refused", backend.MaxCPU)
	}
	_, err := placeForwards(backend.HostPolicy{CPUs: []int{backend.MaxCPU}}, opened(&threadSeen{}))
	if err == nil || !strings.Contains(err.Error(), "cannot confine the instance's thread to CPUs 1023 (its host policy's cpu-cores)") {
		t.Fatalf("placement on CPU %d: %v", backend.MaxCPU, err)
	}
}
