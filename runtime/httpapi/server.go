// Package httpapi is the HTTP/REST frontend: the KServe v2 protocol with
// Triton's extensions (binary tensor data, statistics, model configuration,
// repository index), served with net/http over a repository.Manager.
//
// Request tensors are decoded straight into the backend encoding: binary
// inputs are slices of the request body (no copy), JSON data arrays are
// scanned without building []any. Errors are answered as {"error": "..."}
// with the status that runtime/status assigns.
package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tritonbuild/tritonbuild/runtime/access"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/health"
	"github.com/tritonbuild/tritonbuild/runtime/logging"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
	"github.com/tritonbuild/tritonbuild/runtime/status"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// HeaderLength is the binary tensor extension's header naming the length of
// the JSON part of a body.
const HeaderLength = "Inference-Header-Content-Length"

// DefaultMaxInputSize is Triton's default --http-max-input-size (64 MiB).
const DefaultMaxInputSize = 64 << 20

// Extensions are the protocol extensions this frontend implements.
var Extensions = []string{"binary_tensor_data", "model_configuration", "model_repository", "statistics", "schedule_policy", "sequence", "logging", "classification", "system_shared_memory", "trace", "parameters"}

// Options configure a Server.
type Options struct {
	Manager *repository.Manager
	// ID is the server name reported by GET /v2 (--id).
	ID string
	// Version is the server version reported by GET /v2.
	Version string
	// MaxInputSize refuses request bodies larger than this many bytes;
	// 0 means DefaultMaxInputSize.
	MaxInputSize int64
	// Health answers /v2/health/live and /v2/health/ready, the same state
	// the gRPC frontend reports; nil means health.New(Manager, true):
	// Triton's default strict readiness.
	Health *health.State
	// ModelControl enables the repository load and unload endpoints
	// (explicit model control mode); otherwise they answer Unavailable.
	ModelControl bool
	// Limits bound connections and request bodies; the zero value selects
	// the defaults (see Limits).
	Limits Limits
	// Restricted maps API categories to the header a request to them must
	// carry (--http-restricted-api); others answer 403 with Triton's text.
	Restricted access.Rules
	// SharedMemory holds the system shared-memory regions clients register
	// (--allow-client-shm); nil refuses registrations and shared-memory
	// tensors.
	SharedMemory *sharedmem.Registry
	// Tracing samples requests and serves the trace settings; nil answers
	// the settings endpoints Unavailable and traces nothing.
	Tracing *tracing.Manager
	// Logging serves /v2/logging; nil answers Unavailable.
	Logging *logging.Log
	Logger  *slog.Logger
}

// Server is an http.Handler serving the v2 protocol.
type Server struct {
	opts Options
	mgr  *repository.Manager
	mux  *http.ServeMux
	log  *slog.Logger
	bufs sync.Pool // *[]byte request bodies and response headers
	zip  compressors
	// unzip keeps the decoders of compressed request bodies.
	unzip decompressors
}

// New builds the handler.
func New(opts Options) *Server {
	if opts.MaxInputSize <= 0 {
		opts.MaxInputSize = DefaultMaxInputSize
	}
	if opts.ID == "" {
		opts.ID = "triton"
	}
	if opts.Health == nil {
		opts.Health = health.New(opts.Manager, true)
	}
	// Resolved once: a default (the connection bound asks the kernel for
	// the open-file limit) is not worth a system call per request.
	opts.Limits = opts.Limits.withDefaults()
	s := &Server{opts: opts, mgr: opts.Manager, mux: http.NewServeMux(), log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	m := s.mux
	m.HandleFunc("GET /v2/health/live", s.live)
	m.HandleFunc("GET /v2/health/ready", s.ready)
	m.HandleFunc("GET /v2", s.serverMetadata)
	m.HandleFunc("GET /v2/{$}", s.serverMetadata)
	for _, p := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		m.HandleFunc("GET "+p, s.modelMetadata)
		m.HandleFunc("GET "+p+"/ready", s.modelReady)
		m.HandleFunc("GET "+p+"/config", s.modelConfig)
		m.HandleFunc("POST "+p+"/infer", s.infer)
		m.HandleFunc("POST "+p+"/generate", s.generate(false))
		m.HandleFunc("POST "+p+"/generate_stream", s.generate(true))
		m.HandleFunc("GET "+p+"/stats", s.stats)
		m.HandleFunc("GET "+p+"/trace/setting", s.traceSetting)
		m.HandleFunc("POST "+p+"/trace/setting", s.traceSetting)
	}
	m.HandleFunc("GET /v2/models/stats", s.stats)
	m.HandleFunc("POST /v2/repository/index", s.repositoryIndex)
	m.HandleFunc("POST /v2/repository/models/{model}/load", s.loadModel)
	m.HandleFunc("POST /v2/repository/models/{model}/unload", s.unloadModel)
	s.routeSharedMemory(m)
	m.HandleFunc("GET /v2/trace/setting", s.traceSetting)
	m.HandleFunc("POST /v2/trace/setting", s.traceSetting)
	m.HandleFunc("GET /v2/logging", s.logging)
	m.HandleFunc("POST /v2/logging", s.logging)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := otherMethods(m, r); len(allow) > 0 {
			// An endpoint asked with the wrong method: 405, as Triton
			// answers it, naming the methods it takes.
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErrorText(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		writeError(w, backend.Errorf(backend.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s
}

// otherMethods lists the methods that m routes r's path under, when r's
// own method found no route but the catch-all.
func otherMethods(m *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, method := range [...]string{http.MethodGet, http.MethodPost} {
		if method == r.Method {
			continue
		}
		probe := &http.Request{Method: method, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := m.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, method)
		}
	}
	return allow
}

// ServeHTTP implements http.Handler: restricted APIs first, then the
// routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(s.opts.Restricted) > 0 {
		if err := s.opts.Restricted.Check(category(r.URL.Path), "API", "", r.Header.Values); err != nil {
			writeError(w, err)
			return
		}
	}
	if model, version, ok := inferRoute(r); ok {
		// The route a client's load takes, found without the mux: its
		// pattern matching and path values cost as much as a cached
		// answer's lookup.
		s.inferAt(w, r, model, version)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// inferRoute recognises POST /v2/models/{model}[/versions/{version}]/infer
// where the mux would route it to infer with the same values: a clean path
// (the mux redirects others) of non-empty segments, escaped the default
// way (no RawPath, so Path's segments are the wildcards' values).
func inferRoute(r *http.Request) (model, version string, ok bool) {
	if r.Method != http.MethodPost || r.URL.RawPath != "" {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/models/")
	if !ok {
		return "", "", false
	}
	if rest, ok = strings.CutSuffix(rest, "/infer"); !ok {
		return "", "", false
	}
	model, rest, versioned := strings.Cut(rest, "/")
	if versioned {
		if version, ok = strings.CutPrefix(rest, "versions/"); !ok || !routeSegment(version) {
			return "", "", false
		}
	}
	if !routeSegment(model) {
		return "", "", false
	}
	return model, version, true
}

// routeSegment reports whether s is one clean, non-empty path segment.
func routeSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// category is the API group of an endpoint path, as --http-restricted-api
// names them; "" for paths that are no endpoint.
func category(path string) access.Category {
	switch {
	case strings.HasPrefix(path, "/v2/health/"):
		return access.Health
	case strings.HasPrefix(path, "/v2/repository/"):
		return access.ModelRepository
	case strings.HasPrefix(path, "/v2/systemsharedmemory"), strings.HasPrefix(path, "/v2/cudasharedmemory"):
		return access.SharedMemory
	case strings.HasPrefix(path, "/v2/trace"):
		return access.Trace
	case strings.HasPrefix(path, "/v2/logging"):
		return access.Logging
	case path == "/v2/models/stats":
		return access.Statistics
	case strings.HasPrefix(path, "/v2/models/"):
		// The endpoint is what follows the model (and version) segments,
		// as the routes read it: a model may be named "trace", "ready" or
		// "infer" itself.
		rest := path[len("/v2/models/"):]
		for _, e := range [...]struct {
			suffix string
			cat    access.Category
		}{
			{"/trace/setting", access.Trace},
			{"/ready", access.Health},
			// generate runs the model as infer does: the same category, so
			// that restricting inference leaves no way around it.
			{"/infer", access.Inference},
			{"/generate", access.Inference},
			{"/generate_stream", access.Inference},
			{"/config", access.ModelConfig},
			{"/stats", access.Statistics},
		} {
			if model, ok := strings.CutSuffix(rest, e.suffix); ok && model != "" {
				return e.cat
			}
		}
		return access.Metadata
	case path == "/v2", path == "/v2/":
		return access.Metadata
	}
	return ""
}

// Mux exposes the route table so that other frontends (model control) can
// add endpoints with the same error conventions.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// WriteError answers err as {"error": msg} with its mapped status.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

func writeError(w http.ResponseWriter, err error) {
	writeErrorText(w, status.HTTPStatus(err), status.Message(err))
}

// writeErrorText answers code with Triton's error body, {"error": msg}.
func writeErrorText(w http.ResponseWriter, code int, msg string) {
	b := append([]byte(`{"error":`), appendJSONString(nil, []byte(msg))...)
	b = append(b, '}')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, backend.Errorf(backend.Internal, "encoding response: %w", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func (s *Server) live(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(status.HTTPHealth(s.opts.Health.Live()))
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(status.HTTPHealth(s.opts.Health.Ready()))
}

type serverMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, serverMetadata{Name: s.opts.ID, Version: s.opts.Version, Extensions: Extensions})
}

// model resolves the {model} and optional {version} path values.
func (s *Server) model(r *http.Request) (*repository.Model, error) {
	return s.mgr.Resolve(r.PathValue("model"), r.PathValue("version"))
}

type tensorMetadata struct {
	Name     string           `json:"name"`
	Datatype backend.DataType `json:"datatype"`
	Shape    []int64          `json:"shape"`
}

type modelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []tensorMetadata `json:"inputs"`
	Outputs  []tensorMetadata `json:"outputs"`
}

func (s *Server) modelMetadata(w http.ResponseWriter, r *http.Request) {
	m, err := s.model(r)
	if err != nil {
		writeError(w, err)
		return
	}
	md := modelMetadata{Name: m.Name, Platform: m.Platform}
	if r.PathValue("version") != "" {
		md.Versions = []string{m.VersionString()}
	} else {
		md.Versions = s.mgr.ReadyVersions(m.Name)
	}
	for i := range m.Inputs {
		t := &m.Inputs[i]
		md.Inputs = append(md.Inputs, tensorMetadata{t.Name, t.DataType, m.FullShape(t)})
	}
	for i := range m.Outputs {
		t := &m.Outputs[i]
		md.Outputs = append(md.Outputs, tensorMetadata{t.Name, t.DataType, m.FullShape(t)})
	}
	writeJSON(w, md)
}

// modelReady answers not-ready (rather than an error) for models that are
// unknown or not loaded, as Triton does, and for models whose instances
// cannot serve.
func (s *Server) modelReady(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(status.HTTPHealth(s.mgr.ModelReady(r.PathValue("model"), r.PathValue("version"))))
}

func (s *Server) modelConfig(w http.ResponseWriter, r *http.Request) {
	m, err := s.model(r)
	if err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(m.ConfigJSON)))
	_, _ = w.Write(m.ConfigJSON)
}

type indexRequest struct {
	Ready bool `json:"ready"`
}

func (s *Server) repositoryIndex(w http.ResponseWriter, r *http.Request) {
	var req indexRequest
	body, err := s.readAll(w, r, maxControlBody)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "failed to parse the request JSON: %w", err))
			return
		}
	}
	idx := s.mgr.Index(req.Ready)
	if idx == nil {
		idx = []repository.IndexEntry{}
	}
	for i := range idx {
		idx[i].Reason = status.Redact(idx[i].Reason)
	}
	writeJSON(w, idx)
}

type modelStatsJSON struct {
	Name           string                 `json:"name"`
	Version        string                 `json:"version"`
	LastInference  int64                  `json:"last_inference"`
	InferenceCount uint64                 `json:"inference_count"`
	ExecutionCount uint64                 `json:"execution_count"`
	InferenceStats inferenceStatsJSON     `json:"inference_stats"`
	BatchStats     []scheduler.BatchStats `json:"batch_stats"`
	MemoryUsage    []struct{}             `json:"memory_usage"`
}

type inferenceStatsJSON struct {
	Success       scheduler.Duration `json:"success"`
	Fail          scheduler.Duration `json:"fail"`
	Queue         scheduler.Duration `json:"queue"`
	ComputeInput  scheduler.Duration `json:"compute_input"`
	ComputeInfer  scheduler.Duration `json:"compute_infer"`
	ComputeOutput scheduler.Duration `json:"compute_output"`
	CacheHit      scheduler.Duration `json:"cache_hit"`
	CacheMiss     scheduler.Duration `json:"cache_miss"`
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	models, err := s.mgr.StatsModels(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		ModelStats []modelStatsJSON `json:"model_stats"`
	}{ModelStats: []modelStatsJSON{}}
	for _, m := range models {
		st := m.Scheduler.Stats()
		ms := modelStatsJSON{
			Name: m.Name, Version: m.VersionString(), LastInference: st.LastInference,
			InferenceCount: st.InferenceCount, ExecutionCount: st.ExecutionCount,
			InferenceStats: inferenceStatsJSON{
				Success: st.Success, Fail: st.Fail, Queue: st.Queue,
				ComputeInput: st.ComputeInput, ComputeInfer: st.ComputeInfer, ComputeOutput: st.ComputeOutput,
				CacheHit: st.CacheHit, CacheMiss: st.CacheMiss,
			},
			BatchStats: st.Batches, MemoryUsage: []struct{}{},
		}
		if ms.BatchStats == nil {
			ms.BatchStats = []scheduler.BatchStats{}
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	writeJSON(w, out)
}

// maxControlBody bounds the bodies of the endpoints other than infer
// (index, logging, trace and shared-memory settings), which are small JSON
// documents.
const maxControlBody = 1 << 20

// readBody reads the whole request body into a pooled buffer, refusing
// bodies over the limit before reading them when Content-Length is known.
// The buffer grows with what arrives rather than with what Content-Length
// announces, so a body that never completes holds only what it sent.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, start time.Time) (*[]byte, error) {
	limit := s.opts.MaxInputSize
	if r.ContentLength > limit {
		return nil, tooLargeBody(r.ContentLength, limit)
	}
	var body bodyReader // read here: no allocation for the readers
	if err := s.openBody(&body, w, r, limit, start); err != nil {
		return nil, err
	}
	defer s.closeBody(&body)
	bp := s.bufs.Get().(*[]byte)
	buf := (*bp)[:0]
	if want := min(r.ContentLength, preallocate); want > 0 && int64(cap(buf)) < want {
		buf = make([]byte, 0, want)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*bp = buf
			s.putBuf(bp)
			return nil, bodyError(err, limit)
		}
	}
	*bp = buf
	return bp, nil
}

// preallocate is the most of an announced Content-Length allocated before
// the bytes arrive.
const preallocate = 1 << 20

// readAll reads a small control body (index, load, unload) within limit.
func (s *Server) readAll(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLargeBody(r.ContentLength, limit)
	}
	body, err := s.body(w, r, limit)
	if err != nil {
		return nil, err
	}
	defer s.closeBody(body)
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, bodyError(err, limit)
	}
	return b, nil
}

func tooLargeBody(n, limit int64) error {
	return backend.Errorf(backend.TooLarge, "request body of %d bytes exceeds the maximum allowed value of %d bytes (--http-max-input-size)", n, limit)
}

func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	var be *backend.Error
	switch {
	case errors.As(err, &mbe):
		return backend.Errorf(backend.TooLarge, "request body exceeds the maximum allowed value of %d bytes (--http-max-input-size)", limit)
	case errors.As(err, &be):
		return be
	}
	return backend.Errorf(backend.InvalidArg, "reading request body: %w", err)
}

func (s *Server) putBuf(bp *[]byte) {
	if cap(*bp) > 8<<20 {
		return // do not pin very large buffers in the pool
	}
	*bp = (*bp)[:0]
	s.bufs.Put(bp)
}

func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	s.inferAt(w, r, r.PathValue("model"), r.PathValue("version"))
}

// inferAt serves an infer request for model and version (the path's, ""
// when it names none).
func (s *Server) inferAt(w http.ResponseWriter, r *http.Request, model, version string) {
	start := time.Now()
	tw := s.sample(w, r, model, start)
	if tw == nil {
		s.inferWith(w, r, model, version, start, nil)
		return
	}
	defer tw.end()
	tr := tw.tr
	s.inferWith(tw, r, model, version, start, func(st inferStage, m *repository.Model, req *backend.Request, resp *backend.Response) {
		tw.model(m)
		switch st {
		case stageRead:
			tr.Activity("HTTP_RECV_END", time.Now())
		case stageDecoded:
			tw.decoded(req)
		case stageAnswered:
			tr.RequestEnd(resp)
		}
	})
}

// sample starts the trace of a request when tracing samples it: it
// notes HTTP_RECV_START and returns the writer to answer through, or nil.
// The frontend's timestamps are Triton's: HTTP_RECV_START/END (the body
// read) and HTTP_SEND_START/END (the answer written) around the core's
// REQUEST_START..REQUEST_END; the trace ends once the answer is written.
func (s *Server) sample(w http.ResponseWriter, r *http.Request, model string, start time.Time) *traceWriter {
	tr := s.opts.Tracing.Sample(model, propagation.HeaderCarrier(r.Header))
	if tr == nil {
		return nil
	}
	tr.Activity("HTTP_RECV_START", start)
	return &traceWriter{ResponseWriter: w, tr: tr, name: model}
}

// traceWriter answers a traced request: it notes HTTP_SEND_START when
// the answer's first byte (or its status) is written, and what the trace
// is for as it becomes known.
type traceWriter struct {
	http.ResponseWriter
	tr      *tracing.Trace
	sending bool
	name    string
	version int64
	id      string
}

// model notes the model version the request resolved to (m may be nil).
func (w *traceWriter) model(m *repository.Model) {
	if m != nil {
		w.name, w.version = m.Name, m.Version
	}
}

// decoded notes the decoded request (its id, and the core's
// REQUEST_START).
func (w *traceWriter) decoded(req *backend.Request) {
	w.id = req.ID
	w.tr.RequestStart(req)
}

// end notes HTTP_SEND_END and ends the trace; call it once the answer is
// written.
func (w *traceWriter) end() {
	w.tr.Activity("HTTP_SEND_END", time.Now())
	w.tr.SetModel(w.name, w.version, w.id)
	w.tr.End()
}

func (w *traceWriter) sendStart() {
	if !w.sending {
		w.sending = true
		w.tr.Activity("HTTP_SEND_START", time.Now())
	}
}

func (w *traceWriter) WriteHeader(code int) {
	w.sendStart()
	w.ResponseWriter.WriteHeader(code)
}

func (w *traceWriter) Write(b []byte) (int, error) {
	w.sendStart()
	return w.ResponseWriter.Write(b)
}

// Flush passes on to the connection, so that generate_stream's events
// still leave one by one.
func (w *traceWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection (read
// deadlines of the body's pacing).
func (w *traceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// inferStage names the points of an infer request a trace follows.
type inferStage int

const (
	stageRead     inferStage = iota // the body is read
	stageDecoded                    // the request is decoded (req set)
	stageAnswered                   // the model answered (resp set, nil on an error)
)

// inferWith serves an infer request for model and version; seen, when not
// nil, is told each stage with the model, the decoded request and the
// response as they become known.
func (s *Server) inferWith(w http.ResponseWriter, r *http.Request, model, version string, start time.Time, seen func(inferStage, *repository.Model, *backend.Request, *backend.Response)) {
	m, err := s.mgr.Resolve(model, version)
	if err != nil {
		writeError(w, err)
		return
	}
	if m.Decoupled() {
		m.Scheduler.RecordFailure(start)
		writeError(w, status.DecoupledHTTP.New())
		return
	}
	bp, err := s.readBody(w, r, start)
	if seen != nil {
		seen(stageRead, m, nil, nil)
	}
	if err != nil {
		m.Scheduler.RecordFailure(start)
		writeError(w, err)
		return
	}
	defer func() {
		// Binary inputs alias the body. A request given up on (the client
		// went away) may still be queued or executing: its body is left to
		// the collector rather than reused under the instance.
		if r.Context().Err() == nil {
			s.putBuf(bp)
		}
	}()
	req, parsed, err := decodeRequest(*bp, headerValue(r.Header, HeaderLength), m, s.opts.SharedMemory)
	if err != nil {
		m.Scheduler.RecordFailure(start)
		writeError(w, err)
		return
	}
	want := int64(-1) // a reload may move the request to the new highest version
	if version != "" {
		want = m.Version
	}
	if seen != nil {
		seen(stageDecoded, m, req, nil)
	}
	m, resp, err := s.mgr.Infer(r.Context(), m, want, req, start)
	if seen != nil {
		seen(stageAnswered, m, req, resp)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.writeInferResponse(w, m, parsed, resp, responseEncoding(r))
}

// writeInferResponse renders the outputs: JSON data, or binary parts after
// the JSON header when requested; an output with a classification count is
// replaced by its classification. A non-empty enc (gzip, deflate)
// compresses the body.
func (s *Server) writeInferResponse(w http.ResponseWriter, m *repository.Model, req *inferRequest, resp *backend.Response, enc string) {
	outs := resp.Outputs
	// Room for the usual few outputs without allocating.
	var binArr [4]bool
	var selArr [4]*backend.Tensor
	binary, selected := binArr[:0], selArr[:0]
	var shm []*sharedmem.Ref // per selected output: written to shared memory; nil when none is
	if len(req.Outputs) > 0 {
		for _, ro := range req.Outputs {
			var t *backend.Tensor
			for i := range outs {
				if outs[i].Name == ro.Name {
					t = &outs[i]
					break
				}
			}
			if t == nil {
				writeError(w, backend.Errorf(backend.Internal, "model '%s' did not produce requested output '%s'", m.Name, ro.Name))
				return
			}
			if c := ro.Parameters.Classification; c != nil && *c > 0 {
				ct, err := m.Classify(t, *c)
				if err != nil {
					writeError(w, err)
					return
				}
				t = &ct
			}
			if ref, ok, _ := ro.Parameters.ref("output", ro.Name); ok {
				if err := s.opts.SharedMemory.Write(ro.Name, ref, t.Data); err != nil {
					writeError(w, err)
					return
				}
				if shm == nil {
					shm = make([]*sharedmem.Ref, len(req.Outputs))
				}
				shm[len(selected)] = &ref
			}
			selected = append(selected, t)
			bin := req.Parameters.BinaryDataOutput
			if ro.Parameters.BinaryData != nil {
				bin = *ro.Parameters.BinaryData
			}
			binary = append(binary, bin)
		}
	} else {
		for i := range outs {
			selected = append(selected, &outs[i])
			binary = append(binary, req.Parameters.BinaryDataOutput)
		}
	}
	for i, t := range selected {
		if binary[i] || (shm != nil && shm[i] != nil) {
			continue
		}
		if err := refuseJSONOutput(t); err != nil {
			writeError(w, err)
			return
		}
	}
	if err := checkRendered(m, req, resp, selected, binary); err != nil {
		writeError(w, err)
		return
	}
	hp := s.bufs.Get().(*[]byte)
	defer s.putBuf(hp)
	b := (*hp)[:0]
	b = append(b, '{')
	if req.ID != "" {
		b = append(b, `"id":`...)
		b = appendJSONString(b, []byte(req.ID))
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = appendJSONString(b, []byte(m.Name))
	b = append(b, `,"model_version":"`...)
	b = strconv.AppendInt(b, m.Version, 10)
	b = append(b, '"')
	if len(resp.Parameters) > 0 {
		b = append(b, `,"parameters":`...)
		b = appendParameters(b, resp.Parameters)
	}
	b = append(b, `,"outputs":[`...)
	var binLen int
	for i, t := range selected {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, []byte(t.Name))
		b = append(b, `,"datatype":"`...)
		b = append(b, t.DataType...)
		b = append(b, `","shape":[`...)
		for k, d := range t.Shape {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
		if shm != nil && shm[i] != nil {
			// In shared memory: the parameters say where, with the size
			// written.
			binary[i] = false
			b = append(b, `,"parameters":{"shared_memory_region":`...)
			b = appendJSONString(b, []byte(shm[i].Region))
			b = append(b, `,"shared_memory_offset":`...)
			b = strconv.AppendUint(b, shm[i].Offset, 10)
			b = append(b, `,"shared_memory_byte_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data)), 10)
			b = append(b, "}}"...)
			continue
		}
		if binary[i] {
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data)), 10)
			b = append(b, "}}"...)
			binLen += len(t.Data)
			continue
		}
		b = append(b, `,"data":`...)
		var ok bool
		if b, ok = appendData(b, t); !ok {
			*hp = b
			writeError(w, backend.Errorf(backend.Internal, "output '%s' of model '%s' has malformed %s data", t.Name, m.Name, t.DataType))
			return
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	*hp = b
	h := w.Header()
	if binLen == 0 {
		if enc != "" {
			h.Set("Content-Type", "application/json")
			s.zip.writeCompressed(w, enc, b)
			return
		}
		setHeaders(h, "Content-Type", "application/json", "Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		return
	}
	var partArr [5][]byte
	parts := append(partArr[:0], b)
	for i, t := range selected {
		if binary[i] {
			parts = append(parts, t.Data)
		}
	}
	if enc != "" {
		setHeaders(h, "Content-Type", "application/octet-stream", HeaderLength, strconv.Itoa(len(b)))
		s.zip.writeCompressed(w, enc, parts...)
		return
	}
	// Both lengths spelled in one string: one allocation, not two.
	var lenArr [40]byte
	lens := strconv.AppendInt(lenArr[:0], int64(len(b)), 10)
	split := len(lens)
	all := string(strconv.AppendInt(lens, int64(len(b)+binLen), 10))
	setHeaders(h, "Content-Type", "application/octet-stream", HeaderLength, all[:split], "Content-Length", all[split:])
	if binLen <= joinBelow {
		// Small outputs are copied after the JSON part: one Write through
		// net/http's buffers instead of one per part.
		for _, p := range parts[1:] {
			b = append(b, p...)
		}
		*hp = b
		_, _ = w.Write(b)
		return
	}
	for _, p := range parts {
		_, _ = w.Write(p)
	}
}

// joinBelow is the most binary output data copied into the response's
// JSON buffer to write it at once; larger outputs are written from where
// the backend left them.
const joinBelow = 4 << 10

// headerValue is h.Get(key) for a key in canonical form, as net/http
// stores a request's keys: Get canonicalizes its key on every call, which
// showed in the profile of a request answered from the response cache.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// setHeaders sets each of the canonical header keys of kv (key, value,
// key, value...) to its one value, as Header.Set does, with one
// allocation for all the values instead of one each.
func setHeaders(h http.Header, kv ...string) {
	vals := make([]string, len(kv)/2)
	for i := range vals {
		vals[i] = kv[2*i+1]
		h[kv[2*i]] = vals[i : i+1 : i+1]
	}
}

// appendParameters appends response parameters as a JSON object, keys in
// sorted order so that equal responses render equally.
func appendParameters(b []byte, params map[string]any) []byte {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	n := 0
	for _, k := range keys {
		start := len(b)
		if n > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, []byte(k))
		b = append(b, ':')
		switch v := params[k].(type) {
		case string:
			b = appendJSONString(b, []byte(v))
		case bool:
			b = strconv.AppendBool(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case uint64:
			b = strconv.AppendUint(b, v, 10)
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				b = b[:start] // JSON has no spelling for them
				continue
			}
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		default:
			b = b[:start]
			continue
		}
		n++
	}
	return append(b, '}')
}

// checkRendered bounds the rendered response before it is built: JSON
// text can take several times the bytes of the tensor it spells out, so
// the worst case of each output's rendering (binary parts exactly) must
// stay within the model's response limit.
func checkRendered(m *repository.Model, req *inferRequest, resp *backend.Response, selected []*backend.Tensor, binary []bool) error {
	limit := m.MaxResponse()
	if limit <= 0 {
		return nil
	}
	// Fixed members, the id and the model name, escaped at worst.
	bound := 128 + 6*int64(len(req.ID)+len(m.Name))
	for k, v := range resp.Parameters {
		bound += 32 + 6*int64(len(k))
		if s, ok := v.(string); ok {
			bound += 6 * int64(len(s))
		}
	}
	for i, t := range selected {
		bound += 96 + 6*int64(len(t.Name)) + 21*int64(len(t.Shape))
		if binary[i] {
			bound += int64(len(t.Data))
		} else {
			bound += jsonBound(t)
		}
	}
	if bound > limit {
		return backend.Errorf(backend.TooLarge, "the JSON response of model '%s' could take up to %d bytes, more than the maximum of %d bytes (--max-response-size); request the outputs as binary data", m.Name, bound, limit)
	}
	return nil
}

// controlRequest is the body of a load or unload request.
type controlRequest struct {
	Parameters map[string]json.RawMessage `json:"parameters"`
}

func (s *Server) readControlRequest(w http.ResponseWriter, r *http.Request) (*controlRequest, error) {
	body, err := s.readAll(w, r, s.opts.MaxInputSize)
	if err != nil {
		return nil, err
	}
	var req controlRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, backend.Errorf(backend.InvalidArg, "failed to parse the request JSON: %w", err)
		}
	}
	return &req, nil
}

// loadModel serves POST /v2/repository/models/{model}/load. The body may
// carry parameters.config, a JSON model configuration (as a string) that
// replaces config.pbtxt for this load.
func (s *Server) loadModel(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ModelControl {
		writeError(w, repository.ControlDisabled())
		return
	}
	name := r.PathValue("model")
	req, err := s.readControlRequest(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var cfg []byte
	var files map[string][]byte
	for k, v := range req.Parameters {
		if path, ok := strings.CutPrefix(k, "file:"); ok {
			// Triton's file overrides: the file's content, base64 encoded.
			var b64 string
			data, err := []byte(nil), json.Unmarshal(v, &b64)
			if err == nil {
				data, err = base64.StdEncoding.DecodeString(b64)
			}
			if err != nil {
				writeError(w, backend.Errorf(backend.InvalidArg, "load parameter '%s' of model '%s' must be a base64 string", k, name))
				return
			}
			if files == nil {
				files = map[string][]byte{}
			}
			files[path] = data
			continue
		}
		if k != "config" {
			writeError(w, backend.Errorf(backend.Unsupported, "load parameter '%s' of model '%s' is not supported", k, name))
			return
		}
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "load parameter 'config' of model '%s' must be a string holding JSON", name))
			return
		}
		cfg = []byte(str)
	}
	if err := s.mgr.LoadModelFiles(r.Context(), name, cfg, files); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// unloadModel serves POST /v2/repository/models/{model}/unload. The body
// may carry parameters.unload_dependents (a boolean): an ensemble's
// composing models are unloaded with it.
func (s *Server) unloadModel(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ModelControl {
		writeError(w, repository.ControlDisabled())
		return
	}
	req, err := s.readControlRequest(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("model")
	var dependents bool
	if v, ok := req.Parameters["unload_dependents"]; ok {
		if err := json.Unmarshal(v, &dependents); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "unload parameter 'unload_dependents' of model '%s' must be a boolean", name))
			return
		}
	}
	if err := s.mgr.UnloadModel(r.Context(), name, dependents); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
