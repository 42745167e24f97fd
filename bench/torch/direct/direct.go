// Package direct measures the in-process cost of one TorchScript forward
// through runtime/torch, with no server in between: input descriptors, the
// single cgo call, libtorch's forward under InferenceMode and the copy of the
// outputs into Go memory. It is the "ceiling" a serving benchmark compares
// its per-request cost against, and the Go side of bench/torch.
//
// It needs a build with cgo and the libtorch tag (see runtime/torch); in
// other builds Measure returns an error carrying runtime/torch's NotBuiltMessage.
package direct

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

// Options describe one measurement.
type Options struct {
	// Model is a TorchScript file taking one FP32 [batch, Features] input.
	Model string
	// Features is the input width (10 for the report's simple_linear).
	Features int
	// Batches are the batch sizes to measure, in order.
	Batches []int
	// Threads is libtorch's intra-op thread count (default 1).
	Threads int
	// Number is the calls per timed repeat; Repeats the timed repeats (the
	// result is the median repeat); Warmup the untimed calls first.
	Number, Repeats, Warmup int
}

func (o *Options) defaults() {
	if o.Features <= 0 {
		o.Features = 10
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 8, 32}
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.Number <= 0 {
		o.Number = 2000
	}
	if o.Repeats <= 0 {
		o.Repeats = 5
	}
	if o.Warmup <= 0 {
		o.Warmup = 200
	}
}

// Result is the per-call time at one batch size.
type Result struct {
	Batch int
	// PerCall is the median over repeats of (wall time / Number).
	PerCall time.Duration
	// CPUPerCall is the same for the calling thread's CPU time, which a
	// busy machine inflates much less than wall time.
	CPUPerCall time.Duration
	Repeats    []time.Duration
	CPURepeats []time.Duration
}

// Measure loads the model once and times Forward at each batch size. The
// calling goroutine is locked to its OS thread for the duration so that
// libtorch's per-thread OpenMP setting stays put.
func Measure(opts Options) ([]Result, error) {
	mod, done, err := start(&opts)
	if err != nil {
		return nil, err
	}
	defer done()

	var results []Result
	for _, b := range opts.Batches {
		in, err := warm(mod, opts, b)
		if err != nil {
			return nil, err
		}
		r := Result{Batch: b}
		for rep := 0; rep < opts.Repeats; rep++ {
			cpu0, err := ThreadCPU()
			if err != nil {
				return nil, err
			}
			start := time.Now()
			for i := 0; i < opts.Number; i++ {
				if _, err := mod.Forward(in); err != nil {
					return nil, fmt.Errorf("forward at batch %d: %w", b, err)
				}
			}
			wall := time.Since(start)
			cpu1, err := ThreadCPU()
			if err != nil {
				return nil, err
			}
			r.Repeats = append(r.Repeats, wall/time.Duration(opts.Number))
			r.CPURepeats = append(r.CPURepeats, (cpu1-cpu0)/time.Duration(opts.Number))
		}
		r.PerCall = Median(r.Repeats)
		r.CPUPerCall = Median(r.CPURepeats)
		results = append(results, r)
	}
	return results, nil
}

// ThreadCPU is the CPU time the calling OS thread has used; callers lock
// the goroutine to its thread around the measurement.
func ThreadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("reading thread CPU time: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// Input is a deterministic FP32 [batch, features] tensor.
func Input(batch, features int) backend.Tensor {
	data := make([]byte, 4*batch*features)
	for i := 0; i < batch*features; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(math.Sin(float64(i)))))
	}
	return backend.Tensor{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{int64(batch), int64(features)}, Data: data}
}

// Median of ds (the upper one for an even count); 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Gap is what runs between two timed forwards in MeasureAfter.
type Gap struct {
	Name string
	Run  func()
}

// GapResult is the forward's per-call cost after one kind of gap: medians
// over calls of wall time and of the calling thread's CPU time (which
// leaves out time the thread was not running).
type GapResult struct {
	Gap       string
	Wall, CPU time.Duration
	CPUMean   time.Duration
	Calls     int
}

// MeasureAfter times single forwards at batch size batch, each after gap
// (nothing, sleeping, spinning, a loopback HTTP round trip...), on one
// locked OS thread. It shows what the forward costs when the core ran
// something else just before, as it does inside a server.
func MeasureAfter(opts Options, batch int, gaps []Gap) ([]GapResult, error) {
	mod, done, err := start(&opts)
	if err != nil {
		return nil, err
	}
	defer done()
	in, err := warm(mod, opts, batch)
	if err != nil {
		return nil, err
	}
	var out []GapResult
	for _, g := range gaps {
		walls := make([]time.Duration, 0, opts.Number)
		cpus := make([]time.Duration, 0, opts.Number)
		var sum time.Duration
		for i := 0; i < opts.Number; i++ {
			if g.Run != nil {
				g.Run()
			}
			c0, err := ThreadCPU()
			if err != nil {
				return nil, err
			}
			t0 := time.Now()
			if _, err := mod.Forward(in); err != nil {
				return nil, fmt.Errorf("forward at batch %d: %w", batch, err)
			}
			w := time.Since(t0)
			c1, err := ThreadCPU()
			if err != nil {
				return nil, err
			}
			walls = append(walls, w)
			cpus = append(cpus, c1-c0)
			sum += c1 - c0
		}
		out = append(out, GapResult{Gap: g.Name, Wall: Median(walls), CPU: Median(cpus), CPUMean: sum / time.Duration(opts.Number), Calls: opts.Number})
	}
	return out, nil
}

// start fills in opts' defaults, loads the model and locks the calling
// goroutine to its OS thread; done undoes both.
func start(opts *Options) (mod *torch.Module, done func(), err error) {
	opts.defaults()
	mod, err = torch.LoadModule(torch.ModuleOptions{Path: opts.Model, IntraOpThreads: opts.Threads})
	if err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", opts.Model, err)
	}
	runtime.LockOSThread()
	return mod, func() {
		runtime.UnlockOSThread()
		mod.Close()
	}, nil
}

// warm runs opts.Warmup forwards at batch size b and returns the input.
func warm(mod *torch.Module, opts Options, b int) ([]backend.Tensor, error) {
	in := []backend.Tensor{Input(b, opts.Features)}
	for i := 0; i < opts.Warmup; i++ {
		if _, err := mod.Forward(in); err != nil {
			return nil, fmt.Errorf("forward at batch %d: %w", b, err)
		}
	}
	return in, nil
}
