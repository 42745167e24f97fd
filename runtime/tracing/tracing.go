// Package tracing is Triton's trace extension: sampled inference requests
// record their activities (REQUEST_START, QUEUE_START, COMPUTE_START,
// COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END, REQUEST_END), the
// frontends their transport's (HTTP_RECV_START/END, HTTP_SEND_START/END;
// GRPC_WAITREAD_START/END, GRPC_SEND_START/END; INFER_RESPONSE_COMPLETE)
// and, at level TENSORS, the input and output tensors. Settings are global
// or per model and change at run time (/v2[/models/M]/trace/setting, gRPC
// TraceSetting) with Triton's fallback rule: a model's unset fields follow
// the global ones.
//
// Mode "triton" writes Triton's JSON trace records to the trace file (one
// array; with log_frequency N, every N traces to FILE.0, FILE.1, ...).
// Mode "opentelemetry" exports spans over OTLP/HTTP with the OpenTelemetry
// SDK (an InferRequest root span with the frontend's timestamps as events,
// a span named after the model with the request's, a "compute" span), and
// a request carrying a W3C traceparent is traced whatever the rate, as
// Triton does.
//
// When no setting traces anything, Sample is one atomic load: the request
// path pays nothing for tracing that is off.
package tracing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Level bits, Triton's trace levels.
const (
	LevelTimestamps = 1 << iota
	LevelTensors
)

// Modes.
const (
	ModeTriton        = "triton"
	ModeOpenTelemetry = "opentelemetry"
)

// Setting is one effective trace setting.
type Setting struct {
	Level        int // LevelTimestamps|LevelTensors bits; 0 is OFF
	Rate         uint32
	Count        int32 // remaining traces, -1 without limit
	LogFrequency uint32
	File         string
}

// invalid says why s traces nothing, "" when it traces.
func (s Setting) invalid(mode string) string {
	switch {
	case s.Level == 0:
		return "tracing is disabled"
	case s.Rate == 0:
		return "sample rate must be non-zero"
	case mode == ModeTriton && s.File == "":
		return "trace file name is not given"
	}
	return ""
}

// Options configure a Manager: the --trace-config settings.
type Options struct {
	Mode   string  // ModeTriton (default) or ModeOpenTelemetry
	Global Setting // the global setting at startup
	// OpenTelemetry holds the "opentelemetry,<setting>=<value>" settings:
	// url, resource (repeatable, key=value), bsp_max_queue_size,
	// bsp_schedule_delay, bsp_max_export_batch_size.
	OpenTelemetry [][2]string
	Logger        *slog.Logger
}

// override is what a trace setting request specified for a model: nil
// fields follow the global setting.
type override struct {
	level        *int
	rate         *uint32
	count        *int32
	logFrequency *uint32
}

// sampler is one effective setting with its sampling state.
type sampler struct {
	Setting
	mu   sync.Mutex
	seen uint64
	out  *traceFile
}

// Manager samples requests and owns the trace output.
type Manager struct {
	mode string
	log  *slog.Logger
	otel *otelExporter

	mu        sync.Mutex // settings updates
	defaults  Setting    // the startup global setting
	global    *sampler
	overrides map[string]*override
	models    map[string]*sampler // effective per-model samplers

	// active is true when some setting may trace; Sample reads only it
	// when tracing is off.
	active atomic.Bool
	files  map[string]*traceFile
	ids    atomic.Uint64
}

// New returns a manager; with Mode opentelemetry it starts the exporter.
func New(opts Options) (*Manager, error) {
	if opts.Mode == "" {
		opts.Mode = ModeTriton
	}
	if opts.Mode != ModeTriton && opts.Mode != ModeOpenTelemetry {
		return nil, fmt.Errorf("invalid value for trace mode option: %s. Available options are \"triton\" and \"opentelemetry\"", opts.Mode)
	}
	m := &Manager{mode: opts.Mode, log: opts.Logger, overrides: map[string]*override{}, models: map[string]*sampler{}, files: map[string]*traceFile{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if opts.Mode == ModeOpenTelemetry {
		exp, err := newOtelExporter(opts.OpenTelemetry)
		if err != nil {
			return nil, err
		}
		m.otel = exp
	}
	m.defaults = opts.Global
	m.global = m.newSampler(opts.Global)
	m.refresh()
	return m, nil
}

func (m *Manager) newSampler(s Setting) *sampler {
	sp := &sampler{Setting: s}
	if m.mode == ModeTriton && s.File != "" {
		f := m.files[s.File]
		if f == nil {
			f = &traceFile{name: s.File}
			m.files[s.File] = f
		}
		sp.out = f
	}
	return sp
}

// refresh recomputes the model samplers from the overrides and the active
// flag. The caller holds m.mu (or owns m).
func (m *Manager) refresh() {
	active := m.global.invalid(m.mode) == ""
	for name, o := range m.overrides {
		s := m.global.Setting
		if o.level != nil {
			s.Level = *o.level
		}
		if o.rate != nil {
			s.Rate = *o.rate
		}
		if o.count != nil {
			s.Count = *o.count
		}
		if o.logFrequency != nil {
			s.LogFrequency = *o.logFrequency
		}
		if old := m.models[name]; old == nil || old.Setting != s {
			m.models[name] = m.newSampler(s)
		}
		active = active || s.invalid(m.mode) == ""
	}
	for name := range m.models {
		if m.overrides[name] == nil {
			delete(m.models, name)
		}
	}
	// A propagated OpenTelemetry context is traced at any rate, so the
	// OpenTelemetry mode is active whenever a level is on.
	if m.mode == ModeOpenTelemetry && m.global.Level != 0 {
		active = true
	}
	m.active.Store(active)
}

func (m *Manager) sampler(model string) *sampler {
	if s := m.models[model]; s != nil {
		return s
	}
	return m.global
}

// Active reports whether some setting may trace a request: the gRPC
// frontend notes a call's transport timestamps only then.
func (m *Manager) Active() bool { return m != nil && m.active.Load() }

// Sample decides whether a request for model is traced and returns its
// trace, or nil. carrier reads the request's headers (HTTP header or gRPC
// metadata) for a W3C trace context; it may be nil.
func (m *Manager) Sample(model string, carrier Carrier) *Trace {
	if m == nil || !m.active.Load() {
		return nil
	}
	m.mu.Lock()
	sp := m.sampler(model)
	m.mu.Unlock()
	var parent context.Context
	if m.otel != nil && carrier != nil && sp.Level != 0 {
		if ctx, ok := m.otel.extract(carrier); ok {
			parent = ctx
		}
	}
	if parent == nil && !sp.take(m.mode) {
		return nil
	}
	return &Trace{m: m, sp: sp, id: m.ids.Add(1), parent: parent, level: sp.Level}
}

// take applies rate and count.
func (sp *sampler) take(mode string) bool {
	if sp.invalid(mode) != "" {
		return false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.Count == 0 {
		return false
	}
	sp.seen++
	if sp.seen%uint64(sp.Rate) != 0 {
		return false
	}
	if sp.Count > 0 {
		sp.Count--
	}
	return true
}

// Trace is one traced request. Its methods are safe for concurrent use.
type Trace struct {
	m      *Manager
	sp     *sampler
	id     uint64
	parent context.Context
	level  int

	mu      sync.Mutex
	model   string
	version int64
	request string
	events  []event
	tensors []tensorRecord
}

type event struct {
	name string
	at   time.Time
}

type tensorRecord struct {
	activity string
	t        backend.Tensor
}

// Activity implements backend.Trace.
func (t *Trace) Activity(name string, at time.Time) {
	if t == nil || t.level&LevelTimestamps == 0 {
		return
	}
	t.mu.Lock()
	t.events = append(t.events, event{name, at})
	t.mu.Unlock()
}

// SetModel names the model version and request id the trace is for.
func (t *Trace) SetModel(name string, version int64, requestID string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.model, t.version, t.request = name, version, requestID
	t.mu.Unlock()
}

// Tensors records tensors for the TENSORS level with activity
// TENSOR_QUEUE_INPUT or TENSOR_BACKEND_OUTPUT.
func (t *Trace) Tensors(activity string, ts []backend.Tensor) {
	if t == nil || t.level&LevelTensors == 0 {
		return
	}
	t.mu.Lock()
	for _, x := range ts {
		// Copied: request data lives in buffers the frontend reuses.
		x.Data = append([]byte(nil), x.Data...)
		x.Shape = append([]int64(nil), x.Shape...)
		t.tensors = append(t.tensors, tensorRecord{activity, x})
	}
	t.mu.Unlock()
}

// Wants reports whether the trace records tensors.
func (t *Trace) Wants(level int) bool { return t != nil && t.level&level != 0 }

// End completes the trace: written out (triton) or exported
// (opentelemetry).
func (t *Trace) End() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Activities arrive from the frontend's and the instance's goroutines.
	sort.SliceStable(t.events, func(i, j int) bool { return t.events[i].at.Before(t.events[j].at) })
	if t.m.otel != nil {
		t.m.otel.export(t)
		return
	}
	t.sp.write(t.records())
}

// records renders the trace as Triton's JSON records.
func (t *Trace) records() []byte {
	var b []byte
	id := strconv.FormatUint(t.id, 10)
	b = append(b, `{"id":`+id+`,"model_name":`...)
	name, _ := json.Marshal(t.model)
	b = append(b, name...)
	b = append(b, `,"model_version":`...)
	b = strconv.AppendInt(b, t.version, 10)
	if t.request != "" {
		rid, _ := json.Marshal(t.request)
		b = append(b, `,"request_id":`...)
		b = append(b, rid...)
	}
	b = append(b, '}')
	for _, e := range t.events {
		b = append(b, `,{"id":`+id+`,"timestamps":[{"name":"`+e.name+`","ns":`...)
		b = strconv.AppendInt(b, e.at.UnixNano(), 10)
		b = append(b, "}]}"...)
	}
	for _, r := range t.tensors {
		rec := map[string]any{"id": t.id, "activity": r.activity, "tensor": map[string]string{
			"name": r.t.Name, "data": tensorText(&r.t), "shape": shapeText(r.t.Shape), "dtype": string(r.t.DataType),
		}}
		j, _ := json.Marshal(rec)
		b = append(b, ',')
		b = append(b, j...)
	}
	return b
}

// write appends one trace's records to the output: the trace file, or
// with a log frequency (or a count that ran out) the next indexed file.
func (sp *sampler) write(rec []byte) {
	if sp.out == nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.out.add(rec, sp.LogFrequency, sp.Count >= 0, sp.Count == 0)
}

// traceFile is one trace file name's output.
type traceFile struct {
	name string

	mu      sync.Mutex
	f       *os.File // the single file (no log frequency), "[" written
	batch   []byte   // traces waiting for the next indexed file
	inBatch uint32
	index   int
	err     error
}

// add takes one trace's records. Without a log frequency and a count
// they go straight to the single file; otherwise they wait for the next
// indexed file, written every `every` traces or when the count ran out
// (Triton's rule; the traces a finite count collects are bounded by it).
func (f *traceFile) add(rec []byte, every uint32, finite, countDone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if every == 0 && !finite {
		f.append(rec)
		return
	}
	if f.inBatch > 0 {
		f.batch = append(f.batch, ',')
	}
	f.batch = append(f.batch, rec...)
	f.inBatch++
	if countDone || (every > 0 && f.inBatch >= every) {
		f.flushIndexed()
	}
}

// append writes rec to the single trace file, which holds one JSON array
// closed by Close.
func (f *traceFile) append(rec []byte) {
	if f.err != nil {
		return
	}
	sep := []byte{','}
	if f.f == nil {
		f.f, f.err = os.OpenFile(f.name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if f.err != nil {
			return
		}
		sep = []byte{'['}
	}
	_, f.err = f.f.Write(append(sep, rec...))
}

func (f *traceFile) flushIndexed() {
	if f.inBatch == 0 {
		return
	}
	name := f.name + "." + strconv.Itoa(f.index)
	f.index++
	data := append(append([]byte{'['}, f.batch...), ']')
	if err := atomicfile.WriteFile(name, data, 0o644); err != nil && f.err == nil {
		f.err = err
	}
	f.batch, f.inBatch = f.batch[:0], 0
}

func (f *traceFile) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushIndexed()
	if f.f != nil {
		if _, err := f.f.Write([]byte{']'}); err != nil && f.err == nil {
			f.err = err
		}
		if err := f.f.Close(); err != nil && f.err == nil {
			f.err = err
		}
		f.f = nil
	}
	if f.err != nil {
		return fmt.Errorf("writing trace file %s: %w", f.name, f.err)
	}
	return nil
}

// Close writes out what the trace files hold and stops the exporter.
func (m *Manager) Close(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active.Store(false)
	var errs []string
	for _, f := range m.files {
		if err := f.close(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if m.otel != nil {
		if err := m.otel.shutdown(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("closing traces: %s", strings.Join(errs, "; "))
	}
	return nil
}

func shapeText(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, ",")
}

// RequestStart hands the trace to req, just decoded, and records the
// core's REQUEST_START and, at level TENSORS, the inputs. A request that
// already carries a trace keeps it and records nothing.
func (t *Trace) RequestStart(req *backend.Request) {
	if t == nil || req.Trace != nil {
		return
	}
	req.Trace = t
	t.Activity("REQUEST_START", time.Now())
	t.Tensors("TENSOR_QUEUE_INPUT", req.Inputs)
}

// RequestEnd records the end of a traced request in the server's core
// (INFER_RESPONSE_COMPLETE and REQUEST_END: the model's response is ready,
// the frontend has yet to send it) and, at level TENSORS, resp's outputs
// (resp is nil after an error, or where the frontend streams the
// responses). The frontend records its send timestamps after it and then
// calls End.
func (t *Trace) RequestEnd(resp *backend.Response) {
	if t == nil {
		return
	}
	if resp != nil && resp.Outputs != nil {
		t.Tensors("TENSOR_BACKEND_OUTPUT", resp.Outputs)
	}
	// The frontend has the response when the core ends the request: the
	// two are one moment here, recorded in Triton's order.
	now := time.Now()
	t.Activity("INFER_RESPONSE_COMPLETE", now)
	t.Activity("REQUEST_END", now)
}
