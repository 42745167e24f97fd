package grpcapi

import (
	"context"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/logging"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// LogSettings implements the RPC (Triton's logging extension): the named
// settings change, all of them are answered. Each setting must carry the
// value kind Triton's server expects.
func (s *Server) LogSettings(_ context.Context, r *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	l := s.opts.Logging
	if l == nil {
		return nil, grpcError(backend.Errorf(backend.Unavailable, "the server does not support dynamic logging"))
	}
	var u logging.Update
	for name, v := range r.GetSettings() {
		wrong := func(want string) error {
			return grpcError(backend.Errorf(backend.InvalidArg, "expect %s for log setting '%s'", want, name))
		}
		switch name {
		case "log_file":
			f, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_StringParam)
			if !ok {
				return nil, wrong("a string_param")
			}
			u.File = &f.StringParam
		case "log_info", "log_warning", "log_warnings", "log_error", "log_errors":
			b, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_BoolParam)
			if !ok {
				return nil, wrong("a bool_param")
			}
			switch name {
			case "log_info":
				u.Info = &b.BoolParam
			case "log_warning", "log_warnings":
				u.Warning = &b.BoolParam
			default:
				u.Error = &b.BoolParam
			}
		case "log_verbose_level":
			n, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_Uint32Param)
			if !ok {
				return nil, wrong("a uint32_param")
			}
			u.Verbose = &n.Uint32Param
		case "log_format":
			f, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_StringParam)
			if !ok {
				return nil, wrong("a string_param")
			}
			u.Format = &f.StringParam
		default:
			return nil, grpcError(backend.Errorf(backend.InvalidArg, "unknown log setting '%s' (known: log_file, log_info, log_warning, log_error, log_verbose_level, log_format)", name))
		}
	}
	st, err := l.Apply(u)
	if err != nil {
		return nil, grpcError(err)
	}
	str := func(v string) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: v}}
	}
	boolean := func(v bool) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: v}}
	}
	return &pb.LogSettingsResponse{Settings: map[string]*pb.LogSettingsResponse_SettingValue{
		"log_file":          str(st.File),
		"log_info":          boolean(st.Info),
		"log_warning":       boolean(st.Warning),
		"log_error":         boolean(st.Error),
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: st.Verbose}},
		"log_format":        str(st.Format),
	}}, nil
}
