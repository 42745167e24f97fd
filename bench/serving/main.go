// Command servingbench measures what the HTTP serving path costs on top of
// the transport and the model, in one run on one payload (one row of the
// report's simple_linear input, FP32 [1,10]):
//
//	floor-json / floor-bin  a bare net/http server echoing the same request
//	                        body (the transport floor: loopback HTTP, Go client)
//	triton-json             tritonserver's HTTP frontend, JSON tensor data
//	triton-bin              the same with the binary tensor extension
//	triton-grpc             tritonserver's GRPC frontend, raw_input_contents
//	triton-bin-cached       triton-bin to a model with response_cache, the
//	                        same request each time: cache hits
//	compute                 the backend's Execute for one request, called
//	                        directly (no HTTP, no scheduler)
//
// Every case runs at each concurrency (default 1 and 64) for -duration,
// for -rounds rounds in alternating order, each round's -duration split
// into -slices turns that the cases take in alternation; the medians over
// rounds of p50, p99 and throughput are printed, and the goals are
// medians over pairs of slices that ran next to each other, of the ratios
// they are stated in:
// at concurrency 1, p50(triton) - p50(floor) - p50(compute); at concurrency
// 64, throughput(triton-bin) / throughput(floor-bin) and
// throughput(triton-grpc) / throughput(triton-bin). The server runs the
// same code as cmd/tritonserver (repository, scheduler with dynamic
// batching, httpapi, grpcapi) in this process, as does the floor, so both share the
// machine the same way.
//
// The repository holds simple_linear twice, from the same model.pt, and
// the two goals use the configuration each is about: at concurrency 1 the
// triton cases call simple_linear (max_queue_delay -delay-us, default 0: a
// delay would only add latency), from -batched-at on (default 2) they call
// simple_linear_batched, with the report's tuned dynamic_batching
// (preferred_batch_size [4,8,16], max_queue_delay_microseconds 1000). With
// no delay, 64 clients on 2 cores are never queued when an instance frees
// up, so nothing is batched and every request pays its own forward().
//
// Usage (from the repository root):
//
//	go run ./bench/serving                     # fake backend (pure Go)
//	runtime/csrc/build.sh /tmp/tbtorch
//	CGO_LDFLAGS="-L/tmp/tbtorch -Wl,-rpath,/tmp/tbtorch" go run -tags libtorch ./bench/serving -backend pytorch
//	... -concurrency 64 -cases floor-bin,triton-bin   # one goal's cases only
//
// Each in-process case also reports the process's CPU time per request;
// on a shared machine the triton/floor CPU ratio moves less than the
// throughput ratio, which depends on how much of the cores the process
// got.
//
// With -external (the default) outside load generators drive the same
// servers too: wrk (HTTP, and the floor), h2load (gRPC and HTTP binary with
// the one client, which the outside gRPC goal compares), ghz (gRPC, printed
// beside it) and the FastAPI peer under wrk; each such case reports its
// client's CPU per request and this process's (the servers').
//
// -backend pytorch writes simple_linear's model.pt with /usr/bin/python3
// (-python) and the repository's make_model.py (-make-model) unless -model
// gives one.
//
// -backend python (needs -tags libtorch) is a separate comparison through
// the same HTTP frontend, with wrk only: the report's python model (-seed:
// model.py and config.pbtxt unchanged, 4 instances, its dynamic batching;
// OMP_NUM_THREADS=1, -python runs the stubs) against the pytorch backend
// serving the same model.pt with the same config, at -concurrency (default
// 1,16, the python goal's levels). The two alternate every round, -duration
// each, and each level prints the pairs' median throughput ratio and p50
// difference, the server's and the stubs' CPU per request, and issue 18's
// python goal beside them for reference: bench/python checks it, in
// process; this command does not exit 1 over it.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/heapfloor"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

type options struct {
	execConc    string // -backend python: python,execute-concurrency
	backend     string
	model       string
	python      string
	duration    time.Duration
	rounds      int
	slices      int
	conc        []int
	instances   int
	delayUs     int
	preferred   string
	makeModel   string
	batchDelay  int
	batchPref   string
	batchedAt   int
	maxBatch    int
	computeRuns int
	cpuProfile  string
	wrk         string
	ghz         string
	h2load      string
	fastapi     string
	seed        string
	external    bool
	goals       bool
	heapFloor   int64
	gcNote      string // how the collector paces, for the header
	// cases, when not empty, are the only in-process cases run (by name).
	cases map[string]bool
}

func main() {
	var o options
	var conc, cases string
	flag.StringVar(&o.backend, "backend", "fake", "backend serving simple_linear: fake, pytorch, or python (the report's model.py from -seed beside the pytorch backend on the same model, with wrk only; needs -tags libtorch)")
	flag.StringVar(&o.model, "model", "", "model.pt for -backend pytorch (default: written with -python)")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "interpreter with torch, to write model.pt")
	flag.StringVar(&o.makeModel, "make-model", "runtime/python/testdata/make_model.py", "the script that writes simple_linear's model.pt (the report's model)")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time per case, round and concurrency")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds (cases alternate order between rounds)")
	flag.IntVar(&o.slices, "slices", 10, "each case's -duration in a round is run in this many turns, interleaved with the other cases' (1: back to back)")
	flag.StringVar(&conc, "concurrency", "1,64", "comma-separated client concurrencies (-backend python: default "+pythonLevels+")")
	flag.IntVar(&o.instances, "instances", 2, "model instances")
	flag.IntVar(&o.delayUs, "delay-us", 0, "dynamic batching max_queue_delay_microseconds")
	flag.StringVar(&o.preferred, "preferred", "", "dynamic batching preferred_batch_size, comma-separated")
	flag.IntVar(&o.batchedAt, "batched-at", 2, "concurrency from which the triton cases use the batched model (0: never)")
	flag.IntVar(&o.batchDelay, "batch-delay-us", 1000, "the batched model's max_queue_delay_microseconds (the report's tuned config)")
	flag.StringVar(&o.batchPref, "batch-preferred", "4,8,16", "the batched model's preferred_batch_size (the report's tuned config)")
	flag.IntVar(&o.maxBatch, "max-batch", 32, "max_batch_size")
	flag.IntVar(&o.computeRuns, "compute-runs", 20000, "direct Execute calls for the compute figure")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	flag.BoolVar(&o.external, "external", true, "also measure with outside load generators (wrk, ghz) and the FastAPI peer")
	flag.StringVar(&o.wrk, "wrk", "wrk", "wrk binary")
	flag.StringVar(&o.ghz, "ghz", "out/bin/ghz", "ghz binary (make ghz builds it from bench/tools)")
	flag.StringVar(&o.h2load, "h2load", "h2load", "h2load binary (nghttp2-client): one outside client for both gRPC and HTTP binary")
	flag.StringVar(&o.execConc, "execute-concurrency", "", "-backend python: the python backend's execute-concurrency, auto or all (empty: its default, auto)")
	flag.StringVar(&o.seed, "seed", "runtime/python/testdata/seed-model-repository-batched", "the report's batched repository, which -backend python serves")
	flag.StringVar(&o.fastapi, "fastapi", "bench/serving/fastapi_peer.py", "the FastAPI + uvicorn peer, run with -python")
	flag.Int64Var(&o.heapFloor, "gc-heap-floor", heapfloor.DefaultBytes, "the process's Go heap floor in bytes, as tritonserver's --gc-heap-floor-byte-size (0: GOGC=100 pacing)")
	flag.BoolVar(&o.goals, "goals", true, "check issue 18's goals (pytorch backend) and exit 1 when one misses")
	flag.StringVar(&cases, "cases", "", "comma-separated cases to run, e.g. floor-bin,triton-bin (default all; also selects the wrk and h2load cases of the same names, fastapi-json the FastAPI peer and triton-json-gzip h2load with Accept-Encoding: gzip; triton-grpc selects ghz too; goals whose cases did not run are not checked)")
	flag.Parse()
	if cases != "" {
		o.cases = map[string]bool{}
		for _, c := range strings.Split(cases, ",") {
			o.cases[strings.TrimSpace(c)] = true
		}
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.heapFloor < 0 {
		fmt.Fprintln(os.Stderr, "servingbench: -gc-heap-floor must not be negative")
		os.Exit(2)
	}
	// The floor and the server share this process, and its collector, as
	// tritonserver's does.
	_, o.gcNote = heapfloor.Start(uint64(o.heapFloor))
	var err error
	if o.conc, err = sweep.Levels(concurrencyFor(o.backend, conc, set["concurrency"])); err != nil {
		fmt.Fprintln(os.Stderr, "servingbench: -concurrency:", err)
		os.Exit(2)
	}
	missed, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "servingbench:", err)
		os.Exit(1)
	}
	if missed > 0 {
		fmt.Fprintf(os.Stderr, "servingbench: %d goal(s) missed\n", missed)
		os.Exit(1)
	}
}

const features, outputs = 10, 5

// payloadRow is the one input row every case sends.
func payloadRow() []float32 {
	x := make([]float32, features)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	return x
}

// payloads returns the JSON and binary request bodies (rows copies of
// the row) and the binary header length.
func payloads(rows int) (jsonBody, binBody []byte, hdrLen int) {
	var x []float32
	m := make([][]float32, rows)
	for r := range m {
		m[r] = payloadRow()
		x = append(x, m[r]...)
	}
	data, _ := json.Marshal(m)
	jsonBody = []byte(fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[%d,%d],"datatype":"FP32","data":%s}]}`, rows, features, data))
	hdr := fmt.Sprintf(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, rows, features, 4*len(x))
	binBody = append([]byte(hdr), make([]byte, 4*len(x))...)
	for i, v := range x {
		binary.LittleEndian.PutUint32(binBody[len(hdr)+4*i:], math.Float32bits(v))
	}
	return jsonBody, binBody, len(hdr)
}

// The two models the triton cases use, from the same model.pt: plainModel
// has -delay-us and -preferred (by default no batching delay, which is what
// the concurrency-1 overhead is about); batchedModel has the report's tuned
// dynamic_batching, which is what throughput under concurrency is about.
const plainModel, batchedModel = "simple_linear", "simple_linear_batched"

// cachedModel is simple_linear with response_cache enabled: the
// triton-bin-cached case repeats one request, so every request after the
// first is a cache hit (issue 22's cache-hit latency against the floor).
const cachedModel = "simple_linear_cached"

// modelFor returns the model the triton cases use at concurrency c.
func (o options) modelFor(c int) string {
	if o.batchedAt > 0 && c >= o.batchedAt {
		return batchedModel
	}
	return plainModel
}

// batchingConfig is the dynamic_batching block for a delay and a
// comma-separated list of preferred sizes.
func batchingConfig(delayUs int, preferred string) string {
	s := fmt.Sprintf("dynamic_batching { max_queue_delay_microseconds: %d", delayUs)
	if preferred != "" {
		s += " preferred_batch_size: [ " + preferred + " ]"
	}
	return s + " }"
}

// readModelPT returns simple_linear's model.pt: -model, or else the one
// -make-model writes into dir with -python.
func readModelPT(o options, dir string) ([]byte, error) {
	src := o.model
	if src == "" {
		src = filepath.Join(dir, "model.pt")
		if out, err := exec.Command(o.python, o.makeModel, src).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("writing model.pt with %s: %w\n%s", o.python, err, out)
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("reading model.pt: %w", err)
	}
	return data, nil
}

func setupRepository(o options, dir string, rec *execTimes) (map[string]backend.Backend, error) {
	var head string
	var modelPT []byte
	bes := map[string]backend.Backend{}
	switch o.backend {
	case "fake":
		head = `backend: "fake"`
		bes["fake"] = fake.New()
	case "pytorch":
		head = `platform: "pytorch_libtorch"`
		bes["pytorch"] = timedBackend{Backend: torch.New(torch.Options{}), rec: rec}
		var err error
		if modelPT, err = readModelPT(o, dir); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown -backend %q (fake, pytorch or python)", o.backend)
	}
	for name, batching := range map[string]string{
		plainModel:   batchingConfig(o.delayUs, o.preferred),
		batchedModel: batchingConfig(o.batchDelay, o.batchPref),
		cachedModel:  batchingConfig(o.delayUs, o.preferred) + "\nresponse_cache { enable: true }",
	} {
		mdir := filepath.Join(dir, "repo", name)
		if err := os.MkdirAll(filepath.Join(mdir, "1"), 0o755); err != nil {
			return nil, err
		}
		if modelPT != nil {
			if err := os.WriteFile(filepath.Join(mdir, "1", "model.pt"), modelPT, 0o644); err != nil {
				return nil, err
			}
		}
		cfg := fmt.Sprintf(`%s
max_batch_size: %d
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ %d ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ %d ] }]
%s
instance_group [{ kind: KIND_CPU count: %d }]
parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }
`, head, o.maxBatch, features, outputs, batching, o.instances)
		if err := os.WriteFile(filepath.Join(mdir, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			return nil, err
		}
	}
	return bes, nil
}

// serve serves h as cmd/tritonserver serves its HTTP frontend: an
// http.Server and listener under the frontend's default Limits (header and
// idle timeouts, connection bound). The floor and the server use it alike,
// so both pay the same per-request deadlines and the server runs under its
// real settings.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var lim httpapi.Limits
	srv := lim.NewHTTPServer(h)
	go func() { _ = srv.Serve(lim.Listener(ln)) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// echo is the transport floor: read the body, send it back.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	echoBody(w, r, b)
}

// echoBody sends b back with the request's binary header length, if any.
func echoBody(w http.ResponseWriter, r *http.Request, b []byte) {
	if h := r.Header.Get(httpapi.HeaderLength); h != "" {
		w.Header().Set(httpapi.HeaderLength, h)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// floorForward is the floor with the model's forward in it: the echo
// handler also runs a direct Execute of a fixed request of rows rows on an
// instance of its own (no KServe parsing, no scheduler). At concurrency 1
// it is "floor + compute" measured in the cache state a server is in: the
// forward runs right after the request's HTTP work, as in the server,
// rather than back to back in a tight loop.
type floorForward struct {
	mu    sync.Mutex // one forward at a time on inst
	inst  backend.Instance
	reqs  map[int][]*backend.Request
	times execTimes // each forward's wall time, by rows
}

func newFloorForward(ctx context.Context, be backend.Backend, spec *backend.ModelSpec, rows ...int) (*floorForward, error) {
	inst, err := be.NewInstance(ctx, spec, 0)
	if err != nil {
		return nil, err
	}
	f := &floorForward{inst: inst, reqs: map[int][]*backend.Request{}, times: execTimes{times: map[int][]time.Duration{}}}
	for _, r := range rows {
		_, bin, hdr := payloads(r)
		f.reqs[r] = []*backend.Request{{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{int64(r), features}, Data: bin[hdr:]}}}}
	}
	return f, nil
}

func (f *floorForward) handler(rows int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		t0 := time.Now()
		resps, err := f.inst.Execute(r.Context(), f.reqs[rows])
		f.times.add(rows, time.Since(t0))
		f.mu.Unlock()
		if err != nil || resps[0].Err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		echoBody(w, r, b)
	}
}

type result struct {
	p50, p99   time.Duration
	throughput float64
	// cpu is the process's CPU time (user + system) per completed request:
	// in-process cases, clients and servers together; with an outside
	// client, the servers' alone. Unlike throughput it does not move when
	// other processes take the cores.
	cpu time.Duration
	// clientCPU is an outside load generator's CPU time per request.
	clientCPU time.Duration
	// stubCPU is the python backend's stub processes' CPU time per
	// request (-backend python), which cpu does not count.
	stubCPU time.Duration
	// csw and icsw are the process's voluntary and involuntary context
	// switches per request (in-process cases).
	csw, icsw float64
}

type target struct {
	name   string
	url    func(model string) string
	body   []byte
	header map[string]string
	check  func([]byte) error
	// request, when set, replaces the HTTP request: it sends one request
	// for model as client c and checks the answer (the GRPC case).
	request func(model string, c int) error
	// only1: a concurrency-1 case (floor+compute, batch 8).
	only1 bool
}

// runRound measures each case of run once for d, in n slices: the cases
// take turns for d/n at a time (the order reversed every slice). It
// returns each case's result over the round (its slices summed) and over
// each slice. Slice j of two cases ran within a few hundred milliseconds
// of each other, so the machine's swings, which last seconds, hit both,
// where back-to-back runs of d each put a swing on one case and not its
// pair.
func runRound(client *http.Client, run []target, model string, conc int, d time.Duration, n int) (round []result, perSlice [][]result, err error) {
	n = max(n, 1)
	acc := make([]sample, len(run))
	perSlice = make([][]result, len(run))
	part := d / time.Duration(n)
	for s := 0; s < n; s++ {
		for k := range run {
			i := k
			if s%2 == 1 {
				i = len(run) - 1 - k
			}
			x, err := load(client, run[i], model, conc, part)
			if err != nil {
				return nil, nil, err
			}
			res, err := x.result()
			if err != nil {
				return nil, nil, fmt.Errorf("%s at concurrency %d: %w", run[i].name, conc, err)
			}
			perSlice[i] = append(perSlice[i], res)
			acc[i].add(x)
		}
	}
	round = make([]result, len(run))
	for i, t := range run {
		if round[i], err = acc[i].result(); err != nil {
			return nil, nil, fmt.Errorf("%s at concurrency %d: %w", t.name, conc, err)
		}
	}
	return round, perSlice, nil
}

// load runs conc clients in a closed loop against t for d; the triton
// cases address model.
func load(client *http.Client, t target, model string, conc int, d time.Duration) (sample, error) {
	if t.request != nil {
		return closedLoop(conc, d, func(c int) error { return t.request(model, c) })
	}
	url := t.url(model)
	return closedLoop(conc, d, func(int) error {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(t.body))
		for k, v := range t.header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("%s: status %d: %s", t.name, resp.StatusCode, b.Bytes())
		}
		if err == nil && t.check != nil {
			err = t.check(b.Bytes())
		}
		return err
	})
}

// sample is what one closed-loop run measured, unsummarized, so that the
// slices of a round add up before their percentiles are taken.
type sample struct {
	lat     []time.Duration
	elapsed time.Duration
	cpu     time.Duration
	// csw and icsw are the process's voluntary and involuntary context
	// switches over the run (every thread's): on this kind of VM each
	// costs several microseconds of CPU, so their count per request is a
	// cost the CPU figure hides the source of.
	csw, icsw int64
}

func (s *sample) add(x sample) {
	s.lat = append(s.lat, x.lat...)
	s.elapsed += x.elapsed
	s.cpu += x.cpu
	s.csw += x.csw
	s.icsw += x.icsw
}

// result summarizes s: percentiles over every call, throughput and CPU
// per call over the time s ran.
func (s sample) result() (result, error) {
	if len(s.lat) == 0 {
		return result{}, errors.New("no request completed")
	}
	all := slices.Clone(s.lat)
	slices.Sort(all)
	return result{p50: all[len(all)/2], p99: all[len(all)*99/100], throughput: float64(len(all)) / s.elapsed.Seconds(), cpu: s.cpu / time.Duration(len(all)),
		csw: float64(s.csw) / float64(len(all)), icsw: float64(s.icsw) / float64(len(all))}, nil
}

// closedLoop runs conc clients, each calling do back to back for d, and
// returns every call's latency.
func closedLoop(conc int, d time.Duration, do func(c int) error) (sample, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conc)
	errs := make(chan error, conc)
	cpu0, csw0, icsw0 := processCPU()
	start := time.Now()
	stop := start.Add(d)
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			// Every client makes at least one call: on a loaded machine a
			// client goroutine may first run after a short slice is over.
			for first := true; first || time.Now().Before(stop); first = false {
				t0 := time.Now()
				if err := do(c); err != nil {
					errs <- err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	cpu1, csw1, icsw1 := processCPU()
	s := sample{elapsed: time.Since(start), cpu: cpu1 - cpu0, csw: csw1 - csw0, icsw: icsw1 - icsw0}
	close(errs)
	if err := <-errs; err != nil {
		return sample{}, err
	}
	for _, l := range lat {
		s.lat = append(s.lat, l...)
	}
	if len(s.lat) == 0 {
		return sample{}, errors.New("no request completed")
	}
	return s, nil
}

// processCPU is the CPU time this process has used (user + system) and
// its voluntary and involuntary context switches so far; zeros where the
// system cannot tell.
func processCPU() (cpu time.Duration, csw, icsw int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw, ru.Nivcsw
}

// computeP50 times Execute of one request on one fresh instance.
func computeP50(ctx context.Context, be backend.Backend, spec *backend.ModelSpec, body []byte, hdrLen, runs int) (time.Duration, error) {
	inst, err := be.NewInstance(ctx, spec, 0)
	if err != nil {
		return 0, err
	}
	defer inst.Close()
	rows := int64(len(body[hdrLen:]) / (4 * features))
	req := &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{rows, features}, Data: body[hdrLen:]}}}
	reqs := []*backend.Request{req}
	ts := make([]time.Duration, 0, runs)
	for i := 0; i < runs+runs/10; i++ {
		t0 := time.Now()
		resps, err := inst.Execute(ctx, reqs)
		el := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if resps[0].Err != nil {
			return 0, resps[0].Err
		}
		if i >= runs/10 { // the first tenth warms up
			ts = append(ts, el)
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

func run(o options) (int, error) {
	if o.backend == "python" {
		// Its goal is bench/python's: nothing here to miss.
		return 0, runPython(o)
	}
	ctx := context.Background()
	load0 := machine.LoadAvg()
	wake := machine.WakeUps()
	dir, err := os.MkdirTemp("", "servingbench")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	rec := &execTimes{times: map[int][]time.Duration{}}
	bes, err := setupRepository(o, dir, rec)
	if err != nil {
		return 0, err
	}
	cache, err := scheduler.NewCache(16 << 20)
	if err != nil {
		return 0, err
	}
	mgr, err := repository.New(repository.Options{Repositories: []string{filepath.Join(dir, "repo")}, Backends: bes, StrictModelConfig: true, Cache: cache})
	if err != nil {
		return 0, err
	}
	defer mgr.Close(ctx)
	if err := mgr.LoadAll(ctx); err != nil {
		return 0, err
	}
	model, err := mgr.Get(plainModel, -1)
	if err != nil {
		return 0, err
	}
	batched, err := mgr.Get(batchedModel, -1)
	if err != nil {
		return 0, err
	}
	cached, err := mgr.Get(cachedModel, -1)
	if err != nil {
		return 0, err
	}
	jsonBody, binBody, hdrLen := payloads(1)
	_, binBody8, hdrLen8 := payloads(8)
	compute, err := computeP50(ctx, bes[model.Backend], model.Spec, binBody, hdrLen, o.computeRuns)
	if err != nil {
		return 0, fmt.Errorf("direct execute: %w", err)
	}
	compute8, err := computeP50(ctx, bes[model.Backend], model.Spec, binBody8, hdrLen8, o.computeRuns)
	if err != nil {
		return 0, fmt.Errorf("direct execute: %w", err)
	}
	ff, err := newFloorForward(ctx, bes[model.Backend], model.Spec, 1, 8)
	if err != nil {
		return 0, err
	}
	defer ff.inst.Close()

	// Both frontends get a trace manager, idle as cmd/tritonserver's is
	// without --trace-config, so that each pays what checking it costs
	// per call while nothing is traced.
	tracer, err := tracing.New(tracing.Options{})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tracer.Close(ctx) }()
	tritonURL, stopTriton, err := serve(httpapi.New(httpapi.Options{Manager: mgr, Tracing: tracer}))
	if err != nil {
		return 0, err
	}
	defer stopTriton()
	mux := http.NewServeMux()
	mux.HandleFunc("/", echo)
	mux.HandleFunc("/forward1", ff.handler(1))
	mux.HandleFunc("/forward8", ff.handler(8))
	floorURL, stopFloor, err := serve(mux)
	if err != nil {
		return 0, err
	}
	defer stopFloor()

	gb, err := startGRPC(mgr, tracer, payloadRow())
	if err != nil {
		return 0, err
	}
	defer gb.close()

	binHdr := map[string]string{httpapi.HeaderLength: strconv.Itoa(hdrLen), "Content-Type": "application/octet-stream"}
	binHdr8 := map[string]string{httpapi.HeaderLength: strconv.Itoa(hdrLen8), "Content-Type": "application/octet-stream"}
	floor := func(string) string { return floorURL }
	floorFwd := func(rows int) func(string) string {
		return func(string) string { return floorURL + "/forward" + strconv.Itoa(rows) }
	}
	infer := func(model string) string { return tritonURL + "/v2/models/" + model + "/infer" }
	binCheck := func(name string, n int) func([]byte) error {
		// Spelled once: the check runs inside the timed call, and the
		// floor's has none.
		want := []byte(`"binary_data_size":` + strconv.Itoa(n))
		return func(b []byte) error {
			if len(b) < n || !bytes.Contains(b, want) {
				return fmt.Errorf("%s: unexpected response %q", name, b)
			}
			return nil
		}
	}
	// Cases that a goal compares run next to each other, so that the
	// machine's slower swings hit both alike (see paired).
	jsonCheck := func(b []byte) error {
		if !bytes.Contains(b, []byte(`"OUTPUT__0"`)) {
			return fmt.Errorf("triton-json: unexpected response %q", b)
		}
		return nil
	}
	targets := []target{
		{name: "floor-json", url: floor, body: jsonBody},
		{name: "triton-json", url: infer, body: jsonBody, check: jsonCheck},
		{name: "floor+fwd-json", url: floorFwd(1), body: jsonBody, only1: true},
		{name: "floor-bin", url: floor, body: binBody, header: binHdr},
		{name: "triton-bin", url: infer, body: binBody, header: binHdr, check: binCheck("triton-bin", 4*outputs)},
		{name: "triton-bin-cached", url: func(string) string { return infer(cachedModel) }, body: binBody, header: binHdr, check: binCheck("triton-bin-cached", 4*outputs)},
		{name: "floor+fwd-bin", url: floorFwd(1), body: binBody, header: binHdr, only1: true},
		{name: "triton-grpc", request: gb.infer},
		{name: "floor+fwd-bin8", url: floorFwd(8), body: binBody8, header: binHdr8, only1: true},
		{name: "triton-bin8", url: infer, body: binBody8, header: binHdr8, check: binCheck("triton-bin8", 8*4*outputs), only1: true},
	}
	if o.cases != nil {
		targets = slices.DeleteFunc(targets, func(t target) bool { return !o.cases[t.name] })
		if len(targets) == 0 {
			return 0, fmt.Errorf("-cases %v names no case", slices.Sorted(maps.Keys(o.cases)))
		}
	}
	maxConc := slices.Max(o.conc)
	client := benchClient(maxConc)

	// results holds each case's result per round (the table); pairs per
	// slice of every round, which the goals compare (see runRound).
	results, pairs := map[string]map[int][]result{}, map[string]map[int][]result{}
	for _, t := range targets {
		results[t.name], pairs[t.name] = map[int][]result{}, map[int][]result{}
		// Warm up connections and code paths.
		for _, m := range []string{plainModel, batchedModel} {
			if t.only1 && m == batchedModel {
				continue
			}
			if _, err := load(client, t, m, maxConc, 200*time.Millisecond); err != nil {
				return 0, err
			}
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return 0, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	ff.times.reset()
	rec.reset()
	before := batchInfer(model.Scheduler.Stats())
	marks := markSchedulers(model, batched)
	for r := 0; r < o.rounds; r++ {
		order := inRoundOrder(targets, r)
		for _, c := range o.conc {
			run := slices.DeleteFunc(slices.Clone(order), func(t target) bool { return t.only1 && c != 1 })
			round, perSlice, err := runRound(client, run, o.modelFor(c), c, o.duration, o.slices)
			if err != nil {
				return 0, err
			}
			for i, t := range run {
				results[t.name][c] = append(results[t.name][c], round[i])
				pairs[t.name][c] = append(pairs[t.name][c], perSlice[i]...)
			}
		}
	}
	after := batchInfer(model.Scheduler.Stats())
	fmt.Printf("servingbench: backend %s, %d instances, max_batch_size %d, %d rounds x %v, payload %d B JSON / %d B binary, load %s at start\n",
		o.backend, o.instances, o.maxBatch, o.rounds, o.duration, len(jsonBody), len(binBody), load0)
	fmt.Printf("machine: %s\n", wake)
	fmt.Printf("collector: %s\n", o.gcNote)
	for _, c := range o.conc {
		cfg := o.delayUs
		pref := o.preferred
		if o.modelFor(c) == batchedModel {
			cfg, pref = o.batchDelay, o.batchPref
		}
		fmt.Printf("concurrency %d: triton cases use %s (max_queue_delay %d us, preferred_batch_size [%s])\n", c, o.modelFor(c), cfg, pref)
	}
	fmt.Printf("compute, tight loop (direct Execute back to back): p50 %.1f us at 1 row, %.1f us at 8 rows\n", us(compute), us(compute8))
	fmt.Printf("floor+fwd: the echo handler with the same direct Execute in it (floor + compute in a server's cache state)\n\n")
	fmt.Printf("%-18s %5s %10s %10s %12s %11s %13s\n", "case", "conc", "p50 us", "p99 us", "req/s", "CPU us/req", "csw/req vol+inv")
	med := map[string]map[int]result{}
	for _, t := range targets {
		med[t.name] = map[int]result{}
		for _, c := range o.conc {
			if len(results[t.name][c]) == 0 {
				continue
			}
			m := median(results[t.name][c])
			med[t.name][c] = m
			fmt.Printf("%-18s %5d %10.1f %10.1f %12.0f %11.1f %6.2f+%.2f\n", t.name, c, us(m.p50), us(m.p99), m.throughput, us(m.cpu), m.csw, m.icsw)
		}
	}
	fmt.Println()
	var goals []goal
	execGoal := func(rows int) {
		statMean, n := meanExecute(before, after, rows)
		mean, p50, _ := rec.stats(rows)
		dmean, dp50, dn := ff.times.stats(rows)
		tight := compute
		if rows == 8 {
			tight = compute8
		}
		fmt.Printf("forward at %d rows: in the server p50 %.1f us, mean %.1f us (scheduler's compute_infer mean %.1f us, %d executions); direct in the floor handler p50 %.1f us, mean %.1f us (%d); tight loop p50 %.1f us\n",
			rows, us(p50), us(mean), us(statMean), n, us(dp50), us(dmean), dn, us(tight))
		fmt.Printf("  ratios in server / direct: p50 %.2f, mean %.2f; in server / tight loop p50 %.2f\n",
			float64(p50)/float64(max(dp50, 1)), float64(mean)/float64(max(dmean, 1)), float64(p50)/float64(max(tight, 1)))
		if n > 0 && dn > 0 {
			goals = append(goals, goal{name: fmt.Sprintf("in-server execute / direct forward p50, batch %d", rows), client: "in-process",
				measured: float64(p50) / float64(dp50), limit: 1.2, atMost: true, unit: "x"})
		}
	}
	if _, ok := med["floor+fwd-bin"][1]; ok {
		execGoal(1)
		execGoal(8)
	}
	for _, c := range o.conc {
		for _, kind := range []string{"json", "bin"} {
			tr, fl := pairs["triton-"+kind][c], pairs["floor-"+kind][c]
			ratio := paired(tr, fl, throughputRatio)
			line := fmt.Sprintf("conc %3d %-4s: throughput triton/floor %.2f, CPU per request triton/floor %.2f", c, kind, ratio, paired(tr, fl, cpuRatio))
			if c == 1 {
				over := paired(tr, pairs["floor+fwd-"+kind][1], p50Over)
				line += fmt.Sprintf("; p50 over floor+fwd %+.1f us (over floor + tight compute %+.1f us)", over, paired(tr, fl, p50Over)-us(compute))
				goals = append(goals, goal{name: "c=1 " + kind + " p50 over floor+compute", client: "in-process", measured: over, limit: 10, atMost: true, unit: "us"})
			}
			fmt.Println(line)
			if c == maxConc && c > 1 && kind == "bin" {
				goals = append(goals, goal{name: fmt.Sprintf("c=%d binary throughput / floor", c), client: "in-process", measured: ratio, limit: 0.85})
			}
		}
		g, b := med["triton-grpc"][c], med["triton-bin"][c]
		gr := paired(pairs["triton-grpc"][c], pairs["triton-bin"][c], throughputRatio)
		fmt.Printf("conc %3d grpc: throughput grpc/http-binary %.2f; p50 grpc %.1f us vs http-binary %.1f us\n",
			c, gr, us(g.p50), us(b.p50))
		if c == maxConc && c > 1 {
			goals = append(goals, goal{name: fmt.Sprintf("c=%d gRPC / HTTP binary throughput", c), client: "in-process", measured: gr, limit: 1})
		}
	}
	for _, c := range o.conc {
		hit, ok1 := med["triton-bin-cached"][c]
		fl, ok2 := med["floor-bin"][c]
		if !ok1 || !ok2 {
			continue // not run (-cases)
		}
		hr, fr := pairs["triton-bin-cached"][c], pairs["floor-bin"][c]
		// Paired per slice, as the other goals are: the p50 of one case
		// over a whole run moves with the machine as much as the ratio.
		ratio, lo, hi := pairedRange(hr, fr, p50Ratio)
		fmt.Printf("conc %3d cache: p50 cache hit %.1f us vs floor-bin %.1f us (medians over rounds); paired per slice %.2fx (%.2f-%.2fx); throughput cache hit/floor %.2f\n",
			c, us(hit.p50), us(fl.p50), ratio, lo, hi, paired(hr, fr, throughputRatio))
		if c == 1 {
			goals = append(goals, goal{name: "c=1 cache-hit p50 / floor-bin p50 (issue 22)", client: "in-process", measured: ratio, limit: 1.1, atMost: true, unit: "x"})
		}
	}
	if st := cached.Scheduler.Stats(); st.CacheHit.Count > 0 {
		fmt.Printf("cache: %d hits, %d misses, %d executions of %s; mean hit lookup %.2f us\n", st.CacheHit.Count, st.CacheMiss.Count,
			st.ExecutionCount, cachedModel, float64(st.CacheHit.Ns)/float64(st.CacheHit.Count)/1e3)
	}
	fmt.Println()
	printSchedulers(marks)
	if o.external {
		served := func(name string) uint64 {
			m, err := mgr.Get(name, -1)
			if err != nil {
				return 0
			}
			return m.Scheduler.Stats().Success.Count
		}
		ext, err := external(o, dir, servers{floor: floorURL, triton: tritonURL, grpc: gb, served: served, fastAPIModel: filepath.Join(model.Spec.VersionDir, "model.pt")},
			jsonBody, binBody, binHdr)
		if err != nil {
			return 0, err
		}
		goals = append(goals, ext...)
	}
	fmt.Printf("\nload average: %s at start, %s at end\n", load0, machine.LoadAvg())
	if !o.goals {
		return 0, nil
	}
	if o.backend != "pytorch" {
		fmt.Println("goals are checked with -backend pytorch only")
		return 0, nil
	}
	return report(goals), nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// paired is the median of f over pairs of two cases' results taken at
// the same time: the same round, or the same slice of one (runRound). A
// change in what else the machine runs hits both of a pair; a ratio of
// medians taken over the whole run would not cancel it.
func paired(a, b []result, f func(a, b result) float64) float64 {
	n := min(len(a), len(b))
	if n == 0 {
		return math.NaN()
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = f(a[i], b[i])
	}
	slices.Sort(v)
	return v[n/2]
}

func throughputRatio(a, b result) float64 { return a.throughput / b.throughput }

func cpuRatio(a, b result) float64 { return float64(a.cpu) / float64(b.cpu) }

func p50Over(a, b result) float64 { return us(a.p50) - us(b.p50) }

func p50Ratio(a, b result) float64 { return float64(a.p50) / float64(max(b.p50, 1)) }

// pairedRange is paired's median with the least and the greatest of f
// over the pairs: the spread that says how far one pair can be trusted.
func pairedRange(a, b []result, f func(a, b result) float64) (med, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range min(len(a), len(b)) {
		v := f(a[i], b[i])
		lo, hi = min(lo, v), max(hi, v)
	}
	return paired(a, b, f), lo, hi
}

// inRoundOrder is the order round r runs cases in: reversed every other
// round, so that no case always runs right after the same neighbour's
// load, and the two of a pair trade places between rounds.
func inRoundOrder[T any](cases []T, r int) []T {
	order := slices.Clone(cases)
	if r%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// benchClient is the Go client the in-process cases share: enough idle
// connections kept for maxConc clients that none is redialled mid-run.
func benchClient(maxConc int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: maxConc * 2, MaxIdleConnsPerHost: maxConc * 2, DisableCompression: true}}
}

// schedulerMark is a model's scheduler statistics at one point of the
// run: printSchedulers reports what ran after it, not the warm-up before.
type schedulerMark struct {
	model *repository.Model
	at    scheduler.Stats
}

func markSchedulers(models ...*repository.Model) []schedulerMark {
	marks := make([]schedulerMark, len(models))
	for i, m := range models {
		marks[i] = schedulerMark{model: m, at: m.Scheduler.Stats()}
	}
	return marks
}

// printSchedulers prints each model's scheduler statistics since its
// mark, for the models that executed anything meanwhile.
func printSchedulers(marks []schedulerMark) {
	for _, mk := range marks {
		if d := since(mk.model.Scheduler.Stats(), mk.at); d.executions > 0 {
			fmt.Printf("scheduler %s: %d inferences in %d executions (%.1f rows per execution); mean per request: queue %.1f us, execute %.1f us\n",
				mk.model.Name, d.inferences, d.executions, float64(d.inferences)/float64(d.executions), d.queueUs, d.executeUs)
		}
	}
}

// schedulerDelta is what a scheduler did between two of its Stats.
type schedulerDelta struct {
	inferences, executions uint64
	queueUs, executeUs     float64 // means per request
}

func since(now, then scheduler.Stats) schedulerDelta {
	mean := func(now, then scheduler.Duration) float64 {
		return float64(now.Ns-then.Ns) / float64(max(now.Count-then.Count, 1)) / 1e3
	}
	return schedulerDelta{
		inferences: now.InferenceCount - then.InferenceCount,
		executions: now.ExecutionCount - then.ExecutionCount,
		queueUs:    mean(now.Queue, then.Queue),
		executeUs:  mean(now.ComputeInfer, then.ComputeInfer),
	}
}

// median takes the median of each figure over rounds independently.
func median(rs []result) result {
	return result{
		p50:        sweep.Median(rs, func(r result) time.Duration { return r.p50 }),
		p99:        sweep.Median(rs, func(r result) time.Duration { return r.p99 }),
		throughput: sweep.Median(rs, func(r result) float64 { return r.throughput }),
		cpu:        sweep.Median(rs, func(r result) time.Duration { return r.cpu }),
		clientCPU:  sweep.Median(rs, func(r result) time.Duration { return r.clientCPU }),
		stubCPU:    sweep.Median(rs, func(r result) time.Duration { return r.stubCPU }),
		csw:        sweep.Median(rs, func(r result) float64 { return r.csw }),
		icsw:       sweep.Median(rs, func(r result) float64 { return r.icsw }),
	}
}
