package python

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// systemPython is the interpreter with numpy (and torch) that the tests use.
const systemPython = "/usr/bin/python3"

// requirePython ends the test (testenv: skip here, fail in CI) when the
// system interpreter cannot run the stub at all.
func requirePython(t *testing.T) {
	t.Helper()
	testenv.NeedPython(t, systemPython, "numpy")
}

// requireTorch fails (does not skip) without torch: CI installs
// python3-torch, and the report's model needs it.
func requireTorch(t *testing.T) {
	t.Helper()
	requirePython(t)
	if out, err := exec.Command(systemPython, "-c", "import torch").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch (install python3-torch): %v\n%s", systemPython, err, out)
	}
}

// logBuffer collects log output safely across goroutines and after the test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// newTestBackend returns a backend with a private cache and a captured log
// that is printed when the test fails.
func newTestBackend(t *testing.T, opts Options) (*Backend, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if opts.EnvRoots == nil {
		// Tests pack their envs in temporary directories of their own.
		opts.EnvRoots = []string{os.TempDir()}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("backend log:\n%s", logs.String())
		}
	})
	return New(opts), logs
}

// copyTree copies a testdata directory so tests can add files to it.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// probeSpec describes testdata/models/probe copied into a temp repository.
func probeSpec(t *testing.T, maxBatch int) *backend.ModelSpec {
	t.Helper()
	repo := t.TempDir()
	copyTree(t, "testdata/models", repo)
	dir := filepath.Join(repo, "probe")
	return &backend.ModelSpec{
		Name:         "probe",
		Version:      1,
		ModelDir:     dir,
		VersionDir:   filepath.Join(dir, "1"),
		Repository:   repo,
		Filename:     "model.py",
		MaxBatchSize: maxBatch,
		Inputs: []backend.TensorSpec{
			{Name: "INPUT", DataType: backend.FP32, Dims: []int64{-1}},
			{Name: "TEXT", DataType: backend.Bytes, Dims: []int64{-1}, Optional: true},
		},
		Outputs: []backend.TensorSpec{
			{Name: "OUTPUT", DataType: backend.FP32, Dims: []int64{-1}},
			{Name: "BATCH", DataType: backend.Int64, Dims: []int64{1}},
			{Name: "CWD", DataType: backend.Bytes, Dims: []int64{1}},
		},
		Parameters:    map[string]string{},
		BackendConfig: map[string]string{},
	}
}

func load(t *testing.T, b *Backend, spec *backend.ModelSpec, idx int) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := b.NewInstance(ctx, spec, idx)
	if err != nil {
		t.Fatalf("NewInstance: %v", err)
	}
	t.Cleanup(func() { inst.Close() })
	return inst.(*Instance)
}

func fp32Tensor(name string, shape []int64, vals ...float32) backend.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return backend.Tensor{Name: name, DataType: backend.FP32, Shape: shape, Data: data}
}

func fp32Values(t *testing.T, tensor backend.Tensor) []float32 {
	t.Helper()
	if tensor.DataType != backend.FP32 {
		t.Fatalf("tensor %s is %s, want FP32", tensor.Name, tensor.DataType)
	}
	out := make([]float32, len(tensor.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(tensor.Data[4*i:]))
	}
	return out
}

func bytesTensor(name string, elems ...string) backend.Tensor {
	var data []byte
	for _, e := range elems {
		data = binary.LittleEndian.AppendUint32(data, uint32(len(e)))
		data = append(data, e...)
	}
	return backend.Tensor{Name: name, DataType: backend.Bytes, Shape: []int64{int64(len(elems))}, Data: data}
}

func bytesElems(t *testing.T, tensor backend.Tensor) []string {
	t.Helper()
	var out []string
	data := tensor.Data
	for len(data) > 0 {
		n := binary.LittleEndian.Uint32(data)
		out = append(out, string(data[4:4+n]))
		data = data[4+n:]
	}
	return out
}

func output(t *testing.T, r *backend.Response, name string) backend.Tensor {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("response error: %v", r.Err)
	}
	for _, o := range r.Outputs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("response has no output %s (has %d outputs)", name, len(r.Outputs))
	return backend.Tensor{}
}

func execute(t *testing.T, inst *Instance, reqs ...*backend.Request) []*backend.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resps, err := inst.Execute(ctx, reqs)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if len(resps) != len(reqs) {
		t.Fatalf("%d responses for %d requests", len(resps), len(reqs))
	}
	return resps
}

// stubChildren returns the pids of this process's children running the stub.
func stubChildren(t *testing.T) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	out := map[int]bool{}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid ...
		rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
		var state string
		var ppid int
		if _, err := fmt.Sscan(rest, &state, &ppid); err != nil || ppid != self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), stubScript) && state != "Z" {
			out[pid] = true
		}
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
	return !strings.HasPrefix(rest, "Z")
}
