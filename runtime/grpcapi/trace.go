package grpcapi

import (
	"context"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
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
