//go:build cgo && libtorch

package main

import (
	"os"
	"strconv"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

// TestHostPolicyPlacesPytorch: the report's pytorch model, two KIND_CPU
// instances, under --host-policy=cpu,cpu-cores=N (a flag a deployment
// sets for its python models, under which every KIND_CPU group falls)
// loads, answers torch's forward, and runs each instance on a thread of
// the server kept to CPU N, as Triton keeps an instance's thread.
func TestHostPolicyPlacesPytorch(t *testing.T) {
	last := testenv.ConfinableCPU(t)
	py := "/usr/bin/python3"
	testenv.NeedPython(t, py, "torch", "numpy")
	root := t.TempDir()
	modelPT := writePytorchLinear(t, py, root, "instance_group [{ kind: KIND_CPU count: 2 }]\n")
	for tid, cpus := range testenv.ThreadCPUs(t, os.Getpid()) {
		if cpus == strconv.Itoa(last) {
			t.Fatalf("thread %d keeps to CPU %d before the server starts", tid, last)
		}
	}
	base, _, logs := startServer(t, "--model-repository", root, "--host-policy=cpu,cpu-cores="+strconv.Itoa(last))
	want := torchForward(t, modelPT, rowsFor(5, 3))
	for range 4 {
		got, err := inferJSON(base, rowsFor(5, 3))
		if err != nil || !closeTo(got, want, torchtest.Tolerance) {
			t.Fatalf("infer under the host policy: %v %v, want %v\n%s", got, err, want, logs.String())
		}
	}
	confined := 0
	for _, cpus := range testenv.ThreadCPUs(t, os.Getpid()) {
		if cpus == strconv.Itoa(last) {
			confined++
		}
	}
	if confined < 2 {
		t.Errorf("%d threads of the server keep to CPU %d, want one for each of the two instances", confined, last)
	}
}
