package grpcapi

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

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

// serveModelInfer serves ModelInfer as grpc-go serves a unary method
// (receive the request, run the handler, send the response: its unary
// wrapper does exactly this), registered as a stream that is neither
// client- nor server-streaming, which grpc-go treats as unary everywhere
// else too. Doing it here gives traced calls Triton's transport times
// without a stats handler, which grpc-go otherwise feeds an allocated
// event per step of every RPC and copies every call's request metadata
// and response headers and trailers for, traced or not (18 of 96 Go
// allocations and a tenth of the server's instructions per call under 64
// one-stream connections). The times: GRPC_WAITREAD_START when the call
// began (its headers had arrived; Triton's also counts the wait for
// them), GRPC_WAITREAD_END once its message was read, GRPC_SEND_END once
// the response was handed to the transport, or for an error status when
// the handler returns it; the trace ends there. ModelStreamInfer notes
// the same times per request (streamTimes).
func (s *Server) serveModelInfer(_ any, stream grpc.ServerStream) error {
	ctx := stream.Context()
	var ct *callTimes
	if s.opts.Tracing.Active() {
		ct = &callTimes{begin: time.Now()}
		ctx = context.WithValue(ctx, callTimesKey{}, ct)
	}
	r := new(pb.ModelInferRequest)
	if err := stream.RecvMsg(r); err != nil {
		return err
	}
	if ct != nil {
		ct.mu.Lock()
		ct.read = time.Now()
		ct.mu.Unlock()
	}
	// Registered as a stream, the call passes no unary interceptor: the
	// restriction that one would check comes here, after the read as it
	// did there.
	if len(s.opts.Restricted) > 0 {
		if err := s.allowed(ctx, pb.GRPCInferenceService_ModelInfer_FullMethodName); err != nil {
			return err
		}
	}
	resp, err := s.ModelInfer(ctx, r)
	if err == nil {
		err = stream.SendMsg(resp)
	}
	if ct != nil {
		ct.finish(time.Now())
	}
	return err
}

type callTimesKey struct{}

// callTimes are the transport times of one request: a ModelInfer call or
// one request of a stream.
type callTimes struct {
	mu          sync.Mutex
	begin, read time.Time
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
// call) ends its trace here.
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
