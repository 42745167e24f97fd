// Command pythonbench compares the python backend (runtime/python: a stub
// process per instance, tensors through shared memory) with the pytorch
// backend (runtime/torch: libtorch in process through cgo) on the report's
// simple_linear model, in one run, at several client concurrencies.
//
// Both backends are driven through the server's scheduler (no HTTP): C
// client goroutines each send one-row requests ([1,10] FP32) to the model's
// instances and time each call, queueing for a free instance included. Both
// run torch with one intra-op thread (INTRA_OP_THREAD_COUNT=1 for pytorch,
// OMP_NUM_THREADS=1 in the stub's environment). The python side runs the
// report's model.py unchanged. A third row, "model.py direct", times the
// same model.py execute() called in a plain Python loop (no server, no
// transport): the floor under the python backend.
//
// Usage (from the repository root):
//
//	runtime/csrc/build.sh /tmp/tbtorch
//	CGO_LDFLAGS="-L/tmp/tbtorch -Wl,-rpath,/tmp/tbtorch" go run -tags libtorch ./bench/python
//
// Without -tags libtorch the pytorch row is skipped and the python backend
// is compared with the direct row only.
//
// Each level runs twice: one request per Execute, and with the dynamic
// batcher and no queue delay (each instance takes every request already
// waiting, up to -max-batch).
//
// Flags: -concurrency 1,16, -instances 1, -requests 4000 (per row and
// round), -rounds 3, -max-batch 32, -unbatched (false: only the batched
// rows), -python /usr/bin/python3, -stub-scheduling auto|batch|normal
// (the python backend's stub-scheduling; empty keeps its default, auto).
//
// After the table, each batched level gets a floor from the same run: the
// least mean latency its clients could see if the machine's cores did
// nothing but the stub's own work on a batch, timed in a loop by
// stubparts.py, and the pytorch row's CPU per request for the server's
// share. The python row's mean latency is printed as a multiple of it,
// and each goal line gives the floor's distance from the pytorch p50,
// so a goal below the floor shows as out of this machine's reach. A
// second floor takes model.py's execute alone in place of the stub's
// whole work (no frame to parse, no requests to build, no outputs to
// write): what no server running this model.py on this machine could
// beat, whatever its transport and stub cost.
//
// Beside latency and throughput each row gives the requests per Execute
// and the CPU time per request of the peer's processes (this one, plus the
// stubs for the python backend, with the stubs' part apart): on a shared
// machine CPU per request moves much less with other load than latency.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/goals"
	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/heapfloor"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/python"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

func main() {
	conc := flag.String("concurrency", "1,16", "client concurrency levels")
	instances := flag.Int("instances", 1, "model instances per backend")
	requests := flag.Int("requests", 4000, "requests per level, backend and round")
	rounds := flag.Int("rounds", 3, "rounds (medians are reported)")
	maxBatch := flag.Int("max-batch", 32, "also measure with a greedy dynamic batcher up to this size (1: off)")
	unbatched := flag.Bool("unbatched", true, "measure one request per Execute as well (false: only the batched rows the goals use, e.g. to profile them)")
	py := flag.String("python", "/usr/bin/python3", "interpreter with torch and numpy")
	pollUs := flag.Int("poll-us", 0, "python backend poll-microseconds (0: the backend's default, negative: off)")
	seed := flag.String("seed", "runtime/python/testdata/seed-model-repository-batched", "the report's batched repository (or another simple_linear of the same tensors, e.g. bench/python/testdata/batched-forward)")
	makeModel := flag.String("make-model", "runtime/python/testdata/make_model.py", "the script that writes simple_linear's model.pt (the report's model)")
	goals := flag.Bool("goals", true, "check issue 18's python backend goals and exit 1 when one misses")
	sched := flag.String("stub-scheduling", "", "python backend stub-scheduling: auto, batch or normal (empty: the backend's default, auto)")
	warm := flag.Duration("warm", time.Second, "untimed load before each measurement, so that the scheduler has settled where the load keeps it")
	execConc := flag.String("execute-concurrency", "", "python backend execute-concurrency: auto or all (empty: the backend's default, auto)")
	batching := flag.String("batching", "greedy", "the batched rows' dynamic batcher: greedy (no queue delay, up to -max-batch) or config (the seed config's preferred sizes and queue delay)")
	slots := flag.Int("exec-slots", 0, "run under Triton's rate limiter, every instance needing one copy of a resource that has this many (--rate-limit=execution_count --rate-limit-resource=cpu:N); 0: no rate limiter")
	stubCPUs := flag.String("stub-cpus", "", "confine the python stubs to these CPUs (a CPU list, e.g. 1 or 2-3), as tritonserver --host-policy=cpu,cpu-cores=<list> does; run the bench under taskset on other CPUs to keep the server's threads off them")
	cpuProfile := flag.String("cpuprofile", "", "write a Go CPU profile of the python backend's batched rows at the highest concurrency (the first round) to this file, so that the server's share of a goal row can be read apart from the rest of the run")
	heapFloor := flag.Int64("gc-heap-floor", heapfloor.DefaultBytes, "the process's Go heap floor in bytes, as tritonserver's --gc-heap-floor-byte-size (0: GOGC=100 pacing)")
	flag.Parse()
	if *heapFloor < 0 {
		log.Fatalf("-gc-heap-floor %d: must not be negative", *heapFloor)
	}
	// The server in this process paces its collector as tritonserver does.
	_, how := heapfloor.Start(uint64(*heapFloor))
	fmt.Printf("collector: %s\n", how)
	if *batching != "greedy" && *batching != "config" {
		log.Fatalf("-batching %q: want greedy or config", *batching)
	}
	if *warm < 0 {
		log.Fatalf("-warm %v: must not be negative", *warm)
	}
	if *slots < 0 {
		log.Fatalf("-exec-slots %d: want 0 (off) or a positive count", *slots)
	}
	var cpus []int
	if *stubCPUs != "" {
		var err error
		if cpus, err = backend.ParseCPUList(*stubCPUs); err != nil {
			log.Fatalf("-stub-cpus: %v", err)
		}
	}
	// The python backend's settings beyond the interpreter, as
	// --backend-config=python,<key>=<value> would give them.
	pyConfig := map[string]string{}
	if *sched != "" {
		pyConfig[python.KeyStubScheduling] = *sched
	}
	if *execConc != "" {
		pyConfig[python.KeyExecuteConcurrency] = *execConc
	}
	missed, err := run(options{
		conc: *conc, instances: *instances, requests: *requests, rounds: *rounds, maxBatch: *maxBatch, unbatched: *unbatched,
		py: *py, seed: *seed, makeModel: *makeModel, poll: time.Duration(*pollUs) * time.Microsecond, pyConfig: pyConfig,
		configBatching: *batching == "config", slots: *slots, warm: *warm, stubCPUs: cpus, cpuProfile: *cpuProfile,
	})
	if err != nil {
		log.Fatal(err)
	}
	if *goals && missed > 0 {
		fmt.Fprintf(os.Stderr, "pythonbench: %d goal(s) missed\n", missed)
		os.Exit(1)
	}
}

type result struct {
	p50, p99   time.Duration
	throughput float64       // requests per second
	batch      float64       // requests per Execute
	cpu        time.Duration // CPU time per request, every process of the peer
	execute    time.Duration // time inside the backend's Execute per request (wall)
	stubCPU    time.Duration // the part of cpu spent in the python backend's stubs
	active     int           // instances the scheduler let execute at once at the end
}

// options are the command's flags.
type options struct {
	conc                        string
	instances, requests, rounds int
	maxBatch                    int
	unbatched                   bool
	py, seed, makeModel         string
	poll                        time.Duration
	pyConfig                    map[string]string // python backend settings beyond the interpreter
	configBatching              bool
	slots                       int
	warm                        time.Duration // untimed load before each measurement
	stubCPUs                    []int         // the python stubs' host policy CPUs; nil: any
	cpuProfile                  string        // where to write the goal row's CPU profile; "": none
}

func run(o options) (int, error) {
	concList, instances, requests, rounds, maxBatch, unbatched := o.conc, o.instances, o.requests, o.rounds, o.maxBatch, o.unbatched
	py, seed, makeModel, poll, pyConfig, configBatching, slots := o.py, o.seed, o.makeModel, o.poll, o.pyConfig, o.configBatching, o.slots
	levels, err := sweep.Levels(concList)
	if err != nil {
		return 0, fmt.Errorf("-concurrency: %w", err)
	}
	work, err := os.MkdirTemp("", "pythonbench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	modelDir := filepath.Join(work, "simple_linear")
	for _, f := range []string{"config.pbtxt", "1/model.py"} {
		data, err := os.ReadFile(filepath.Join(seed, "simple_linear", f))
		if err != nil {
			return 0, fmt.Errorf("reading the seed repository (run from the repository root or pass -seed): %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(modelDir, f)), 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(modelDir, f), data, 0o644); err != nil {
			return 0, err
		}
	}
	if out, err := exec.Command(py, makeModel, filepath.Join(modelDir, "1", "model.pt")).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("make_model.py: %w\n%s", err, out)
	}
	// The config as the server hands it to the backends, with this run's
	// instance count (the python backend's stub-scheduling reads it).
	mc, err := modelconfig.LoadFile(filepath.Join(modelDir, "config.pbtxt"))
	if err != nil {
		return 0, err
	}
	mc.InstanceGroup = []*modelconfig.ModelInstanceGroup{{Kind: modelconfig.ModelInstanceGroup_KIND_CPU, Count: int32(instances)}}
	configJSON := modelconfig.JSON(mc)
	batched := &scheduler.Dynamic{}
	if configBatching {
		db := mc.GetDynamicBatching()
		batched.MaxQueueDelay = time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond
		for _, p := range db.GetPreferredBatchSize() {
			batched.PreferredBatchSizes = append(batched.PreferredBatchSizes, int(p))
		}
		maxBatch = int(mc.GetMaxBatchSize())
	}
	config := map[string]string{python.KeyInterpreter: py}
	maps.Copy(config, pyConfig)
	spec := func(file string) *backend.ModelSpec {
		return &backend.ModelSpec{
			Name: "simple_linear", Version: 1, ModelDir: modelDir, VersionDir: filepath.Join(modelDir, "1"),
			Repository: work, Filename: file, MaxBatchSize: 32,
			Inputs:        []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.FP32, Dims: []int64{10}}},
			Outputs:       []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.FP32, Dims: []int64{5}}},
			Parameters:    map[string]string{torch.ParamIntraOpThreads: "1"},
			BackendConfig: config,
			ConfigJSON:    configJSON,
		}
	}
	if err := os.Setenv("OMP_NUM_THREADS", "1"); err != nil { // inherited by the stubs
		return 0, err
	}
	ctx := context.Background()

	type peer struct {
		name  string
		insts []backend.Instance
	}
	var peers []peer
	pyb := python.New(python.Options{CacheDir: filepath.Join(work, "cache"), Poll: poll})
	var pyInsts []backend.Instance
	pySpec := spec("model.py")
	if o.stubCPUs != nil {
		for range instances {
			pySpec.InstancePolicies = append(pySpec.InstancePolicies, backend.HostPolicy{CPUs: o.stubCPUs})
		}
		fmt.Printf("python stubs confined to CPUs %v (host policy)\n", o.stubCPUs)
	}
	for i := 0; i < instances; i++ {
		inst, err := pyb.NewInstance(ctx, pySpec, i)
		if err != nil {
			return 0, err
		}
		defer inst.Close()
		pyInsts = append(pyInsts, inst)
	}
	peers = append(peers, peer{"python backend", pyInsts})
	if torch.Available {
		tb := torch.New(torch.Options{})
		var tInsts []backend.Instance
		for i := 0; i < instances; i++ {
			inst, err := tb.NewInstance(ctx, spec("model.pt"), i)
			if err != nil {
				return 0, err
			}
			defer inst.Close()
			tInsts = append(tInsts, inst)
		}
		peers = append(peers, peer{"pytorch backend", tInsts})
	} else {
		fmt.Println("note: built without -tags libtorch: no pytorch row; the peer is model.py called directly")
	}

	x := make([]byte, 40)
	for i := 0; i < 10; i++ {
		binary.LittleEndian.PutUint32(x[4*i:], math.Float32bits(float32(math.Sin(float64(i)))))
	}
	req := func() *backend.Request {
		return &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{1, 10}, Data: x}}}
	}
	// Warm up and check that both answer the same.
	var first []byte
	for _, p := range peers {
		for _, inst := range p.insts {
			for i := 0; i < 200; i++ {
				resps, err := inst.Execute(ctx, []*backend.Request{req()})
				if err != nil || resps[0].Err != nil {
					return 0, fmt.Errorf("%s: warmup: %w %v", p.name, err, resps)
				}
				if first == nil {
					first = resps[0].Outputs[0].Data
				} else if !closeF32(first, resps[0].Outputs[0].Data) {
					return 0, fmt.Errorf("%s answers differently", p.name)
				}
			}
		}
	}

	type key struct {
		peer  string
		batch int
		conc  int
	}
	var modes []int
	if unbatched || maxBatch <= 1 {
		modes = append(modes, 1)
	}
	if maxBatch > 1 {
		modes = append(modes, maxBatch)
	}
	results := map[key][]result{}
	prof := &rowProfile{path: o.cpuProfile}
	defer prof.stop()
	for r := 0; r < rounds; r++ {
		for _, mb := range modes {
			for _, c := range levels {
				for _, p := range peers {
					profiled := r == 0 && p.insts[0] == pyInsts[0] && mb == maxBatch && maxBatch > 1 && c == levels[len(levels)-1]
					if profiled {
						if err := prof.start(); err != nil {
							return 0, err
						}
					}
					res, err := measure(ctx, p.insts, spec("model.py"), c, requests, mb, batched, slots, o.warm, req)
					if profiled {
						prof.stop()
					}
					if err != nil {
						return 0, fmt.Errorf("%s: %w", p.name, err)
					}
					k := key{p.name, mb, c}
					results[k] = append(results[k], res)
				}
			}
		}
	}
	direct, err := directBaseline(py, modelDir, requests)
	if err != nil {
		return 0, err
	}

	fmt.Printf("simple_linear, one-row requests, %d instance(s) per backend, %d requests x %d rounds per row (medians of rounds)\n",
		instances, requests, rounds)
	fmt.Printf("machine: %s\n", machine.WakeUps())
	how := "greedy (no queue delay)"
	if configBatching {
		how = fmt.Sprintf("the seed config's: preferred sizes %v, queue delay %v", batched.PreferredBatchSizes, batched.MaxQueueDelay)
	}
	fmt.Printf("batched rows: dynamic batcher %s", how)
	if slots > 0 {
		fmt.Printf("; rate limiter: each instance needs 1 of %d copies of cpu", slots)
	}
	fmt.Println()
	fmt.Printf("%-16s %9s %5s %10s %10s %12s %10s %10s %9s %7s\n", "peer", "max batch", "conc", "p50 us", "p99 us", "req/s", "reqs/exec", "CPU us/req", "in stubs", "active")
	med := map[key]result{}
	for _, mb := range modes {
		for _, c := range levels {
			for _, p := range peers {
				k := key{p.name, mb, c}
				m := median(results[k])
				med[k] = m
				fmt.Printf("%-16s %9d %5d %10.1f %10.1f %12.0f %10.1f %10.1f %9.1f %7d\n", p.name, mb, c, us(m.p50), us(m.p99), m.throughput, m.batch, us(m.cpu), us(m.stubCPU), m.active)
			}
		}
	}
	fmt.Printf("%-16s %9d %5d %10.1f %10s %12.0f\n", "model.py direct", 1, 1, us(direct), "-", 1/direct.Seconds())
	for _, mb := range modes {
		for _, c := range levels {
			p := med[key{"python backend", mb, c}]
			t, ok := med[key{"pytorch backend", mb, c}]
			if !ok {
				continue
			}
			fmt.Printf("max batch %2d, conc %2d: python - pytorch: p50 %+.1f us (ratio %.1f), time per request %+.1f us (from throughput)\n",
				mb, c, us(p.p50-t.p50), float64(p.p50)/float64(t.p50), 1e6*(1/p.throughput-1/t.throughput))
		}
	}
	if one, ok := med[key{"python backend", modes[0], 1}]; ok {
		fmt.Printf("conc 1, max batch %d: python backend - model.py direct: p50 %+.1f us per request\n", modes[0], us(one.p50-direct))
	}
	missed := 0
	if torch.Available && maxBatch > 1 {
		// The floor under each batched level, from this run's own figures.
		sizes := map[int]bool{}
		for _, c := range levels {
			sizes[bestBatch(c, maxBatch)] = true
			sizes[max(1, int(math.Round(med[key{"python backend", maxBatch, c}].batch)))] = true
		}
		times, err := stubLoop(py, filepath.Join(modelDir, "1", "model.py"), slices.Sorted(maps.Keys(sizes)))
		if err != nil {
			return 0, err
		}
		loop := times.execute
		cores := runtime.NumCPU()
		floorOver, modelOver := map[int]time.Duration{}, map[int]time.Duration{}
		fmt.Printf("floor: the least mean latency the python backend could have on %d cores, from this run: the stub's own work on a batch in a loop (bench/python/stubparts.py) plus the pytorch row's CPU per request for the server's share\n", cores)
		for _, c := range levels {
			p, t := med[key{"python backend", maxBatch, c}], med[key{"pytorch backend", maxBatch, c}]
			best, seen := bestBatch(c, maxBatch), max(1, int(math.Round(p.batch)))
			fl := floorLatency(c, best, loop[best], t.cpu, t.p50, cores, instances)
			floorOver[c] = fl - t.p50
			// What no server of this model.py goes below: its execute
			// alone, with no stub framework and no transport at all, and
			// the pytorch row's CPU without its Execute (the forward,
			// which model.py runs itself; wall time, so if anything more
			// than its CPU and the floor lower).
			share := max(t.cpu-t.execute, 0)
			bare := floorLatency(c, best, times.model[best], share, t.p50, cores, instances)
			modelOver[c] = bare - t.p50
			mean := time.Duration(float64(c) / p.throughput * float64(time.Second))
			fmt.Printf("  conc %2d: floor %.1f us at batches of %d (loop %.1f us a batch), %.1f us at this row's %d; python mean latency %.1f us (conc/throughput): %.2fx the floor\n",
				c, us(fl), best, us(loop[best]), us(floorLatency(c, seen, loop[seen], t.cpu, t.p50, cores, instances)), seen, us(mean), float64(mean)/float64(fl))
			fmt.Printf("           model.py alone: %.1f us at batches of %d (its execute %.1f us a batch, none of the stub's work, no transport; the server's share %.1f us a request, the pytorch row's CPU less its Execute)\n",
				us(bare), best, us(times.model[best]), us(share))
		}
		limit := goals.PythonOverPytorch(instances)
		fmt.Printf("goals (issue 18), %d instance(s), dynamic batching:\n", instances)
		for _, c := range levels {
			over := med[key{"python backend", maxBatch, c}].p50 - med[key{"pytorch backend", maxBatch, c}].p50
			verdict := "met"
			if over > limit {
				verdict = "MISSED"
				missed++
			}
			fmt.Printf("  python backend p50 over pytorch, conc %2d: %+8.1f us <= %.0f us  %s (the floor's mean is %+.1f us over pytorch's p50, model.py alone %+.1f us)\n",
				c, us(over), us(limit), verdict, us(floorOver[c]), us(modelOver[c]))
		}
	}
	fmt.Printf("load average at the end: %s\n", machine.LoadAvg())
	return missed, nil
}

// pool lends loaded instances to a scheduler; closing the scheduler leaves
// them loaded for the next measurement. It counts the Execute calls, so
// the table can say how many requests each batch held, and sums the time
// they took.
type pool struct {
	insts    []backend.Instance
	executes atomic.Int64
	busy     atomic.Int64 // nanoseconds inside Execute, all instances
}

func (p *pool) NewInstance(_ context.Context, _ *backend.ModelSpec, idx int) (backend.Instance, error) {
	l := lent{p.insts[idx], p}
	if _, ok := l.Instance.(scheduler.CPUMeter); ok {
		return meteredLent{l}, nil
	}
	return l, nil
}

type lent struct {
	backend.Instance
	p *pool
}

func (l lent) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	l.p.executes.Add(1)
	start := time.Now()
	defer func() { l.p.busy.Add(int64(time.Since(start))) }()
	return l.Instance.Execute(ctx, reqs)
}

func (lent) Close() error { return nil }

// meteredLent lends an instance that reports its CPU (a python stub), so
// that the scheduler concentrates its executes as the server's would.
type meteredLent struct{ lent }

func (l meteredLent) ExecCPU() (run, wait time.Duration, ok bool) {
	return l.Instance.(scheduler.CPUMeter).ExecCPU()
}

// measure runs requests calls from c client goroutines through the server's
// own scheduler (runtime/scheduler) over the instances: each request goes to
// an idle instance or waits in the queue; when maxBatch > 1 the dynamic
// batcher dyn (with no queue delay: every request already waiting, up to
// maxBatch) groups requests into one Execute. With slots > 0 each
// instance executes only while it holds one of slots copies of a rate
// limiter resource. Before the timed requests, the clients send untimed
// ones for warm.
func measure(ctx context.Context, insts []backend.Instance, spec *backend.ModelSpec, c, requests, maxBatch int, dyn *scheduler.Dynamic, slots int, warm time.Duration, req func() *backend.Request) (result, error) {
	cfg := scheduler.Config{Name: spec.Name, Version: spec.Version, MaxBatchSize: spec.MaxBatchSize, Instances: len(insts)}
	if maxBatch > 1 {
		cfg.MaxBatchSize = maxBatch
		cfg.Dynamic = dyn
	}
	if slots > 0 {
		rl, err := scheduler.NewRateLimiter([]string{fmt.Sprintf("cpu:%d", slots)})
		if err != nil {
			return result{}, err
		}
		cfg.RateLimiter = rl
		for range insts {
			cfg.Limits = append(cfg.Limits, scheduler.InstanceLimit{Resources: []scheduler.Resource{{Name: "cpu", Count: 1}}})
		}
	}
	lender := &pool{insts: insts}
	s, err := scheduler.New(ctx, lender, spec, cfg)
	if err != nil {
		return result{}, err
	}
	defer s.Close(ctx)
	// CPU per request counts this process (clients, scheduler, the
	// pytorch backend's forwards) and the python backend's stubs.
	pids := []int{os.Getpid()}
	for _, inst := range insts {
		if p, ok := inst.(interface{ PID() int }); ok {
			pids = append(pids, p.PID())
		}
	}
	// cpuTimes reads the CPU time of all the peer's processes and of its
	// stubs alone (pids[1:]; none for the pytorch backend).
	cpuTimes := func() (all, stubs time.Duration, err error) {
		if all, err = machine.CPUTime(pids...); err != nil {
			return 0, 0, err
		}
		stubs, err = machine.CPUTime(pids[1:]...)
		return all, stubs, err
	}
	// drive runs n requests from c clients, or as many as they send
	// until until when it is not zero, timing each into lat when lat is
	// not nil.
	drive := func(n int, until time.Time, lat []time.Duration) error {
		var next atomic.Int64
		errs := make(chan error, c)
		var clients sync.WaitGroup
		for g := 0; g < c; g++ {
			clients.Add(1)
			go func() {
				defer clients.Done()
				r := req()
				for {
					i := int(next.Add(1)) - 1
					t0 := time.Now()
					if i >= n || (!until.IsZero() && t0.After(until)) {
						return
					}
					resp, err := s.Infer(ctx, r)
					if lat != nil {
						lat[i] = time.Since(t0)
					}
					if err == nil {
						err = resp.Err
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		clients.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
	// A server runs on: warm of this load first, untimed, brings the
	// scheduler to where the load keeps it (the python backend's
	// concentrator sheds an instance per 100 ms window, and its probes
	// for one more come ever more seldom).
	if err := drive(math.MaxInt, time.Now().Add(warm), nil); err != nil {
		return result{}, err
	}
	lender.executes.Store(0)
	lender.busy.Store(0)
	cpu0, stub0, err := cpuTimes()
	if err != nil {
		return result{}, err
	}
	lat := make([]time.Duration, requests)
	start := time.Now()
	if err := drive(requests, time.Time{}, lat); err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	cpu1, stub1, err := cpuTimes()
	if err != nil {
		return result{}, err
	}
	active := s.Active()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], throughput: float64(requests) / elapsed.Seconds(),
		batch: float64(requests) / float64(max(lender.executes.Load(), 1)), cpu: (cpu1 - cpu0) / time.Duration(requests), stubCPU: (stub1 - stub0) / time.Duration(requests),
		execute: time.Duration(lender.busy.Load()) / time.Duration(requests), active: active}, nil
}

// directPy times model.py's execute() on one request built with our
// pb_utils, in-process in Python: what the model costs with no server.
const directPy = `
import importlib.util, json, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import triton_python_backend_utils as pb_utils
os.chdir(sys.argv[2])
spec = importlib.util.spec_from_file_location("model", "model.py")
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
m = mod.TritonPythonModel(); m.initialize({})
x = np.sin(np.arange(10, dtype=np.float32)).reshape(1, 10)
req = pb_utils.InferenceRequest(inputs=[pb_utils.Tensor("INPUT__0", x)], requested_output_names=["OUTPUT__0"])
n = int(sys.argv[3])
for _ in range(200): m.execute([req])
lat = []
for _ in range(n):
    t0 = time.perf_counter(); m.execute([req]); lat.append(time.perf_counter() - t0)
lat.sort()
print(json.dumps(lat[len(lat)//2]))
`

func directBaseline(py, modelDir string, n int) (time.Duration, error) {
	// The stub files are what the backend wrote into its cache; use the
	// source copies so this baseline runs the same pb_utils.
	stubDir, err := filepath.Abs("runtime/python/stub")
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(py, "-c", directPy, stubDir, filepath.Join(modelDir, "1"), strconv.Itoa(n))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("direct baseline: %w", err)
	}
	var secs float64
	if err := json.Unmarshal([]byte(lastLine(string(out))), &secs); err != nil {
		return 0, fmt.Errorf("direct baseline output %q: %w", out, err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// bestBatch is the largest batch c clients keep forming in steady state:
// while one batch runs, the clients it does not hold are forming the next,
// so batches settle at half the clients, up to the batcher's limit.
func bestBatch(c, maxBatch int) int {
	return max(1, min(c/2, maxBatch))
}

// floorLatency is the least mean latency c clients could see from the
// python backend on cores CPUs, by this run's figures. Each request costs
// at least its share of the stub's own work on a batch of b in a tight
// loop (loop, no pipe, poll or server) plus serverCPU, the pytorch row's
// whole CPU per request (clients, scheduler and a forward), standing in
// for the server's share; cores do that much work per second at most,
// and by Little's law c clients then wait c/throughput each. The stubs'
// part runs on no more CPUs than there are stubs (instances), whatever
// the cores: one stub executes one batch at a time. Nor can a request
// take less than its batch's loop plus the pytorch row's p50.
func floorLatency(c, b int, loop, serverCPU, torchP50 time.Duration, cores, instances int) time.Duration {
	cores = max(cores, 1)
	perRequest := loop/time.Duration(b) + serverCPU
	byCores := time.Duration(c) * perRequest / time.Duration(cores)
	byStubs := time.Duration(c) * loop / time.Duration(b*max(min(instances, cores), 1))
	return max(loop+torchP50, byCores, byStubs)
}

// stubTimes is what stubparts.py times in a loop for each batch size:
// the stub's whole Stub.execute (its framework around model.py included),
// and model.py's execute(requests) alone on requests built beforehand.
type stubTimes struct {
	execute, model map[int]time.Duration
}

// stubLoop runs bench/python/stubparts.py for the given batch sizes and
// returns its times per batch for each.
func stubLoop(py, modelPy string, sizes []int) (stubTimes, error) {
	args := []string{filepath.Join("bench", "python", "stubparts.py"), "--json", "--model", modelPy}
	for _, n := range sizes {
		args = append(args, strconv.Itoa(n))
	}
	out, err := exec.Command(py, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return stubTimes{}, fmt.Errorf("stubparts.py: %w\n%s", err, ee.Stderr)
		}
		return stubTimes{}, fmt.Errorf("stubparts.py: %w", err)
	}
	return parseStubTimes(out, sizes)
}

// parseStubTimes reads the last line of stubparts.py --json's output:
// {"execute": {"N": us, ...}, "model": {"N": us, ...}}, with a positive
// figure of each for every size asked.
func parseStubTimes(out []byte, sizes []int) (stubTimes, error) {
	var byPart map[string]map[string]float64
	if err := json.Unmarshal([]byte(lastLine(string(out))), &byPart); err != nil {
		return stubTimes{}, fmt.Errorf("stubparts.py output %q: %w", out, err)
	}
	times := stubTimes{execute: map[int]time.Duration{}, model: map[int]time.Duration{}}
	for part, into := range map[string]map[int]time.Duration{"execute": times.execute, "model": times.model} {
		for _, n := range sizes {
			v, ok := byPart[part][strconv.Itoa(n)]
			if !ok || !(v > 0) {
				return stubTimes{}, fmt.Errorf("stubparts.py gave no %q figure for a batch of %d: %q", part, n, out)
			}
			into[n] = time.Duration(v * float64(time.Microsecond))
		}
	}
	return times, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func median(rs []result) result {
	return result{
		p50:        sweep.Median(rs, func(r result) time.Duration { return r.p50 }),
		p99:        sweep.Median(rs, func(r result) time.Duration { return r.p99 }),
		throughput: sweep.Median(rs, func(r result) float64 { return r.throughput }),
		batch:      sweep.Median(rs, func(r result) float64 { return r.batch }),
		cpu:        sweep.Median(rs, func(r result) time.Duration { return r.cpu }),
		stubCPU:    sweep.Median(rs, func(r result) time.Duration { return r.stubCPU }),
		execute:    sweep.Median(rs, func(r result) time.Duration { return r.execute }),
		active:     sweep.Median(rs, func(r result) int { return r.active }),
	}
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func closeF32(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i+4 <= len(a); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(a[i:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		if math.Abs(float64(x-y)) > 1e-5 {
			return false
		}
	}
	return true
}

// rowProfile writes a Go CPU profile of one measurement to path (none
// when path is empty): the server's side of a goal row (scheduler,
// instances, polling) without the set-up, the floors and the peer's rows
// around it.
type rowProfile struct {
	path string
	f    *os.File
}

func (p *rowProfile) start() error {
	if p.path == "" {
		return nil
	}
	f, err := os.Create(p.path)
	if err != nil {
		return fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("-cpuprofile: %w", err)
	}
	p.f = f
	return nil
}

// stop ends a running profile; it does nothing when none runs.
func (p *rowProfile) stop() {
	if p.f == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := p.f.Close(); err != nil {
		log.Printf("-cpuprofile: %v", err)
	} else {
		fmt.Printf("CPU profile of the python backend's batched rows at the highest concurrency: %s\n", p.path)
	}
	p.f = nil
}
