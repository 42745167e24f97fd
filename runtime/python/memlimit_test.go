package python

import (
	"context"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// memoryModel allocates what INPUT asks for: 1 a little, 2 more than the
// limit; 3 aborts the stub (as a C library that cannot allocate does).
const memoryModel = `import os
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if v[0] == 1:
                np.ones(32 << 20, np.uint8)
            elif v[0] == 2:
                np.empty(2 << 30, np.uint8)  # address space, never touched
            elif v[0] == 3:
                os.abort()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", v),
                pb_utils.Tensor("BATCH", np.array([1], np.int64)), pb_utils.Tensor("CWD", np.array([b"."], np.object_))]))
        return out
`

// TestStubMemoryLimit: with stub-memory-bytes an allocation past the
// bound fails the request with a MemoryError that names the bound, the
// stub serving on; a stub that dies of it is restarted with an error that
// names the bound too; a bad value is refused at load.
func TestStubMemoryLimit(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.BackendConfig[KeyStubMemoryBytes] = "1073741824"
	writeFile(t, spec.VersionDir+"/model.py", memoryModel)
	inst := load(t, b, spec, 0)
	pid := inst.PID()

	if r := execute(t, inst, probeRequest(1))[0]; r.Err != nil {
		t.Fatalf("an allocation within the limit: %v", r.Err)
	}
	r := execute(t, inst, probeRequest(2))[0]
	if r.Err == nil || !strings.Contains(r.Err.Error(), "MemoryError") || !strings.Contains(r.Err.Error(), "memory limit of 1073741824 bytes") {
		t.Fatalf("an allocation past the limit: %v, want a MemoryError naming the limit", r.Err)
	}
	if inst.PID() != pid {
		t.Fatalf("a MemoryError restarted the stub")
	}

	_, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(3)})
	if err == nil || !strings.Contains(err.Error(), "memory limit of 1073741824 bytes (--backend-config=python,stub-memory-bytes)") {
		t.Fatalf("a stub that died under the limit: %v, want the limit named", err)
	}
	if r := execute(t, inst, probeRequest(1))[0]; r.Err != nil || inst.PID() == pid {
		t.Fatalf("after the restart: %v (pid %d, was %d)", r.Err, inst.PID(), pid)
	}

	// Without the setting the same allocation succeeds.
	spec = probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", memoryModel)
	if r := execute(t, load(t, b, spec, 0), probeRequest(2))[0]; r.Err != nil {
		t.Fatalf("without a limit: %v", r.Err)
	}
	if err := loadErr(t, b, nil, map[string]string{KeyStubMemoryBytes: "lots"}); err == nil || !strings.Contains(err.Error(), "stub-memory-bytes") {
		t.Errorf("bad value: %v", err)
	}
}
