package python

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func probeRequest(vals ...float32) *backend.Request {
	return &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{int64(len(vals))}, vals...)}}
}

// outputRequest is probeRequest asking for OUTPUT alone: the models these
// tests write in place of the probe answer with nothing else.
func outputRequest(vals ...float32) *backend.Request {
	r := probeRequest(vals...)
	r.Outputs = []string{"OUTPUT"}
	return r
}

func TestBatchReachesExecuteAsOneList(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	inst := load(t, b, spec, 0)
	resps := execute(t, inst, probeRequest(1, 2), probeRequest(3), probeRequest(4, 5, 6))
	want := [][]float32{{1, 2}, {3}, {4, 5, 6}}
	for i, r := range resps {
		assertClose(t, fp32Values(t, output(t, r, "OUTPUT")), want[i], 0)
		batch := output(t, r, "BATCH")
		if n := int64(batch.Data[0]) | int64(batch.Data[1])<<8; n != 3 {
			t.Errorf("request %d: execute saw %d requests, want 3", i, n)
		}
		if cwd := bytesElems(t, output(t, r, "CWD")); len(cwd) != 1 || cwd[0] != spec.VersionDir {
			t.Errorf("working directory %q, want the version directory %s", cwd, spec.VersionDir)
		}
	}
	if !strings.Contains(logs.String(), `msg="INFO: probe initialized for probe" model=probe version=1 instance=0`) {
		t.Errorf("pb_utils.Logger output missing from the log:\n%s", logs.String())
	}
}

func TestRequestedOutputsOnly(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	req := probeRequest(7)
	req.Outputs = []string{"BATCH"}
	resps := execute(t, inst, req)
	if len(resps[0].Outputs) != 1 || resps[0].Outputs[0].Name != "BATCH" {
		t.Fatalf("outputs %+v, want only BATCH", resps[0].Outputs)
	}
	req.Outputs = []string{"NOPE"}
	resps = execute(t, inst, req)
	if resps[0].Err == nil || !strings.Contains(resps[0].Err.Error(), `no output "NOPE"`) {
		t.Fatalf("asking for a missing output: err %v", resps[0].Err)
	}
}

func TestBytesRoundTrip(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	elems := []string{"hello", "", "w\xc3\xb6rld", "\x00\x01binary\xff", strings.Repeat("x", 5000)}
	req := probeRequest(1)
	req.Inputs = append(req.Inputs, bytesTensor("TEXT", elems...))
	req.Outputs = []string{"TEXT_OUT"}
	resps := execute(t, inst, req)
	out := output(t, resps[0], "TEXT_OUT")
	if out.DataType != backend.Bytes || len(out.Shape) != 1 || out.Shape[0] != int64(len(elems)) {
		t.Fatalf("TEXT_OUT is %s %v", out.DataType, out.Shape)
	}
	got := bytesElems(t, out)
	for i := range elems {
		if got[i] != elems[i] {
			t.Errorf("element %d: got %q, want %q", i, got[i], elems[i])
		}
	}
	// Malformed BYTES fails that request alone, before reaching the stub.
	bad := probeRequest(1)
	bad.Inputs = append(bad.Inputs, backend.Tensor{Name: "TEXT", DataType: backend.Bytes, Shape: []int64{1}, Data: []byte{9, 0, 0, 0, 'a'}})
	resps = execute(t, inst, bad, probeRequest(2))
	if resps[0].Err == nil || resps[1].Err != nil {
		t.Fatalf("malformed BYTES: errors %v / %v, want an error for the first request only", resps[0].Err, resps[1].Err)
	}
}

// TestSharedMemoryGrows sends more than the initial region holds, and gets
// back outputs that do not fit behind the inputs either (the stub grows it).
func TestSharedMemoryGrows(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{ShmSize: 4096})
	inst := load(t, b, probeSpec(t, 8), 0)
	vals := make([]float32, 300_000)
	for i := range vals {
		vals[i] = float32(i)
	}
	for round := 0; round < 2; round++ {
		resps := execute(t, inst, probeRequest(vals...), probeRequest(vals[:1000]...))
		assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), vals, 0)
		assertClose(t, fp32Values(t, output(t, resps[1], "OUTPUT")), vals[:1000], 0)
	}
	if inst.shm.size() < 2*4*len(vals) {
		t.Errorf("shared memory is %d bytes, expected growth past %d", inst.shm.size(), 2*4*len(vals))
	}
}

func TestExceptionFailsBatch(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	resps := execute(t, inst, probeRequest(1), probeRequest(-3))
	for i, r := range resps {
		if r.Err == nil || r.Err.Error() != "ValueError: boom" {
			t.Errorf("request %d: err %v, want ValueError: boom", i, r.Err)
		}
	}
	// The instance keeps working, in the same process.
	pid := inst.PID()
	resps = execute(t, inst, probeRequest(5))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{5}, 0)
	if inst.PID() != pid || inst.Restarts() != 0 {
		t.Errorf("an exception restarted the stub")
	}
}

func TestErrorResponseFailsOneRequest(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	resps := execute(t, inst, probeRequest(1), probeRequest(-4), probeRequest(2))
	if resps[1].Err == nil || resps[1].Err.Error() != "bad input" {
		t.Fatalf("request 1: err %v, want bad input", resps[1].Err)
	}
	var be *backend.Error
	if !errors.As(resps[1].Err, &be) || be.Code != backend.Internal {
		t.Errorf("error %#v, want a *backend.Error with code Internal", resps[1].Err)
	}
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{1}, 0)
	assertClose(t, fp32Values(t, output(t, resps[2], "OUTPUT")), []float32{2}, 0)
}

func TestCrashRestarts(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	pid := inst.PID()
	_, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(1), probeRequest(-1)})
	if err == nil || !strings.Contains(err.Error(), "exited while running execute (exit status 7)") {
		t.Fatalf("crash: err %v, want the stub's exit status 7", err)
	}
	resps := execute(t, inst, probeRequest(3))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{3}, 0)
	if inst.PID() == pid || inst.Restarts() != 1 {
		t.Errorf("pid %d -> %d, restarts %d: want a new stub after one restart", pid, inst.PID(), inst.Restarts())
	}
	if !strings.Contains(logs.String(), "probe initialized") {
		t.Errorf("restart log missing")
	}
}

func TestHangKilledAndRestarted(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.BackendConfig[KeyExecuteTimeout] = "1"
	inst := load(t, b, spec, 0)
	pid := inst.PID()
	start := time.Now()
	_, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(-2)})
	if err == nil || !strings.Contains(err.Error(), "did not finish running execute within 1s and was killed") {
		t.Fatalf("hang: err %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("hang detected after %s, timeout was 1s", d)
	}
	if alive(pid) {
		t.Errorf("hung stub %d still runs", pid)
	}
	resps := execute(t, inst, probeRequest(4))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{4}, 0)
}

// TestCanceledContextKeepsStub: a caller that gives up does not cost the
// stub; its late reply is skipped and the next batch gets its own answer.
func TestCanceledContextKeepsStub(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	pid := inst.PID()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inst.Execute(ctx, []*backend.Request{probeRequest(11)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: err %v", err)
	}
	resps := execute(t, inst, probeRequest(12))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{12}, 0)
	if inst.PID() != pid {
		t.Errorf("stub restarted after a canceled request")
	}
}

func TestStubKilledWhileIdle(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	inst.mu.Lock()
	proc := inst.proc
	inst.mu.Unlock()
	proc.cmd.Process.Kill()
	<-proc.exited
	resps := execute(t, inst, probeRequest(8))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{8}, 0)
}

func TestInitializeErrorFailsLoad(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", "import triton_python_backend_utils as pb_utils\n"+
		"class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no weights here')\n"+
		"    def execute(self, requests):\n        return []\n")
	_, err := b.NewInstance(context.Background(), spec, 0)
	if err == nil || !strings.Contains(err.Error(), "initialize raised RuntimeError: no weights here") {
		t.Fatalf("err %v", err)
	}
	writeFile(t, spec.VersionDir+"/model.py", "import no_such_module_anywhere\n")
	_, err = b.NewInstance(context.Background(), spec, 0)
	if err == nil || !strings.Contains(err.Error(), "ModuleNotFoundError: No module named 'no_such_module_anywhere'") {
		t.Fatalf("err %v", err)
	}
}

func TestAutoCompleteConfig(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	writeFile(t, spec.VersionDir+"/model.py", `import os
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        assert config.as_dict()["input"] == [], config.as_dict()
        config.add_input({"name": "EXTRA", "data_type": "TYPE_INT32", "dims": [2]})
        config.set_max_batch_size(4)
        config.set_dynamic_batching()
        open("pid", "w").write(str(os.getpid()))
        return config
    def execute(self, requests):
        return [pb_utils.InferenceResponse() for _ in requests]
`)
	ctx := context.Background()
	got, err := b.AutoComplete(ctx, backend.AutoCompleteRequest{ModelDir: spec.ModelDir, VersionDir: spec.VersionDir,
		ConfigJSON: []byte(`{"name":"probe","backend":"python","max_batch_size":0,"input":[],"output":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(got, &cfg); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if cfg["max_batch_size"] != 4.0 || cfg["dynamic_batching"] == nil || !strings.Contains(string(got), `"EXTRA"`) {
		t.Errorf("completed config %s", got)
	}
	// The interpreter that ran it is gone (Triton's documented behaviour).
	pid, _ := os.ReadFile(spec.VersionDir + "/pid")
	n, _ := strconv.Atoi(string(pid))
	if n == 0 || syscall.Kill(n, 0) == nil {
		t.Errorf("auto-complete stub %q still running", pid)
	}

	// A conflict with the configuration fails with Triton's message.
	_, err = b.AutoComplete(ctx, backend.AutoCompleteRequest{ModelDir: spec.ModelDir, VersionDir: spec.VersionDir,
		ConfigJSON: []byte(`{"name":"probe","max_batch_size":8,"input":[],"output":[]}`)})
	if err == nil || !strings.Contains(err.Error(), "configuration specified max_batch_size 8") {
		t.Errorf("conflict: %v", err)
	}

	// A model that does not mention it costs no stub.
	writeFile(t, spec.VersionDir+"/model.py", "raise SystemExit(3)\n")
	if got, err := b.AutoComplete(ctx, backend.AutoCompleteRequest{ModelDir: spec.ModelDir, VersionDir: spec.VersionDir,
		ConfigJSON: []byte(`{"name":"probe"}`)}); got != nil || err != nil {
		t.Errorf("no auto_complete_config: %s %v", got, err)
	}
}

func TestClosedInstance(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	inst := load(t, b, probeSpec(t, 8), 0)
	pid := inst.PID()
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("stub %d runs after Close", pid)
	}
	if !strings.Contains(logs.String(), `msg="probe finalized" model=probe version=1 instance=0`) {
		t.Errorf("finalize output missing:\n%s", logs.String())
	}
	if _, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(1)}); err == nil {
		t.Errorf("Execute after Close succeeded")
	}
}

// TestModelImportsSiblingModule: model.py may import helpers stored next to
// it, as with Triton.
func TestModelImportsSiblingModule(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/helper_mod.py", "def double(x):\n    return x * 2\n")
	writeFile(t, spec.VersionDir+"/model.py", `import helper_mod
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", helper_mod.double(x))]))
        return out
`)
	inst := load(t, b, spec, 0)
	req := outputRequest(1.5, -2)
	resps := execute(t, inst, req)
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{3, -4}, 0)
}

// TestModelImportedAsPackage: model.py is imported as "<version>.model",
// as Triton imports it, so relative imports of modules beside it (and of
// a subpackage) work, and the model directory is on sys.path too.
func TestModelImportedAsPackage(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/helper_mod.py", "def double(x):\n    return x * 2\n")
	if err := os.MkdirAll(spec.VersionDir+"/ops", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, spec.VersionDir+"/ops/__init__.py", "from .. import helper_mod\ndef quadruple(x):\n    return helper_mod.double(helper_mod.double(x))\n")
	writeFile(t, spec.ModelDir+"/shared_mod.py", "OFFSET = 1\n")
	writeFile(t, spec.VersionDir+"/model.py", `from . import helper_mod
from .ops import quadruple
import shared_mod
import triton_python_backend_utils as pb_utils
assert __name__ == "1.model" and __package__ == "1", (__name__, __package__)
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", helper_mod.double(x) + quadruple(x) + shared_mod.OFFSET)]))
        return out
`)
	inst := load(t, b, spec, 0)
	req := outputRequest(1.5, -2)
	resps := execute(t, inst, req)
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{10, -11}, 0)
}

// TestCloseDuringStuckRestart: a restart whose initialize hangs does not
// hold up unloading.
func TestCloseDuringStuckRestart(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", `import os, time
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists("hang-on-init"):
            time.sleep(3600)
    def execute(self, requests):
        os._exit(3)
`)
	inst := load(t, b, spec, 0)
	writeFile(t, spec.VersionDir+"/hang-on-init", "")
	if _, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(1)}); err == nil {
		t.Fatal("execute survived os._exit")
	}
	time.Sleep(500 * time.Millisecond) // let the background restart reach initialize
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- inst.Close() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close blocked behind a hung restart")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s", d)
	}
	if left := stubChildren(t); len(left) != 0 {
		for pid := range left {
			if alive(pid) {
				t.Errorf("stub %d left running", pid)
			}
		}
	}
}

// TestRegionGrownBeforeBatchError: outputs written before execute's list
// turned out unusable grew the region; the server must keep that size (a
// smaller file under the stub's larger mapping would crash it).
func TestRegionGrownBeforeBatchError(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{ShmSize: 4096})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if x[0] < 0:
                big = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.zeros(1000000, np.float32))])
                return [big, "not a response"]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x)]))
        return out
`)
	inst := load(t, b, spec, 0)
	resps := execute(t, inst, probeRequest(-1), probeRequest(2))
	if resps[0].Err == nil || !strings.Contains(resps[0].Err.Error(), "execute returned str in its list") {
		t.Fatalf("err %v", resps[0].Err)
	}
	vals := make([]float32, 3000)
	for i := range vals {
		vals[i] = float32(i)
	}
	req := outputRequest(vals...)
	resps = execute(t, inst, req)
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), vals, 0)
	if inst.Restarts() != 0 {
		t.Errorf("the stub crashed and was restarted")
	}
}

// TestPollSettings runs batches with polling off (blocking reads on both
// sides) and on, and refuses a bad value naming the key.
func TestPollSettings(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	for _, c := range []struct {
		value string
		want  time.Duration
	}{{"0", 0}, {"2000", 2 * time.Millisecond}} {
		spec := probeSpec(t, 8)
		spec.BackendConfig[KeyPollMicros] = c.value
		inst := load(t, b, spec, 0)
		if got := inst.proc.ch.poll; got != c.want {
			t.Errorf("%s=%s: channel polls %v, want %v", KeyPollMicros, c.value, got, c.want)
		}
		for i := 0; i < 20; i++ {
			resps := execute(t, inst, probeRequest(float32(i)), probeRequest(1, 2))
			assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{float32(i)}, 0)
			assertClose(t, fp32Values(t, output(t, resps[1], "OUTPUT")), []float32{1, 2}, 0)
		}
	}
	err := loadErr(t, b, nil, map[string]string{KeyPollMicros: "-5"})
	if err == nil || !strings.Contains(err.Error(), `poll-microseconds="-5"`) {
		t.Fatalf("bad poll value: err %v", err)
	}
}

// TestRequestIDReachesModel: the client's request id is request_id() in
// model.py, and "" when it sent none.
func TestRequestIDReachesModel(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.Outputs = append(spec.Outputs, backend.TensorSpec{Name: "REQUEST_ID", DataType: backend.Bytes, Dims: []int64{1}})
	inst := load(t, b, spec, 0)
	withID := probeRequest(1)
	withID.ID = `req-"7"`
	resps := execute(t, inst, withID, probeRequest(2))
	for i, want := range []string{`req-"7"`, ""} {
		if got := bytesElems(t, output(t, resps[i], "REQUEST_ID")); len(got) != 1 || got[0] != want {
			t.Errorf("request %d: model saw request_id %q, want %q", i, got, want)
		}
	}
}

// TestServerOnlyCheckInsideStub: in a stub the module knows it runs in the
// server (the stub attaches itself before importing model.py, so even
// module-level code sees it), and a server-only call gets past the check.
func TestServerOnlyCheckInsideStub(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", `import triton_python_backend_utils as pb_utils
assert pb_utils.in_server(), "module level: not in the server"
class TritonPythonModel:
    def initialize(self, args):
        try:
            pb_utils.InferenceRequest(model_name="x").exec()
        except pb_utils.ServerOnlyError as e:
            raise AssertionError("the check failed inside the server: %s" % e)
        except pb_utils.TritonModelException:
            pass
    def execute(self, requests):
        return [pb_utils.InferenceResponse() for _ in requests]
`)
	load(t, b, spec, 0)
}

// restartFailsModel crashes on a negative input and cannot initialize
// while the file "broken" exists in its version directory: a stub that
// crashed and cannot come back until an operator fixes the model.
const restartFailsModel = `import os
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists("broken"):
            raise RuntimeError("the weights are gone")
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if x[0] < 0:
                os._exit(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x)]))
        return out
`

// waitHealthy waits until inst's health is what want says, failing the
// test after d.
func waitHealthy(t *testing.T, inst *Instance, want bool, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); (inst.Healthy() == nil) != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("instance healthy %v after %s, want %v (Healthy: %v)", !want, d, want, inst.Healthy())
		}
	}
}

// TestFailedRestartMakesInstanceUnhealthy is issue 17's case 9 at the
// instance: a stub that crashed (in a batch, or killed while idle) and
// cannot restart reports why through Healthy, so that the model is not
// ready; requests fail Unavailable meanwhile; once the model can start
// again a background retry brings the stub back without any request, and
// Healthy turns nil.
func TestFailedRestartMakesInstanceUnhealthy(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", restartFailsModel)
	inst := load(t, b, spec, 0)
	if err := inst.Healthy(); err != nil {
		t.Fatalf("a fresh instance: %v", err)
	}
	broken := spec.VersionDir + "/broken"
	for _, how := range []string{"crash in a batch", "killed while idle"} {
		t.Run(how, func(t *testing.T) {
			writeFile(t, broken, "")
			if how == "crash in a batch" {
				if _, err := inst.Execute(context.Background(), []*backend.Request{outputRequest(-1)}); err == nil {
					t.Fatal("execute survived os._exit")
				}
			} else if err := syscall.Kill(inst.PID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitHealthy(t, inst, false, 30*time.Second)
			if err := inst.Healthy(); !strings.Contains(err.Error(), "restarting the stub failed") || !strings.Contains(err.Error(), "the weights are gone") {
				t.Errorf("Healthy: %v", err)
			}
			_, err := inst.Execute(context.Background(), []*backend.Request{outputRequest(1)})
			if be := (*backend.Error)(nil); !errors.As(err, &be) || be.Code != backend.Unavailable {
				t.Errorf("a request while the stub cannot start: %v, want Unavailable", err)
			}
			if err := os.Remove(broken); err != nil {
				t.Fatal(err)
			}
			waitHealthy(t, inst, true, 60*time.Second) // no request needed
			if inst.PID() == 0 {
				t.Error("healthy without a running stub")
			}
			resps := execute(t, inst, outputRequest(5))
			assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{5}, 0)
		})
	}
}

// TestForkedProcessesEndWithStub: a process model.py started is killed
// when its stub ends, after finalize as after a crash.
func TestForkedProcessesEndWithStub(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	writeFile(t, spec.VersionDir+"/model.py", `import os, subprocess
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        child = subprocess.Popen(["sleep", "1000"])
        with open("child.pid", "a") as f:
            f.write("%d\n" % child.pid)
    def execute(self, requests):
        os._exit(9)
`)
	alive := func(pid int) bool {
		// A zombie is gone for our purpose: /proc/PID/stat says Z.
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err == nil && !strings.Contains(string(data), ") Z ")
	}
	pids := func() []int {
		data, _ := os.ReadFile(spec.VersionDir + "/child.pid")
		var out []int
		for _, l := range strings.Fields(string(data)) {
			n, _ := strconv.Atoi(l)
			out = append(out, n)
		}
		return out
	}
	inst := load(t, b, spec, 0)
	first := pids()
	if len(first) != 1 || !alive(first[0]) {
		t.Fatalf("child not started: %v", first)
	}
	// A crash in execute: the stub dies, its child with it.
	if _, err := inst.Execute(context.Background(), []*backend.Request{probeRequest(1)}); err == nil {
		t.Fatal("execute of a crashing model succeeded")
	}
	waitUntil(t, func() bool { return !alive(first[0]) }, "the crashed stub's child to end")
	// The restarted stub started another child; a clean unload ends it too.
	waitUntil(t, func() bool { return len(pids()) == 2 }, "the restart")
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	second := pids()[1]
	waitUntil(t, func() bool { return !alive(second) }, "the unloaded stub's child to end")
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestIsCancelledFollowsClient: request.is_cancelled() of an ordinary
// request turns true once its client's context ends while execute runs,
// and the next batch, reusing the byte, starts uncancelled.
func TestIsCancelledFollowsClient(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	writeFile(t, spec.VersionDir+"/model.py", `import time
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            wait = float(pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()[0])
            deadline = time.monotonic() + wait
            while not r.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)
            flag = np.array([1.0 if r.is_cancelled() else 0.0], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", flag)]))
        return out
`)
	inst := load(t, b, spec, 0)
	ctx, cancel := context.WithCancel(context.Background())
	req := outputRequest(30)
	req.Ctx = ctx
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	resps := execute(t, inst, req)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("execute took %v: the model never saw the cancellation", el)
	}
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{1}, 0)

	req = outputRequest(0)
	req.Ctx = context.Background()
	resps = execute(t, inst, req)
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{0}, 0)
}

// TestAbandonedBatchKeepsOffNextInputs: a batch whose caller gave up still
// runs in the stub, which writes its outputs where that batch's frame said.
// The next batch's inputs must not lie there: laid out from the region's
// start while the abandoned batch still ran, a larger batch had part of
// its inputs overwritten by the old outputs before the stub read them.
func TestAbandonedBatchKeepsOffNextInputs(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 0)
	writeFile(t, spec.VersionDir+"/model.py", `import time
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if x.flat[0] == -5:
                time.sleep(0.5)
                x = np.full(16384, 7, dtype=np.float32)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", x.copy())]))
        return out
`)
	inst := load(t, b, spec, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := inst.Execute(ctx, []*backend.Request{outputRequest(-5)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned batch: err %v", err)
	}
	vals := make([]float32, 32768)
	for i := range vals {
		vals[i] = 3
	}
	resps := execute(t, inst, outputRequest(vals...))
	if resps[0].Err != nil {
		t.Fatal(resps[0].Err)
	}
	got := fp32Values(t, output(t, resps[0], "OUTPUT"))
	for i, v := range got {
		if v != 3 {
			t.Fatalf("the next batch's input element %d reached the model as %v, not 3: the abandoned batch's outputs overwrote it", i, v)
		}
	}
}

// TestAbandonedHangRestartsForNextBatch: the next batch after an
// abandoned one that hangs waits out that batch's execute timeout, then
// runs on a restarted stub instead of failing for the old batch's sake.
func TestAbandonedHangRestartsForNextBatch(t *testing.T) {
	requirePython(t)
	b, logs := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.BackendConfig[KeyExecuteTimeout] = "1"
	inst := load(t, b, spec, 0)
	pid := inst.PID()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := inst.Execute(ctx, []*backend.Request{probeRequest(-2)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned batch: err %v", err)
	}
	resps := execute(t, inst, probeRequest(5))
	assertClose(t, fp32Values(t, output(t, resps[0], "OUTPUT")), []float32{5}, 0)
	if d := time.Since(start); d < time.Second {
		t.Errorf("the next batch ran %s after the hung one was sent, before its 1s timeout", d)
	}
	if inst.PID() == pid || alive(pid) {
		t.Errorf("hung stub %d not replaced (now %d)", pid, inst.PID())
	}
	if !strings.Contains(logs.String(), "whose caller had given up") {
		t.Errorf("no log of the abandoned batch's failure:\n%s", logs.String())
	}
}
