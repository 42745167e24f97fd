// Package grpcapi is the GRPC frontend: Triton's inference.GRPCInferenceService
// (KServe v2 plus Triton's extensions) and the standard grpc.health.v1
// service, served over a repository.Manager.
//
// Inputs arrive either as typed InferTensorContents or as raw_input_contents;
// both are turned into the backend encoding (raw contents without a copy) and
// checked by the same repository.Model.Validate the HTTP frontend uses.
// Outputs always travel as raw_output_contents, as Triton's own server sends
// them. Errors become GRPC status codes through runtime/status, the one place
// that also maps them to HTTP statuses.
package grpcapi

import (
	stdgzip "compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	// gzip registers itself (deflate in compress.go's init): requests
	// compressed with either are read, the message size limit applying to
	// the inflated message, and answered with the same encoding.
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tritonbuild/tritonbuild/runtime/access"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/health"
	"github.com/tritonbuild/tritonbuild/runtime/logging"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
	"github.com/tritonbuild/tritonbuild/runtime/status"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// Options configure a Server.
type Options struct {
	Manager *repository.Manager
	// ID and Version are reported by ServerMetadata.
	ID, Version string
	// Extensions are the protocol extensions reported by ServerMetadata.
	Extensions []string
	// Health answers ServerLive and ServerReady, the same state the HTTP
	// frontend reports; nil means health.New(Manager, true): Triton's
	// default strict readiness.
	Health *health.State
	// ModelControl enables RepositoryModelLoad and RepositoryModelUnload
	// (explicit model control mode); otherwise they answer UNAVAILABLE.
	ModelControl bool
	// MaxStreamInFlight bounds the requests of one ModelStreamInfer stream
	// that run at once; 0 means DefaultMaxStreamInFlight.
	MaxStreamInFlight int
	// Limits bound message sizes, streams, keepalive and connections; the
	// zero value selects the defaults (see Limits).
	Limits Limits
	// Restricted maps API categories to the metadata a call to them must
	// carry, as triton-grpc-protocol-<key> (--grpc-restricted-protocol);
	// others fail UNAVAILABLE with Triton's text.
	Restricted access.Rules
	// ResponseCompression is Triton's --grpc-infer-response-compression-level:
	// "" or "none" sends inference responses uncompressed; "low", "medium"
	// and "high" gzip them (fastest, default and best gzip level) for
	// clients that accept gzip.
	ResponseCompression string
	// SharedMemory holds the system shared-memory regions clients register
	// (--allow-client-shm); nil refuses registrations and shared-memory
	// tensors.
	SharedMemory *sharedmem.Registry
	// Tracing samples requests and serves TraceSetting; nil answers it
	// UNAVAILABLE and traces nothing.
	Tracing *tracing.Manager
	// Logging serves LogSettings; nil answers UNAVAILABLE.
	Logging *logging.Log
	Logger  *slog.Logger
}

// DefaultMaxStreamInFlight is the default bound on concurrently running
// requests of one stream.
const DefaultMaxStreamInFlight = 64

// Server implements pb.GRPCInferenceServiceServer.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer
	opts   Options
	mgr    *repository.Manager
	log    *slog.Logger
	health *readinessHealth // grpc.health.v1
}

// New builds the service; NewGRPCServer serves it.
func New(opts Options) *Server {
	if opts.ID == "" {
		opts.ID = "triton"
	}
	if opts.MaxStreamInFlight <= 0 {
		opts.MaxStreamInFlight = DefaultMaxStreamInFlight
	}
	if opts.Health == nil {
		opts.Health = health.New(opts.Manager, true)
	}
	s := &Server{opts: opts, mgr: opts.Manager, log: opts.Logger, health: newReadinessHealth(opts.Health)}
	// gzip's level is the codec's own process-wide setting; it is set here,
	// before any RPC is served.
	switch strings.ToLower(opts.ResponseCompression) {
	case "low":
		_ = gzip.SetLevel(stdgzip.BestSpeed)
	case "medium":
		_ = gzip.SetLevel(stdgzip.DefaultCompression)
	case "high":
		_ = gzip.SetLevel(stdgzip.BestCompression)
	default:
		s.opts.ResponseCompression = ""
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// register adds the inference and health services to g. ModelInfer is
// served by serveModelInfer, which passes no unary interceptor: g is the
// server NewGRPCServer configures, so none is left out but the
// restriction that serveModelInfer checks itself.
func (s *Server) register(g *grpc.Server) {
	desc := pb.GRPCInferenceService_ServiceDesc
	desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool { return m.MethodName == "ModelInfer" })
	desc.Streams = append(slices.Clone(desc.Streams), grpc.StreamDesc{StreamName: "ModelInfer", Handler: s.serveModelInfer})
	g.RegisterService(&desc, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// NewGRPCServer returns a grpc.Server carrying the services with the
// options' Limits applied (serve it on Limits.Listener's result so that
// the connection bound holds too).
func (s *Server) NewGRPCServer() *grpc.Server {
	opts := append(s.opts.Limits.serverOptions(), grpc.ForceServerCodecV2(newInferCodec()))
	if len(s.opts.Restricted) > 0 {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.restrictUnary), grpc.ChainStreamInterceptor(s.restrictStream))
	}
	g := grpc.NewServer(opts...)
	s.register(g)
	return g
}

// Shutdown marks every service NOT_SERVING on the health service, so that
// load balancers stop sending work before the listener closes.
func (s *Server) Shutdown() { s.health.Shutdown() }

// grpcError converts err to a GRPC status with the code runtime/status maps.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := grpcstatus.FromError(err); ok {
		return err
	}
	return grpcstatus.Error(status.GRPCCode(err), status.Message(err))
}

// compressResponse gzips the inference responses of this RPC when
// ResponseCompression asks for it and the client accepts gzip.
func (s *Server) compressResponse(ctx context.Context) {
	if s.opts.ResponseCompression == "" {
		return
	}
	names, err := grpc.ClientSupportedCompressors(ctx)
	if err == nil && slices.Contains(names, gzip.Name) {
		_ = grpc.SetSendCompressor(ctx, gzip.Name)
	}
}

// ServerLive implements the RPC.
func (s *Server) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: s.opts.Health.Live()}, nil
}

// ServerReady implements the RPC.
func (s *Server) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: s.opts.Health.Ready()}, nil
}

// ModelReady implements the RPC: not ready (rather than an error) for
// models that are unknown or not loaded, as Triton answers, and for models
// whose instances cannot serve.
func (s *Server) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: s.mgr.ModelReady(r.GetName(), r.GetVersion())}, nil
}

// ServerMetadata implements the RPC.
func (s *Server) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: s.opts.ID, Version: s.opts.Version, Extensions: s.opts.Extensions}, nil
}

// ModelMetadata implements the RPC.
func (s *Server) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := s.mgr.Resolve(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	md := &pb.ModelMetadataResponse{Name: m.Name, Platform: m.Platform}
	if r.GetVersion() != "" {
		md.Versions = []string{m.VersionString()}
	} else {
		md.Versions = s.mgr.ReadyVersions(m.Name)
	}
	for i := range m.Inputs {
		t := &m.Inputs[i]
		md.Inputs = append(md.Inputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: string(t.DataType), Shape: m.FullShape(t)})
	}
	for i := range m.Outputs {
		t := &m.Outputs[i]
		md.Outputs = append(md.Outputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: string(t.DataType), Shape: m.FullShape(t)})
	}
	return md, nil
}

// ModelConfig implements the RPC. The loaded config is shared read-only.
func (s *Server) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	m, err := s.mgr.Resolve(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelConfigResponse{Config: m.Config}, nil
}

// ModelInfer implements the RPC.
func (s *Server) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	s.compressResponse(ctx)
	resp, err := s.infer(ctx, r)
	if err != nil && status.Code(err) == backend.Internal {
		// Request errors are the client's business; internal ones are ours.
		s.log.Warn("inference failed", "model", r.GetModelName(), "err", err)
	}
	return resp, grpcError(err)
}

func (s *Server) infer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	start := time.Now()
	tr := s.opts.Tracing.Sample(r.GetModelName(), mdCarrier{ctx})
	if tr == nil {
		return s.inferWith(ctx, r, start, nil)
	}
	model, version := r.GetModelName(), int64(0)
	defer func() {
		tr.SetModel(model, version, r.GetId())
		endTrace(ctx, tr)
	}()
	return s.inferWith(ctx, r, start, func(answered bool, m *repository.Model, req *backend.Request, resp *backend.Response) {
		if m != nil {
			model, version = m.Name, m.Version
		}
		if !answered {
			tr.RequestStart(req)
			return
		}
		tr.RequestEnd(resp)
	})
}

// inferWith runs one inference; seen, when not nil, is told the model and
// the decoded request (answered false), then the response (answered true;
// nil on an error) as they become known.
func (s *Server) inferWith(ctx context.Context, r *pb.ModelInferRequest, start time.Time, seen func(answered bool, m *repository.Model, req *backend.Request, resp *backend.Response)) (*pb.ModelInferResponse, error) {
	m, err := s.mgr.Resolve(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	if m.Decoupled() {
		m.Scheduler.RecordFailure(start)
		return nil, status.DecoupledGRPC.New()
	}
	req, err := decodeRequest(r, s.opts.SharedMemory)
	if err != nil {
		m.Scheduler.RecordFailure(start)
		return nil, err
	}
	version := int64(-1) // a reload may move the request to the new highest version
	if r.GetModelVersion() != "" {
		version = m.Version
	}
	if seen != nil {
		seen(false, m, req, nil)
	}
	m, resp, err := s.mgr.Infer(ctx, m, version, req, start)
	if seen != nil {
		seen(true, m, req, resp)
	}
	if err != nil {
		return nil, err
	}
	return encodeResponse(m, r, resp, s.opts.SharedMemory)
}

// mdCarrier reads the trace context from the request metadata, looking up
// only the keys asked for (no copy of the metadata unless tracing needs it).
type mdCarrier struct{ ctx context.Context }

func (c mdCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(string, string) {}

func (c mdCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// ModelStreamInfer implements the RPC. Requests of one stream run
// concurrently (up to MaxStreamInFlight), as Triton's stream handler
// runs them, and behave as there: each is queued at its model only after
// the one before it (so a sequence sent without waiting for its responses
// reaches the sequence batcher in order), and responses to ordinary
// models go out in the order of their requests, a decoupled model's as it
// sends them. A failed request is answered in band with error_message and
// the stream goes on.
func (s *Server) ModelStreamInfer(stream grpc.BidiStreamingServer[pb.ModelInferRequest, pb.ModelStreamInferResponse]) error {
	ctx := stream.Context()
	s.compressResponse(ctx)
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, s.opts.MaxStreamInFlight)
	send := func(m *pb.ModelStreamInferResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			sendErr = stream.Send(m)
		}
	}
	order := &streamOrder{send: send}
	defer wg.Wait()
	prev := make(chan struct{}) // closed when the previous request is queued
	close(prev)
	for {
		waitStart := time.Now()
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rctx, times := s.streamTimes(ctx, waitStart, time.Now())
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		// The in-flight slot is held until the response is sent: a slow
		// request ahead of finished ones holds their responses, and with
		// them the requests the stream may start.
		done := func() {
			if times != nil {
				times.finish(time.Now())
			}
			<-sem
		}
		// A request is queued once the one before it is: a queued request
		// (or one refused before) lets the next one go.
		after, mine := prev, make(chan struct{})
		prev = mine
		var once sync.Once
		letNext := func() { once.Do(func() { close(mine) }) }
		rctx = scheduler.WithQueued(rctx, letNext)
		var slot *orderedResponse
		if m, err := s.mgr.Resolve(r.GetModelName(), r.GetModelVersion()); err != nil || !m.Decoupled() {
			slot = order.reserve(done)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer letNext()
			select {
			case <-after:
			case <-ctx.Done():
			}
			if slot == nil {
				defer done()
				if s.streamDecoupled(rctx, r, send) {
					return
				}
				// No longer decoupled (reloaded since it arrived): its one
				// response goes out as it comes, as it would have then.
				send(s.streamAnswer(rctx, r))
				return
			}
			// Reloaded as decoupled since it arrived, this is refused with
			// the scheduler's error (its responses can only be streamed).
			order.deliver(slot, s.streamAnswer(rctx, r))
		}()
	}
}

// streamAnswer runs one request of a stream to an ordinary model and
// returns its response message: the response, or the error in band with
// the request's identity, which Triton echoes so that the client can tell
// which request failed.
func (s *Server) streamAnswer(ctx context.Context, r *pb.ModelInferRequest) *pb.ModelStreamInferResponse {
	resp, err := s.infer(ctx, r)
	if err != nil {
		return &pb.ModelStreamInferResponse{
			ErrorMessage:  status.Message(err),
			InferResponse: &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion(), Id: r.GetId()},
		}
	}
	markFinal(resp, true)
	return &pb.ModelStreamInferResponse{InferResponse: resp}
}

// streamOrder sends the responses of a stream's requests to ordinary
// models in the order the requests came, as Triton's stream handler
// does: a finished response waits for those of earlier requests. Its
// queue holds at most the stream's in-flight requests.
type streamOrder struct {
	mu      sync.Mutex
	queue   []*orderedResponse // oldest first
	sending bool               // a deliver is sending the queue's head
	send    func(*pb.ModelStreamInferResponse)
}

// orderedResponse is one request's place in a streamOrder.
type orderedResponse struct {
	msg   *pb.ModelStreamInferResponse
	ready bool
	sent  func() // runs once the response is sent
}

// reserve takes the next place in the order; sent runs once the response
// given to deliver for it has been sent.
func (o *streamOrder) reserve(sent func()) *orderedResponse {
	r := &orderedResponse{sent: sent}
	o.mu.Lock()
	o.queue = append(o.queue, r)
	o.mu.Unlock()
	return r
}

// deliver gives r its response and sends every response that is now
// first in line. One deliverer sends at a time, the others leave their
// responses to it, so the order holds; the lock is not held while a send
// waits for the client, so that the stream goes on reading requests.
func (o *streamOrder) deliver(r *orderedResponse, msg *pb.ModelStreamInferResponse) {
	o.mu.Lock()
	r.msg, r.ready = msg, true
	if o.sending {
		o.mu.Unlock()
		return
	}
	o.sending = true
	for {
		n := 0
		for n < len(o.queue) && o.queue[n].ready {
			n++
		}
		if n == 0 {
			o.sending = false
			o.mu.Unlock()
			return
		}
		heads := slices.Clone(o.queue[:n])
		clear(o.queue[:n])
		o.queue = o.queue[n:]
		o.mu.Unlock()
		for _, h := range heads {
			o.send(h.msg)
			h.sent()
		}
		o.mu.Lock()
	}
}

// ModelStatistics implements the RPC.
func (s *Server) ModelStatistics(_ context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	models, err := s.mgr.StatsModels(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.ModelStatisticsResponse{ModelStats: make([]*pb.ModelStatistics, 0, len(models))}
	for _, m := range models {
		st := m.Scheduler.Stats()
		ms := &pb.ModelStatistics{
			Name: m.Name, Version: m.VersionString(), LastInference: uint64(max(st.LastInference, 0)),
			InferenceCount: st.InferenceCount, ExecutionCount: st.ExecutionCount,
			InferenceStats: &pb.InferStatistics{
				Success: dur(st.Success), Fail: dur(st.Fail), Queue: dur(st.Queue),
				ComputeInput: dur(st.ComputeInput), ComputeInfer: dur(st.ComputeInfer), ComputeOutput: dur(st.ComputeOutput),
				CacheHit: dur(st.CacheHit), CacheMiss: dur(st.CacheMiss),
			},
		}
		for _, b := range st.Batches {
			ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{
				BatchSize: uint64(b.BatchSize), ComputeInput: dur(b.ComputeInput),
				ComputeInfer: dur(b.ComputeInfer), ComputeOutput: dur(b.ComputeOutput),
			})
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	return out, nil
}

// RepositoryIndex implements the RPC.
func (s *Server) RepositoryIndex(_ context.Context, r *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	idx := s.mgr.Index(r.GetReady())
	out := &pb.RepositoryIndexResponse{Models: make([]*pb.RepositoryIndexResponse_ModelIndex, 0, len(idx))}
	for _, e := range idx {
		out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{
			Name: e.Name, Version: e.Version, State: string(e.State), Reason: status.Redact(e.Reason),
		})
	}
	return out, nil
}

// RepositoryModelLoad implements the RPC. parameters["config"] (string or
// bytes) carries a JSON model configuration overriding config.pbtxt.
func (s *Server) RepositoryModelLoad(ctx context.Context, r *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if !s.opts.ModelControl {
		return nil, grpcError(repository.ControlDisabled())
	}
	if r.GetModelName() == "" {
		return nil, grpcError(backend.Errorf(backend.InvalidArg, "a model name is required"))
	}
	var cfg []byte
	var files map[string][]byte
	for k, p := range r.GetParameters() {
		if path, ok := strings.CutPrefix(k, "file:"); ok {
			// Triton's file overrides: the file's content as bytes.
			v, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BytesParam)
			if !ok {
				return nil, grpcError(backend.Errorf(backend.InvalidArg, "load parameter '%s' of model '%s' must be bytes", k, r.GetModelName()))
			}
			if files == nil {
				files = map[string][]byte{}
			}
			files[path] = v.BytesParam
			continue
		}
		switch k {
		case "config":
			switch v := p.GetParameterChoice().(type) {
			case *pb.ModelRepositoryParameter_StringParam:
				cfg = []byte(v.StringParam)
			case *pb.ModelRepositoryParameter_BytesParam:
				cfg = v.BytesParam
			default:
				return nil, grpcError(backend.Errorf(backend.InvalidArg, "load parameter 'config' of model '%s' must be a string holding JSON", r.GetModelName()))
			}
		default:
			return nil, grpcError(backend.Errorf(backend.Unsupported, "load parameter '%s' of model '%s' is not supported", k, r.GetModelName()))
		}
	}
	if err := s.mgr.LoadModelFiles(ctx, r.GetModelName(), cfg, files); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload implements the RPC.
func (s *Server) RepositoryModelUnload(ctx context.Context, r *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if !s.opts.ModelControl {
		return nil, grpcError(repository.ControlDisabled())
	}
	if r.GetModelName() == "" {
		return nil, grpcError(backend.Errorf(backend.InvalidArg, "a model name is required"))
	}
	// unload_dependents: an ensemble's composing models go with it. As
	// Triton, a value that is no bool_param is refused, not read as false.
	var dependents bool
	if p, ok := r.GetParameters()["unload_dependents"]; ok {
		b, isBool := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BoolParam)
		if !isBool {
			return nil, grpcError(backend.Errorf(backend.InvalidArg, "invalid value type for 'unload_dependents' parameter, expected bool_param."))
		}
		dependents = b.BoolParam
	}
	if err := s.mgr.UnloadModel(ctx, r.GetModelName(), dependents); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}

func dur(d scheduler.Duration) *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.Count, Ns: d.Ns}
}
