package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tritonbuild/tritonbuild/bench/internal/goals"
	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/python"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// -backend python serves the report's python model through tritonserver's
// HTTP frontend, as the hand runs with wrk did, beside its pytorch peer in
// the same server: pythonModel is the seed repository's simple_linear
// (model.py, config.pbtxt) copied unchanged, pythonPeer the same model.pt
// on the pytorch backend with the seed's batching and instance groups.
const pythonModel, pythonPeer = "simple_linear", "simple_linear_pytorch"

// pythonLevels are the concurrencies of issue 18's python goal, the
// default -concurrency with -backend python.
const pythonLevels = "1,16"

// concurrencyFor is the -concurrency list a run uses: the one given, else
// the python goal's levels with -backend python (the default 1,64 is the
// serving goals').
func concurrencyFor(backend, given string, set bool) string {
	if backend == "python" && !set {
		return pythonLevels
	}
	return given
}

// instanceCount is the number of instances a config's groups ask for.
func instanceCount(mc *modelconfig.ModelConfig) int {
	n := 0
	for _, g := range mc.GetInstanceGroup() {
		n += int(max(g.GetCount(), 1)) // an unset count is one instance
	}
	return n
}

// peerConfig is the seed's config for the pytorch backend on model.pt:
// the same tensors, max_batch_size, dynamic batching and instance groups,
// with one intra-op thread, as OMP_NUM_THREADS=1 gives the stubs' torch.
func peerConfig(seed *modelconfig.ModelConfig) ([]byte, error) {
	mc := proto.Clone(seed).(*modelconfig.ModelConfig)
	mc.Name, mc.Backend, mc.Platform = pythonPeer, "", "pytorch_libtorch"
	if mc.Parameters == nil {
		mc.Parameters = map[string]*modelconfig.ModelParameter{}
	}
	mc.Parameters[torch.ParamIntraOpThreads] = &modelconfig.ModelParameter{StringValue: "1"}
	b, err := prototext.MarshalOptions{Multiline: true}.Marshal(mc)
	if err != nil {
		return nil, fmt.Errorf("writing the pytorch peer's config: %w", err)
	}
	return b, nil
}

// pythonRepository writes dir/repo: the seed's simple_linear with the
// model.pt its model.py loads, and the pytorch peer on the same model.pt.
// It returns the seed's config.
func pythonRepository(o options, dir string) (*modelconfig.ModelConfig, error) {
	src := filepath.Join(o.seed, pythonModel)
	seed, err := modelconfig.LoadFile(filepath.Join(src, "config.pbtxt"))
	if err != nil {
		return nil, fmt.Errorf("the seed repository (-seed, from the repository root): %w", err)
	}
	if seed.GetName() != pythonModel || seed.GetBackend() != "python" {
		return nil, fmt.Errorf("%s: want model %s on the python backend, got %q on %q", src, pythonModel, seed.GetName(), seed.GetBackend())
	}
	modelPT, err := readModelPT(o, dir)
	if err != nil {
		return nil, err
	}
	peer, err := peerConfig(seed)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		filepath.Join(pythonPeer, "config.pbtxt"):   peer,
		filepath.Join(pythonPeer, "1", "model.pt"):  modelPT,
		filepath.Join(pythonModel, "1", "model.pt"): modelPT,
	}
	for _, f := range []string{"config.pbtxt", filepath.Join("1", "model.py")} {
		if files[filepath.Join(pythonModel, f)], err = os.ReadFile(filepath.Join(src, f)); err != nil {
			return nil, fmt.Errorf("the seed repository: %w", err)
		}
	}
	for name, data := range files {
		p := filepath.Join(dir, "repo", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
	}
	return seed, nil
}

// stubRecorder is the python backend as the server registers it, keeping
// the instances it starts so that their stubs' CPU time can be read (PID
// follows a restarted stub to its new process).
type stubRecorder struct {
	*python.Backend
	mu    sync.Mutex
	insts []interface{ PID() int }
}

func (b *stubRecorder) NewInstance(ctx context.Context, spec *backend.ModelSpec, idx int) (backend.Instance, error) {
	in, err := b.Backend.NewInstance(ctx, spec, idx)
	if p, ok := in.(interface{ PID() int }); ok && err == nil {
		b.mu.Lock()
		b.insts = append(b.insts, p)
		b.mu.Unlock()
	}
	return in, err
}

// pids are the running stubs' process ids.
func (b *stubRecorder) pids() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ps []int
	for _, in := range b.insts {
		if pid := in.PID(); pid != 0 {
			ps = append(ps, pid)
		}
	}
	return ps
}

// servedCase is one model of the server under wrk: its requests, the
// model's count of successful requests, and its stubs (none for pytorch).
type servedCase struct {
	wrkCase
	model *repository.Model
	stubs func() []int
}

// runStubbed runs wrk on sc as runWrk does and adds the stubs' CPU time
// per request: read around the run, over the requests the model served
// meanwhile (runWrk's server figure is this process's alone).
func runStubbed(o options, dir string, sc servedCase, conc int) (result, error) {
	pids := sc.stubs()
	stub0, err := machine.CPUTime(pids...)
	if err != nil {
		return result{}, fmt.Errorf("%s: the stubs' CPU time: %w", sc.name, err)
	}
	n0 := sc.model.Scheduler.Stats().Success.Count
	res, err := runWrk(o.wrk, dir, sc.wrkCase, conc, o.duration)
	if err != nil {
		return result{}, err
	}
	stub1, err := machine.CPUTime(pids...)
	if err != nil {
		return result{}, fmt.Errorf("%s: the stubs' CPU time (a stub restarted?): %w", sc.name, err)
	}
	if n := sc.model.Scheduler.Stats().Success.Count - n0; n > 0 {
		res.stubCPU = (stub1 - stub0) / time.Duration(n)
	}
	return res, nil
}

// outputOf posts body to url and returns the response's first output.
func outputOf(client *http.Client, url string, body []byte) ([]float64, error) {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Outputs []struct {
			Data []float64 `json:"data"`
		} `json:"outputs"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: decoding the answer: %w", url, err)
	}
	if len(r.Outputs) == 0 {
		return nil, fmt.Errorf("%s: no output in the answer", url)
	}
	return r.Outputs[0].Data, nil
}

// sameOutputs checks that two answers agree to float32 rounding: the
// peer is the same model, not just a model that answers.
func sameOutputs(a, b []float64) error {
	if len(a) != len(b) || len(a) == 0 {
		return fmt.Errorf("outputs of %d and %d values", len(a), len(b))
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-5 {
			return fmt.Errorf("output %d: %g and %g", i, a[i], b[i])
		}
	}
	return nil
}

// runPython is -backend python: the seed's model on the python backend
// and its pytorch peer behind one HTTP frontend, each driven by wrk with
// the one-row JSON request at every -concurrency, the two alternated in
// pairs every round (inRoundOrder) and compared pair by pair (paired).
func runPython(o options) error {
	if !torch.Available {
		return errors.New("-backend python needs -tags libtorch: the pytorch backend is its peer")
	}
	if _, err := exec.LookPath(o.wrk); err != nil {
		return fmt.Errorf("-backend python drives the server with wrk: %w", err)
	}
	// As the hand runs' server had it; the stubs inherit it.
	if err := os.Setenv("OMP_NUM_THREADS", "1"); err != nil {
		return err
	}
	ctx := context.Background()
	load0 := machine.LoadAvg()
	wake := machine.WakeUps()
	dir, err := os.MkdirTemp("", "servingbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	seed, err := pythonRepository(o, dir)
	if err != nil {
		return err
	}
	stubs := &stubRecorder{Backend: python.New(python.Options{CacheDir: filepath.Join(dir, "python-cache")})}
	pyConfig := map[string]string{python.KeyInterpreter: o.python}
	if o.execConc != "" {
		pyConfig[python.KeyExecuteConcurrency] = o.execConc
	}
	mgr, err := repository.New(repository.Options{
		Repositories: []string{filepath.Join(dir, "repo")}, StrictModelConfig: true,
		Backends:      map[string]backend.Backend{"python": stubs, "pytorch": torch.New(torch.Options{})},
		BackendConfig: map[string]map[string]string{"python": pyConfig},
	})
	if err != nil {
		return err
	}
	defer mgr.Close(ctx)
	if err := mgr.LoadAll(ctx); err != nil {
		return fmt.Errorf("loading %s and %s: %w", pythonModel, pythonPeer, err)
	}
	pyModel, err := mgr.Get(pythonModel, -1)
	if err != nil {
		return err
	}
	ptModel, err := mgr.Get(pythonPeer, -1)
	if err != nil {
		return err
	}
	// An idle trace manager, as cmd/tritonserver has without
	// --trace-config (see run).
	tracer, err := tracing.New(tracing.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = tracer.Close(ctx) }()
	url, stop, err := serve(httpapi.New(httpapi.Options{Manager: mgr, Tracing: tracer}))
	if err != nil {
		return err
	}
	defer stop()
	jsonBody, _, _ := payloads(1)
	infer := func(m string) string { return url + "/v2/models/" + m + "/infer" }
	cases := []servedCase{
		{wrkCase: wrkCase{name: "python-json", url: infer(pythonModel), body: jsonBody}, model: pyModel, stubs: stubs.pids},
		{wrkCase: wrkCase{name: "pytorch-json", url: infer(pythonPeer), body: jsonBody}, model: ptModel, stubs: func() []int { return nil }},
	}
	client := benchClient(slices.Max(o.conc))
	if err := warmUp(client, cases, o.conc); err != nil {
		return err
	}
	marks := markSchedulers(pyModel, ptModel)
	res := map[string]map[int][]result{}
	for _, sc := range cases {
		res[sc.name] = map[int][]result{}
	}
	for r := 0; r < o.rounds; r++ {
		for _, c := range o.conc {
			for _, sc := range inRoundOrder(cases, r) {
				x, err := runStubbed(o, dir, sc, c)
				if err != nil {
					return err
				}
				res[sc.name][c] = append(res[sc.name][c], x)
			}
		}
	}
	printPython(o, seed, res, load0, wake)
	printSchedulers(marks)
	fmt.Printf("\nload average: %s at start, %s at end\n", load0, machine.LoadAvg())
	return nil
}

// warmUp loads each case for a moment at every level with the Go client,
// which checks the answers (wrk counts only the status): the stubs' first
// forwards, which TorchScript's profiling executor makes slow, and the
// connections are not measured. The two models must answer alike.
func warmUp(client *http.Client, cases []servedCase, levels []int) error {
	var first []float64
	for _, sc := range cases {
		out, err := outputOf(client, sc.url, sc.body)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		if first == nil {
			first = out
		} else if err := sameOutputs(first, out); err != nil {
			return fmt.Errorf("%s answers unlike %s: %w", sc.name, cases[0].name, err)
		}
		t := target{name: sc.name, url: func(string) string { return sc.url }, body: sc.body}
		for _, c := range levels {
			if _, err := load(client, t, sc.model.Name, c, 500*time.Millisecond); err != nil {
				return fmt.Errorf("warming up %s: %w", sc.name, err)
			}
		}
	}
	return nil
}

// printPython prints -backend python's table, each level's pair figures
// and, beside them, issue 18's python goal as a reference.
func printPython(o options, seed *modelconfig.ModelConfig, res map[string]map[int][]result, load0, wake string) {
	n := instanceCount(seed)
	db := seed.GetDynamicBatching()
	fmt.Printf("servingbench: backend python: %s (model.py, %s) beside %s (pytorch backend, the same model.pt), one HTTP frontend;\n", pythonModel, o.seed, pythonPeer)
	fmt.Printf("both: %d instances, max_batch_size %d, preferred_batch_size %v, max_queue_delay %d us; OMP_NUM_THREADS=1\n",
		n, seed.GetMaxBatchSize(), db.GetPreferredBatchSize(), db.GetMaxQueueDelayMicroseconds())
	fmt.Printf("wrk -t1/2 (Lua script), one-row JSON, %d rounds x %v, the two alternated every round (reversed on odd ones); load %s at start\n",
		o.rounds, o.duration, load0)
	conc := o.execConc
	if conc == "" {
		conc = "auto, the default"
	}
	fmt.Printf("python backend execute-concurrency: %s\n", conc)
	fmt.Printf("machine: %s\n", wake)
	fmt.Printf("medians of rounds; server CPU: this process's; stubs: the python instances' processes\n")
	fmt.Printf("%-14s %5s %10s %12s %14s %13s %11s\n", "case", "conc", "p50 us", "req/s", "server us/req", "stubs us/req", "wrk us/req")
	for _, c := range o.conc {
		for _, name := range []string{"python-json", "pytorch-json"} {
			m := median(res[name][c])
			stub := fmt.Sprintf("%.1f", us(m.stubCPU))
			if name == "pytorch-json" {
				stub = "-" // no stubs
			}
			fmt.Printf("%-14s %5d %10.1f %12.0f %14.1f %13s %11.1f\n", name, c, us(m.p50), m.throughput, us(m.cpu), stub, us(m.clientCPU))
		}
	}
	limit := goals.PythonOverPytorch(n)
	for _, c := range o.conc {
		p, t := res["python-json"][c], res["pytorch-json"][c]
		tr, tlo, thi := pairedRange(p, t, throughputRatio)
		over, olo, ohi := pairedRange(p, t, p50Over)
		fmt.Printf("conc %3d: throughput python/pytorch %.2f (%.2f-%.2f over %d pairs); p50 python - pytorch %+.1f us (%+.1f to %+.1f); CPU per request python (server + stubs) / pytorch %.2f\n",
			c, tr, tlo, thi, min(len(p), len(t)), over, olo, ohi, paired(p, t, totalCPURatio))
		fmt.Printf("          reference, not checked here: issue 18's python goal, p50 over pytorch <= %.0f us with %d instances (bench/python checks it in process); with wrk through the server %+.1f us\n",
			us(limit), n, over)
	}
	fmt.Println()
}

// totalCPURatio is a's CPU per request, server and stubs, over b's.
func totalCPURatio(a, b result) float64 {
	return float64(a.cpu+a.stubCPU) / float64(max(b.cpu+b.stubCPU, 1))
}
