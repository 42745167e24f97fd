package python

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// spanModel is a model.py whose execute keeps its thread busy (busy) or
// sleeps (otherwise) for 2 ms and answers each request with the execute's
// start and end on CLOCK_MONOTONIC, which every process shares, so the
// test can tell which executes of different stubs overlapped.
const spanModel = `import time
import numpy as np
import triton_python_backend_utils as pb_utils

BUSY = %s


class TritonPythonModel:
    def execute(self, requests):
        t0 = time.monotonic()
        if BUSY:
            end = time.thread_time() + 0.002
            while time.thread_time() < end:
                pass
        else:
            time.sleep(0.002)
        span = np.array([t0, time.monotonic()], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SPAN", span)]) for _ in requests]
`

// pinnedSpec writes spanModel and an interpreter that runs python on CPU 0
// alone, so that four stubs contend for one core on any machine.
func pinnedSpec(t *testing.T, busy bool) *backend.ModelSpec {
	t.Helper()
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) is needed to pin the stubs to one core: %v", err)
	}
	repo := t.TempDir()
	dir := filepath.Join(repo, "span")
	mode := "False"
	if busy {
		mode = "True"
	}
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "1", "model.py"), fmt.Sprintf(spanModel, mode))
	wrapper := filepath.Join(repo, "python-on-cpu0")
	script := fmt.Sprintf("#!/bin/sh\nexec %s -c 0 %s \"$@\"\n", taskset, systemPython)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &backend.ModelSpec{
		Name: "span", Version: 1, ModelDir: dir, VersionDir: filepath.Join(dir, "1"), Repository: repo,
		Filename:      "model.py",
		Inputs:        []backend.TensorSpec{{Name: "INPUT", DataType: backend.FP32, Dims: []int64{1}}},
		Outputs:       []backend.TensorSpec{{Name: "SPAN", DataType: backend.FP64, Dims: []int64{2}}},
		Parameters:    map[string]string{},
		BackendConfig: map[string]string{KeyInterpreter: wrapper},
	}
}

// spanLoad drives 16 clients through s and collects the executes' spans
// (deduplicated: a batch answers each of its requests with one span).
type spanLoad struct {
	mu    sync.Mutex
	spans map[[2]float64]bool
	err   error
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startSpanLoad(s *scheduler.Scheduler) *spanLoad {
	l := &spanLoad{spans: map[[2]float64]bool{}, stop: make(chan struct{})}
	for range 16 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// One request per client: the scheduler sets a request's
			// context as it executes it.
			req := &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{1}, 1)}}
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := s.Infer(context.Background(), req)
				if err == nil {
					err = resp.Err
				}
				if err == nil && (len(resp.Outputs) != 1 || len(resp.Outputs[0].Data) != 16) {
					err = fmt.Errorf("response %+v: want SPAN, two FP64", resp.Outputs)
				}
				l.mu.Lock()
				if err != nil {
					l.err = err
					l.mu.Unlock()
					return
				}
				d := resp.Outputs[0].Data
				l.spans[[2]float64{
					math.Float64frombits(binary.LittleEndian.Uint64(d)),
					math.Float64frombits(binary.LittleEndian.Uint64(d[8:])),
				}] = true
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// take returns the spans so far and starts a new collection.
func (l *spanLoad) take() ([][2]float64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][2]float64
	for s := range l.spans {
		out = append(out, s)
	}
	clear(l.spans)
	slices.SortFunc(out, func(a, b [2]float64) int {
		if a[0] < b[0] {
			return -1
		}
		if a[0] > b[0] {
			return 1
		}
		return 0
	})
	return out, l.err
}

func (l *spanLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// overlaps returns how many spans overlap no other, and the most spans
// that were open at one moment.
func overlaps(spans [][2]float64) (alone, most int) {
	for i, a := range spans {
		open, solo := 1, true
		for j, b := range spans {
			if i != j && b[0] < a[1] && a[0] < b[1] {
				solo = false
				if b[0] <= a[0] {
					open++ // b was open when a started
				}
			}
		}
		if solo {
			alone++
		}
		most = max(most, open)
	}
	return alone, most
}

func loadScheduler(t *testing.T, spec *backend.ModelSpec) *scheduler.Scheduler {
	t.Helper()
	b, _ := newTestBackend(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := scheduler.New(ctx, b, spec, scheduler.Config{Name: spec.Name, Version: spec.Version, Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestCPUBoundStubsConcentrate: four real stubs of a model that keeps its
// core busy, all on one core, under sixteen clients: once the scheduler
// has read their run-queue waits from schedstat, one executes at a time
// (execute-concurrency=auto) instead of four taking turns on the core.
func TestCPUBoundStubsConcentrate(t *testing.T) {
	requirePython(t)
	s := loadScheduler(t, pinnedSpec(t, true))
	load := startSpanLoad(s)
	defer load.end()
	deadline := time.Now().Add(10 * time.Second)
	for s.Active() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s.Active() != 1 {
		t.Fatalf("Active() = %d after 10s of four busy stubs on one core, want 1", s.Active())
	}
	// Probes for a second stub come ever more seldom: after the first
	// failure, one window in eleven or fewer.
	time.Sleep(2 * time.Second)
	if _, err := load.take(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	spans, err := load.take()
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := overlaps(spans)
	t.Logf("%d of %d executes in a second ran alone", alone, len(spans))
	// Four stubs taking turns on the one core overlap nearly always. Concentrated,
	// the probes for a second stub overlap some: on a machine busy with
	// other test packages 69.5% ran alone once, so the bar is 60%.
	if len(spans) < 50 || alone*10 < len(spans)*6 {
		t.Fatalf("%d of %d executes in a second ran alone once concentrated, want at least 60%% of 50 or more", alone, len(spans))
	}
}

// TestSleepingStubsAllExecute: the same four stubs on one core, of a model
// that sleeps in execute, keep executing four at a time, as under Triton.
// So does a busy model under execute-concurrency=all.
func TestSleepingStubsAllExecute(t *testing.T) {
	requirePython(t)
	busyAll := pinnedSpec(t, true)
	busyAll.BackendConfig[KeyExecuteConcurrency] = "all"
	for name, spec := range map[string]*backend.ModelSpec{"sleeping": pinnedSpec(t, false), "busy, execute-concurrency=all": busyAll} {
		t.Run(name, func(t *testing.T) {
			s := loadScheduler(t, spec)
			load := startSpanLoad(s)
			time.Sleep(1500 * time.Millisecond)
			spans, err := load.take()
			active := s.Active()
			load.end()
			if err != nil {
				t.Fatal(err)
			}
			_, most := overlaps(spans)
			if active != 4 || most != 4 {
				t.Fatalf("Active() = %d, at most %d of %d executes at once: want 4 and 4", active, most, len(spans))
			}
		})
	}
}

// TestExecCPUReadsTheStub: an instance reports its stub's main-thread CPU
// from schedstat, growing by at least the thread time its execute spent;
// under execute-concurrency=all it reports none, and a bad value of the
// setting fails the load naming it.
func TestExecCPUReadsTheStub(t *testing.T) {
	requirePython(t)
	b, _ := newTestBackend(t, Options{})
	spec := pinnedSpec(t, true)
	inst := load(t, b, spec, 0)
	run0, _, ok := inst.ExecCPU()
	if !ok {
		t.Fatal("ExecCPU: no figures for a running stub (is /proc/<pid>/schedstat missing?)")
	}
	execute(t, inst, &backend.Request{Inputs: []backend.Tensor{fp32Tensor("INPUT", []int64{1}, 1)}})
	run1, _, ok := inst.ExecCPU()
	if !ok || run1-run0 < 2*time.Millisecond {
		t.Fatalf("ExecCPU grew by %v (ok %v) over an execute that spent 2ms of thread time", run1-run0, ok)
	}

	all := pinnedSpec(t, true)
	all.BackendConfig[KeyExecuteConcurrency] = "all"
	if _, _, ok := load(t, b, all, 0).ExecCPU(); ok {
		t.Error("ExecCPU reported figures under execute-concurrency=all")
	}
	err := loadErr(t, b, nil, map[string]string{KeyExecuteConcurrency: "some"})
	if err == nil || !strings.Contains(err.Error(), `python,execute-concurrency="some": want auto or all`) {
		t.Errorf("a bad value: %v", err)
	}
}
