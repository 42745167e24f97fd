// Command servingbench measures what the HTTP serving path costs on top of
// the transport and the model, in one run on one payload (one row of the
// report's simple_linear input, FP32 [1,10]):
//
//	floor-json / floor-bin  a bare net/http server echoing the same request
//	                        body (the transport floor: loopback HTTP, Go client)
//	triton-json             tritonserver's HTTP frontend, JSON tensor data
//	triton-bin              the same with the binary tensor extension
//	triton-grpc             tritonserver's GRPC frontend, raw_input_contents
//	compute                 the backend's Execute for one request, called
//	                        directly (no HTTP, no scheduler)
//
// Every case runs at each concurrency (default 1 and 64) for -duration,
// for -rounds rounds in alternating order; the medians over rounds of p50,
// p99 and throughput are printed with the ratios the goals are stated in:
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
//
// -backend pytorch writes simple_linear's model.pt with /usr/bin/python3
// (-python) and the repository's make_model.py (-make-model) unless -model
// gives one.
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
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

type options struct {
	backend     string
	model       string
	python      string
	duration    time.Duration
	rounds      int
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
}

func main() {
	var o options
	var conc string
	flag.StringVar(&o.backend, "backend", "fake", "backend serving simple_linear: fake or pytorch")
	flag.StringVar(&o.model, "model", "", "model.pt for -backend pytorch (default: written with -python)")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "interpreter with torch, to write model.pt")
	flag.StringVar(&o.makeModel, "make-model", "runtime/python/testdata/make_model.py", "the script that writes simple_linear's model.pt (the report's model)")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time per case, round and concurrency")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds (cases alternate order between rounds)")
	flag.StringVar(&conc, "concurrency", "1,64", "comma-separated client concurrencies")
	flag.IntVar(&o.instances, "instances", 2, "model instances")
	flag.IntVar(&o.delayUs, "delay-us", 0, "dynamic batching max_queue_delay_microseconds")
	flag.StringVar(&o.preferred, "preferred", "", "dynamic batching preferred_batch_size, comma-separated")
	flag.IntVar(&o.batchedAt, "batched-at", 2, "concurrency from which the triton cases use the batched model (0: never)")
	flag.IntVar(&o.batchDelay, "batch-delay-us", 1000, "the batched model's max_queue_delay_microseconds (the report's tuned config)")
	flag.StringVar(&o.batchPref, "batch-preferred", "4,8,16", "the batched model's preferred_batch_size (the report's tuned config)")
	flag.IntVar(&o.maxBatch, "max-batch", 32, "max_batch_size")
	flag.IntVar(&o.computeRuns, "compute-runs", 20000, "direct Execute calls for the compute figure")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	flag.Parse()
	for _, s := range strings.Split(conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "servingbench: bad -concurrency %q\n", conc)
			os.Exit(2)
		}
		o.conc = append(o.conc, c)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "servingbench:", err)
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

// payloads returns the JSON and binary request bodies (one row) and the
// binary header length.
func payloads() (jsonBody, binBody []byte, hdrLen int) {
	x := payloadRow()
	data, _ := json.Marshal([][]float32{x})
	jsonBody = []byte(fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[1,%d],"datatype":"FP32","data":%s}]}`, features, data))
	hdr := fmt.Sprintf(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[1,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, features, 4*features)
	binBody = append([]byte(hdr), make([]byte, 4*features)...)
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

func setupRepository(o options, dir string) (map[string]backend.Backend, error) {
	var head string
	var modelPT []byte
	bes := map[string]backend.Backend{}
	switch o.backend {
	case "fake":
		head = `backend: "fake"`
		bes["fake"] = fake.New()
	case "pytorch":
		head = `platform: "pytorch_libtorch"`
		bes["pytorch"] = torch.New(torch.Options{})
		src := o.model
		if src == "" {
			src = filepath.Join(dir, "model.pt")
			if out, err := exec.Command(o.python, o.makeModel, src).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("writing model.pt with %s: %v\n%s", o.python, err, out)
			}
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		modelPT = data
	default:
		return nil, fmt.Errorf("unknown -backend %q (fake or pytorch)", o.backend)
	}
	for name, batching := range map[string]string{
		plainModel:   batchingConfig(o.delayUs, o.preferred),
		batchedModel: batchingConfig(o.batchDelay, o.batchPref),
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

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// echo is the transport floor: read the body, send it back.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if h := r.Header.Get(httpapi.HeaderLength); h != "" {
		w.Header().Set(httpapi.HeaderLength, h)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

type result struct {
	p50, p99   time.Duration
	throughput float64
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
}

// load runs conc clients in a closed loop against t for d; the triton
// cases address model.
func load(client *http.Client, t target, model string, conc int, d time.Duration) (result, error) {
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

// closedLoop runs conc clients, each calling do back to back for d, and
// summarizes the latencies of the calls.
func closedLoop(conc int, d time.Duration, do func(c int) error) (result, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conc)
	errs := make(chan error, conc)
	start := time.Now()
	stop := start.Add(d)
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for time.Now().Before(stop) {
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
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return result{}, errors.New("no request completed")
	}
	slices.Sort(all)
	return result{p50: all[len(all)/2], p99: all[len(all)*99/100], throughput: float64(len(all)) / elapsed.Seconds()}, nil
}

// computeP50 times Execute of one request on one fresh instance.
func computeP50(ctx context.Context, be backend.Backend, spec *backend.ModelSpec, body []byte, hdrLen, runs int) (time.Duration, error) {
	inst, err := be.NewInstance(ctx, spec, 0)
	if err != nil {
		return 0, err
	}
	defer inst.Close()
	req := &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{1, features}, Data: body[hdrLen:]}}}
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

func run(o options) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "servingbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bes, err := setupRepository(o, dir)
	if err != nil {
		return err
	}
	mgr, err := repository.New(repository.Options{Repositories: []string{filepath.Join(dir, "repo")}, Backends: bes, StrictModelConfig: true})
	if err != nil {
		return err
	}
	defer mgr.Close(ctx)
	if err := mgr.LoadAll(ctx); err != nil {
		return err
	}
	model, err := mgr.Get(plainModel, -1)
	if err != nil {
		return err
	}
	batched, err := mgr.Get(batchedModel, -1)
	if err != nil {
		return err
	}
	jsonBody, binBody, hdrLen := payloads()
	compute, err := computeP50(ctx, bes[model.Backend], model.Spec, binBody, hdrLen, o.computeRuns)
	if err != nil {
		return fmt.Errorf("direct execute: %w", err)
	}

	tritonURL, stopTriton, err := serve(httpapi.New(httpapi.Options{Manager: mgr}))
	if err != nil {
		return err
	}
	defer stopTriton()
	floorURL, stopFloor, err := serve(http.HandlerFunc(echo))
	if err != nil {
		return err
	}
	defer stopFloor()

	gb, err := startGRPC(mgr, payloadRow())
	if err != nil {
		return err
	}
	defer gb.close()

	binHdr := map[string]string{httpapi.HeaderLength: strconv.Itoa(hdrLen), "Content-Type": "application/octet-stream"}
	wantBin := 4 * outputs
	floor := func(string) string { return floorURL }
	infer := func(model string) string { return tritonURL + "/v2/models/" + model + "/infer" }
	targets := []target{
		{name: "floor-json", url: floor, body: jsonBody},
		{name: "floor-bin", url: floor, body: binBody, header: binHdr},
		{name: "triton-json", url: infer, body: jsonBody, check: func(b []byte) error {
			if !bytes.Contains(b, []byte(`"OUTPUT__0"`)) {
				return fmt.Errorf("triton-json: unexpected response %q", b)
			}
			return nil
		}},
		{name: "triton-bin", url: infer, body: binBody, header: binHdr, check: func(b []byte) error {
			if len(b) < wantBin || !bytes.Contains(b, []byte(`"binary_data_size":20`)) {
				return fmt.Errorf("triton-bin: unexpected response %q", b)
			}
			return nil
		}},
		{name: "triton-grpc", request: gb.infer},
	}
	maxConc := slices.Max(o.conc)
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: maxConc * 2, MaxIdleConnsPerHost: maxConc * 2, DisableCompression: true}}

	results := map[string]map[int][]result{}
	for _, t := range targets {
		results[t.name] = map[int][]result{}
		// Warm up connections and code paths.
		for _, m := range []string{plainModel, batchedModel} {
			if _, err := load(client, t, m, maxConc, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	for r := 0; r < o.rounds; r++ {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range o.conc {
			for _, t := range order {
				res, err := load(client, t, o.modelFor(c), c, o.duration)
				if err != nil {
					return err
				}
				results[t.name][c] = append(results[t.name][c], res)
			}
		}
	}
	fmt.Printf("servingbench: backend %s, %d instances, max_batch_size %d, %d rounds x %v, payload %d B JSON / %d B binary\n",
		o.backend, o.instances, o.maxBatch, o.rounds, o.duration, len(jsonBody), len(binBody))
	for _, c := range o.conc {
		cfg := o.delayUs
		pref := o.preferred
		if o.modelFor(c) == batchedModel {
			cfg, pref = o.batchDelay, o.batchPref
		}
		fmt.Printf("concurrency %d: triton cases use %s (max_queue_delay %d us, preferred_batch_size [%s])\n", c, o.modelFor(c), cfg, pref)
	}
	fmt.Printf("compute (direct Execute, 1 row): p50 %.1f us\n\n", us(compute))
	fmt.Printf("%-12s %5s %10s %10s %12s\n", "case", "conc", "p50 us", "p99 us", "req/s")
	med := map[string]map[int]result{}
	for _, t := range targets {
		med[t.name] = map[int]result{}
		for _, c := range o.conc {
			m := median(results[t.name][c])
			med[t.name][c] = m
			fmt.Printf("%-12s %5d %10.1f %10.1f %12.0f\n", t.name, c, us(m.p50), us(m.p99), m.throughput)
		}
	}
	fmt.Println()
	for _, c := range o.conc {
		for _, kind := range []string{"json", "bin"} {
			tr, fl := med["triton-"+kind][c], med["floor-"+kind][c]
			fmt.Printf("conc %3d %-4s: p50 overhead over floor+compute %+.1f us; throughput triton/floor %.2f\n",
				c, kind, us(tr.p50)-us(fl.p50)-us(compute), tr.throughput/fl.throughput)
		}
		g, b := med["triton-grpc"][c], med["triton-bin"][c]
		fmt.Printf("conc %3d grpc: throughput grpc/http-binary %.2f; p50 grpc %.1f us vs http-binary %.1f us\n",
			c, g.throughput/b.throughput, us(g.p50), us(b.p50))
	}
	fmt.Println()
	for _, m := range []*repository.Model{model, batched} {
		st := m.Scheduler.Stats()
		if st.ExecutionCount == 0 {
			continue
		}
		fmt.Printf("scheduler %s: %d inferences in %d executions (%.1f rows per execution); mean per request: queue %.1f us, execute %.1f us\n",
			m.Name, st.InferenceCount, st.ExecutionCount, float64(st.InferenceCount)/float64(st.ExecutionCount),
			float64(st.Queue.Ns)/float64(max(st.Queue.Count, 1))/1e3, float64(st.ComputeInfer.Ns)/float64(max(st.ComputeInfer.Count, 1))/1e3)
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median takes the median of each figure over rounds independently.
func median(rs []result) result {
	p50 := make([]time.Duration, len(rs))
	p99 := make([]time.Duration, len(rs))
	tp := make([]float64, len(rs))
	for i, r := range rs {
		p50[i], p99[i], tp[i] = r.p50, r.p99, r.throughput
	}
	slices.Sort(p50)
	slices.Sort(p99)
	slices.Sort(tp)
	n := len(rs) / 2
	return result{p50: p50[n], p99: p99[n], throughput: tp[n]}
}
