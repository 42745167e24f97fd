// Command schedulingbench measures the sequence batcher and ensembles
// against their plain counterparts in one run, through tritonserver's HTTP
// frontend in this process (repository, scheduler, httpapi: the code
// cmd/tritonserver wires), with the fake backend's simulated compute
// (-delay-us per Execute call, so batching pays as it does for a model):
//
//	dynamic            acc_dynamic: an INT32 [1] model with dynamic batching,
//	                   requests outside any sequence (the plain path)
//	seq-direct         acc_direct: the same model under the sequence batcher's
//	                   direct strategy (START, END, READY controls); every
//	                   client runs sequences of -seq-len requests
//	seq-oldest         acc_oldest: the oldest strategy with a CORRID control
//	seq-oldest-state   acc_state: the oldest strategy with an implicit state
//	                   the server carries (sequence_batching.state)
//	two-calls          the client calls step_a, then step_b with step_a's
//	                   output (two HTTP round trips)
//	ensemble           ens: an ensemble of step_a then step_b (one round trip)
//
// Every model has max_batch_size 8 and -instances instances. Each case
// runs at each concurrency (default 1 and 64) for -duration, for -rounds
// rounds in alternating order; medians over rounds of p50, p99 and
// throughput are printed with the ratios the goals are stated in: each
// sequence case against dynamic (goal: within 1.2x), ensemble against
// two-calls (goal: faster).
//
// Usage (from the repository root): go run ./bench/scheduling
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/bench/internal/machine"
	"github.com/tritonbuild/tritonbuild/bench/internal/sweep"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

type options struct {
	duration  time.Duration
	rounds    int
	conc      []int
	delayUs   int
	instances int
	seqLen    int
}

func main() {
	var o options
	var conc string
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "time per case, concurrency and round")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds (alternating case order)")
	flag.StringVar(&conc, "c", "1,64", "concurrencies")
	flag.IntVar(&o.delayUs, "delay-us", 200, "simulated compute per Execute call of the fake backend")
	flag.IntVar(&o.instances, "instances", 1, "instances per model")
	flag.IntVar(&o.seqLen, "seq-len", 16, "requests per sequence")
	flag.Parse()
	var err error
	if o.conc, err = sweep.Levels(conc); err != nil {
		fmt.Fprintln(os.Stderr, "schedulingbench: -c:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "schedulingbench:", err)
		os.Exit(1)
	}
}

const accModel = `backend: "fake"
max_batch_size: 8
parameters { key: "fake_mode" value { string_value: "%s" } }
parameters { key: "fake_delay_us" value { string_value: "%d" } }
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
instance_group [{ kind: KIND_CPU count: %d }]
`

const controls = `control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] }] }`

const stepModel = `backend: "fake"
max_batch_size: 8
parameters { key: "fake_delay_us" value { string_value: "%d" } }
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_CPU count: %d }]
dynamic_batching { }
`

const ensembleModel = `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step [
  { model_name: "step_a" model_version: -1 input_map { key: "INPUT__0" value: "IN" } output_map { key: "OUTPUT__0" value: "MID" } },
  { model_name: "step_b" model_version: -1 input_map { key: "INPUT__0" value: "MID" } output_map { key: "OUTPUT__0" value: "OUT" } }
] }
`

func writeRepository(o options, root string) error {
	acc := func(mode string) string { return fmt.Sprintf(accModel, mode, o.delayUs, o.instances) }
	// Candidates for every client's sequence, so that no strategy waits
	// in the backlog at the highest concurrency; direct has 8 slots per
	// instance, as Triton's max_batch_size gives it.
	cand := (slices.Max(o.conc) + o.instances - 1) / o.instances
	models := map[string]string{
		"acc_dynamic": acc("accumulate") + "dynamic_batching { }\n",
		"acc_direct":  acc("accumulate") + "sequence_batching {\n  max_sequence_idle_microseconds: 60000000\n  direct { }\n  " + controls + "\n  ]\n}\n",
		"acc_oldest": acc("accumulate") + fmt.Sprintf("sequence_batching {\n  max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: %d }\n  ", cand) +
			controls + `,
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
  ]
}
`,
		"acc_state": acc("statesum") + fmt.Sprintf("sequence_batching {\n  max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: %d }\n", cand) +
			`  state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [1] initial_state { data_type: TYPE_INT32 dims: [1] zero_data: true name: "zero" } }]
}
`,
		"step_a": fmt.Sprintf(stepModel, o.delayUs, o.instances),
		"step_b": fmt.Sprintf(stepModel, o.delayUs, o.instances),
		"ens":    ensembleModel,
	}
	for name, cfg := range models {
		if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// client is one concurrent caller; call sends its next request (or pair)
// and checks the answer. A client stops only when done: a sequence client
// finishes the sequence it is in, so that no slot stays bound to an
// abandoned sequence for the next measurement.
type client interface {
	call(ctx context.Context) error
	done() bool
}

type httpClient struct {
	c   *http.Client
	url string
}

func (h *httpClient) post(ctx context.Context, model string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", model, resp.StatusCode, b)
	}
	return b, nil
}

type outputs struct {
	Outputs []struct {
		Name string    `json:"name"`
		Data []float64 `json:"data"`
	} `json:"outputs"`
}

func firstOutput(b []byte) ([]float64, error) {
	var o outputs
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, err
	}
	if len(o.Outputs) != 1 {
		return nil, fmt.Errorf("response has %d outputs: %s", len(o.Outputs), b)
	}
	return o.Outputs[0].Data, nil
}

func fp32Body(name string, x []float64) []byte {
	b, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": name, "datatype": "FP32", "shape": []int{1, 4}, "data": x}}})
	return b
}

// seqClient runs sequences of n requests of one model, checking that each
// answer is its sequence's running sum (the fake models accumulate).
type seqClient struct {
	h       *httpClient
	model   string
	seq     bool
	n, step int
	id      uint64
	sum     int64
}

func (s *seqClient) done() bool { return s.step == 0 }

func (s *seqClient) call(ctx context.Context) error {
	v := int64(s.step + 1)
	params := map[string]any{}
	if s.seq {
		params = map[string]any{"sequence_id": s.id, "sequence_start": s.step == 0, "sequence_end": s.step == s.n-1}
	}
	body, _ := json.Marshal(map[string]any{"parameters": params,
		"inputs": []any{map[string]any{"name": "IN", "datatype": "INT32", "shape": []int{1, 1}, "data": []int64{v}}}})
	b, err := s.h.post(ctx, s.model, body)
	if err != nil {
		return err
	}
	out, err := firstOutput(b)
	if err != nil {
		return err
	}
	s.sum += v
	// Outside a sequence the fake accumulate model sums per batch row, so
	// only the sequence cases have a sum to check.
	if s.seq && (len(out) != 1 || int64(out[0]) != s.sum) {
		return fmt.Errorf("%s sequence %d step %d: got %v, want %d", s.model, s.id, s.step, out, s.sum)
	}
	s.step++
	if s.step == s.n {
		s.step, s.sum = 0, 0
		s.id += 1 << 20 // a new sequence, never one of another client's
	}
	return nil
}

// linearClient sends row, one FP32 row, either to the ensemble or to
// step_a and then step_b; both must give want.
type linearClient struct {
	h        *httpClient
	ensemble bool
	row      []float64
	want     []float64
}

func (l *linearClient) done() bool { return true }

func (l *linearClient) call(ctx context.Context) error {
	out, err := l.answer(ctx)
	if err != nil {
		return err
	}
	if !slices.Equal(out, l.want) {
		return fmt.Errorf("got %v, want %v", out, l.want)
	}
	return nil
}

// answer returns the numbers the ensemble or the two calls give for row.
func (l *linearClient) answer(ctx context.Context) ([]float64, error) {
	if l.ensemble {
		b, err := l.h.post(ctx, "ens", fp32Body("IN", l.row))
		if err != nil {
			return nil, err
		}
		return firstOutput(b)
	}
	b, err := l.h.post(ctx, "step_a", fp32Body("INPUT__0", l.row))
	if err != nil {
		return nil, err
	}
	mid, err := firstOutput(b)
	if err != nil {
		return nil, err
	}
	if b, err = l.h.post(ctx, "step_b", fp32Body("INPUT__0", mid)); err != nil {
		return nil, err
	}
	return firstOutput(b)
}

type result struct {
	p50, p99   time.Duration
	throughput float64 // calls per second
	n          int
}

// measure runs c clients of newClient for d and returns the latencies of
// their calls.
func measure(d time.Duration, c int, newClient func(i int) client) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		calls    atomic.Int64
	)
	clients := make([]client, c)
	for i := range clients {
		clients[i] = newClient(i)
	}
	// A short warm-up per client, not timed.
	for _, cl := range clients[:1] {
		if err := cl.call(ctx); err != nil {
			return result{}, err
		}
	}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for _, cl := range clients {
		wg.Add(1)
		go func(cl client) {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1024)
			for time.Now().Before(deadline) || !cl.done() {
				t0 := time.Now()
				if err := cl.call(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				mine = append(mine, time.Since(t0))
				calls.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(cl)
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	if len(lat) == 0 {
		return result{}, errors.New("no call completed")
	}
	slices.Sort(lat)
	return result{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], throughput: float64(calls.Load()) / el.Seconds(), n: len(lat)}, nil
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

func run(o options) error {
	ctx := context.Background()
	load0 := machine.LoadAvg()
	dir, err := os.MkdirTemp("", "schedulingbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeRepository(o, dir); err != nil {
		return err
	}
	mgr, err := repository.New(repository.Options{Repositories: []string{dir}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true})
	if err != nil {
		return err
	}
	defer mgr.Close(ctx)
	if err := mgr.LoadAll(ctx); err != nil {
		return err
	}
	url, stop, err := serve(httpapi.New(httpapi.Options{Manager: mgr}))
	if err != nil {
		return err
	}
	defer stop()
	maxConc := slices.Max(o.conc)
	hc := &httpClient{c: &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * maxConc, MaxIdleConnsPerHost: 4 * maxConc, DisableCompression: true}}, url: url}

	// The ensemble's numbers are the two calls' numbers.
	row := []float64{0.5, -1, 2, 0.25}
	want, err := (&linearClient{h: hc, row: row}).answer(ctx)
	if err != nil {
		return err
	}

	type bench struct {
		name string
		new  func(i int) client
	}
	seq := func(model string, isSeq bool) func(int) client {
		return func(i int) client {
			return &seqClient{h: hc, model: model, seq: isSeq, n: o.seqLen, id: uint64(i + 1)}
		}
	}
	cases := []bench{
		{"dynamic", seq("acc_dynamic", false)},
		{"seq-direct", seq("acc_direct", true)},
		{"seq-oldest", seq("acc_oldest", true)},
		{"seq-oldest-state", seq("acc_state", true)},
		{"two-calls", func(int) client { return &linearClient{h: hc, row: row, want: want} }},
		{"ensemble", func(int) client { return &linearClient{h: hc, ensemble: true, row: row, want: want} }},
	}
	results := map[string]map[int][]result{}
	for _, c := range cases {
		results[c.name] = map[int][]result{}
	}
	for r := 0; r < o.rounds; r++ {
		order := slices.Clone(cases)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			for _, conc := range o.conc {
				res, err := measure(o.duration, conc, c.new)
				if err != nil {
					return fmt.Errorf("%s at c=%d: %w", c.name, conc, err)
				}
				results[c.name][conc] = append(results[c.name][conc], res)
			}
		}
	}
	med := func(name string, conc int) result {
		rs := results[name][conc]
		return result{
			p50:        sweep.Median(rs, func(r result) time.Duration { return r.p50 }),
			p99:        sweep.Median(rs, func(r result) time.Duration { return r.p99 }),
			throughput: sweep.Median(rs, func(r result) float64 { return r.throughput }),
		}
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f us", float64(d)/1e3) }
	fmt.Printf("schedulingbench: fake backend, %d us per Execute, %d instance(s) per model, sequences of %d, %v per case x %d rounds; load before %s, after %s\n\n",
		o.delayUs, o.instances, o.seqLen, o.duration, o.rounds, load0, machine.LoadAvg())
	fmt.Println("| case | c | p50 | p99 | calls/s | spread of p50 over rounds |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, c := range cases {
		for _, conc := range o.conc {
			m := med(c.name, conc)
			var lo, hi time.Duration
			for i, r := range results[c.name][conc] {
				if i == 0 || r.p50 < lo {
					lo = r.p50
				}
				if r.p50 > hi {
					hi = r.p50
				}
			}
			fmt.Printf("| %s | %d | %s | %s | %.0f | %s - %s |\n", c.name, conc, us(m.p50), us(m.p99), m.throughput, us(lo), us(hi))
		}
	}
	fmt.Println()
	for _, conc := range o.conc {
		d := med("dynamic", conc)
		for _, name := range []string{"seq-direct", "seq-oldest", "seq-oldest-state"} {
			s := med(name, conc)
			fmt.Printf("c=%d %s vs dynamic: p50 %.2fx, throughput dynamic/%s %.2fx (goal: within 1.2x)\n", conc, name, float64(s.p50)/float64(d.p50), name, d.throughput/s.throughput)
		}
		e, t := med("ensemble", conc), med("two-calls", conc)
		fmt.Printf("c=%d ensemble vs two-calls: p50 %.2fx, throughput ensemble/two-calls %.2fx (goal: faster)\n", conc, float64(e.p50)/float64(t.p50), e.throughput/t.throughput)
	}
	return nil
}
