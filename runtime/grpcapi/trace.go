package grpcapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// TraceSetting implements the RPC (Triton's trace extension): a setting
// with no values is cleared.
func (s *Server) TraceSetting(_ context.Context, r *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	t := s.opts.Tracing
	if t == nil {
		return nil, grpcError(backend.Errorf(backend.Unavailable, "the server does not support tracing"))
	}
	model := r.GetModelName()
	if model != "" {
		if _, err := s.mgr.Resolve(model, ""); err != nil {
			return nil, grpcError(backend.Errorf(backend.InvalidArg, "Request for unknown model : %s", model))
		}
	}
	if len(r.GetSettings()) > 0 {
		upd := make(map[string][]string, len(r.GetSettings()))
		for k, v := range r.GetSettings() {
			upd[k] = v.GetValue()
		}
		if err := t.Update(model, upd); err != nil {
			return nil, grpcError(err)
		}
	}
	out := &pb.TraceSettingResponse{Settings: map[string]*pb.TraceSettingResponse_SettingValue{}}
	for k, v := range t.Settings(model) {
		out.Settings[k] = &pb.TraceSettingResponse_SettingValue{Value: v}
	}
	return out, nil
}

// traceStats is a stats.Handler that gives traced ModelInfer calls
// Triton's transport timestamps: GRPC_WAITREAD_START when the call began
// (its headers arrived; Triton's also counts the wait for them),
// GRPC_WAITREAD_END when its message was read, GRPC_SEND_END when the
// response was written. The trace is only known once the handler has the
// model's name, so the times wait in the call's context until then, and
// the trace ends here, after the send. ModelStreamInfer notes the same
// times per request itself (streamTimes).
//
// grpc-go calls HandleRPC for every event of every RPC; tagged counts the
// calls in flight that carry times, so that while nothing is traced an
// event costs an atomic load rather than a walk up the call's context.
type traceStats struct {
	m      *tracing.Manager
	tagged *atomic.Int64
}

func newTraceStats(m *tracing.Manager) traceStats {
	return traceStats{m: m, tagged: new(atomic.Int64)}
}

type callTimesKey struct{}

// callTimes are the transport times of one request: a ModelInfer call or
// one request of a stream.
type callTimes struct {
	mu          sync.Mutex
	begin, read time.Time
	sent        time.Time
	tr          *tracing.Trace // set by the handler for a sampled request
}

// finish records GRPC_SEND_END at and ends the request's trace, if it
// has one.
func (ct *callTimes) finish(at time.Time) {
	ct.mu.Lock()
	tr := ct.tr
	ct.tr = nil
	ct.mu.Unlock()
	if tr != nil {
		tr.Activity("GRPC_SEND_END", at)
		tr.End()
	}
}

func (h traceStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName != pb.GRPCInferenceService_ModelInfer_FullMethodName || !h.m.Active() {
		return ctx
	}
	h.tagged.Add(1) // until its End
	return context.WithValue(ctx, callTimesKey{}, &callTimes{})
}

func (h traceStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	if h.tagged.Load() == 0 {
		return
	}
	ct, _ := ctx.Value(callTimesKey{}).(*callTimes)
	if ct == nil {
		return
	}
	ct.mu.Lock()
	switch st := st.(type) {
	case *stats.Begin:
		ct.begin = st.BeginTime
	case *stats.InPayload:
		ct.read = st.RecvTime
	case *stats.OutPayload:
		ct.sent = st.SentTime
	case *stats.End:
		h.tagged.Add(-1)
		sent := ct.sent
		if sent.IsZero() { // an error status: sent with the trailers
			sent = st.EndTime
		}
		ct.mu.Unlock()
		ct.finish(sent)
		return
	}
	ct.mu.Unlock()
}

func (traceStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (traceStats) HandleConn(context.Context, stats.ConnStats) {}

// streamTimes gives one request of a stream, read between waitStart and
// readEnd, a context carrying its transport times when tracing may
// sample it; the caller calls finish on the result (when not nil) once
// the request's response is sent.
func (s *Server) streamTimes(ctx context.Context, waitStart, readEnd time.Time) (context.Context, *callTimes) {
	if !s.opts.Tracing.Active() {
		return ctx, nil
	}
	ct := &callTimes{begin: waitStart, read: readEnd}
	return context.WithValue(ctx, callTimesKey{}, ct), ct
}

// endTrace records the handler's end of a traced request
// (GRPC_SEND_START: the response goes to the transport) with the read
// times noted for it, and leaves the trace for whoever sends the response
// to end. A request without noted times (tracing switched on during the
// call, or a server without the stats handler) ends its trace here.
func endTrace(ctx context.Context, tr *tracing.Trace) {
	now := time.Now()
	ct, _ := ctx.Value(callTimesKey{}).(*callTimes)
	if ct == nil {
		tr.Activity("GRPC_SEND_START", now)
		tr.End()
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if !ct.begin.IsZero() {
		tr.Activity("GRPC_WAITREAD_START", ct.begin)
	}
	if !ct.read.IsZero() {
		tr.Activity("GRPC_WAITREAD_END", ct.read)
	}
	tr.Activity("GRPC_SEND_START", now)
	ct.tr = tr
}
