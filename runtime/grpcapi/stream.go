package grpcapi

import (
	"context"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// finalParam is the response parameter that tells a streaming client a
// request's last response (Triton's "triton_final_response"); emptyFinal
// is the request parameter that asks for a response carrying only that
// flag when the model ends a request without one.
const (
	finalParam = "triton_final_response"
	emptyFinal = "triton_enable_empty_final_response"
)

// markFinal sets the final-response parameter of resp.
func markFinal(resp *pb.ModelInferResponse, final bool) {
	if resp.Parameters == nil {
		resp.Parameters = map[string]*pb.InferParameter{}
	}
	resp.Parameters[finalParam] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}
}

// streamDecoupled serves one request of a ModelStreamInfer stream when it
// names a decoupled model, sending each response as the model produces
// it, and reports whether it did; requests for other models are left to
// the ordinary path.
func (s *Server) streamDecoupled(ctx context.Context, r *pb.ModelInferRequest, send func(*pb.ModelStreamInferResponse)) bool {
	m, err := s.mgr.Resolve(r.GetModelName(), r.GetModelVersion())
	if err != nil || !m.Decoupled() {
		return false
	}
	start := time.Now()
	sendErr := func(err error) {
		resp := &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion(), Id: r.GetId()}
		send(&pb.ModelStreamInferResponse{ErrorMessage: status.Message(err), InferResponse: resp})
	}
	req, err := decodeRequest(r, s.opts.SharedMemory)
	if err != nil {
		m.Scheduler.RecordFailure(start)
		sendErr(err)
		return true
	}
	version := int64(-1)
	if r.GetModelVersion() != "" {
		version = m.Version
	}
	wantEmpty := r.GetParameters()[emptyFinal].GetBoolParam()
	cur := m
	_, err = s.mgr.InferStream(ctx, m, version, req, start, func(resp *backend.Response, final bool) error {
		if resp == nil {
			if final && wantEmpty {
				out := &pb.ModelInferResponse{ModelName: cur.Name, ModelVersion: cur.VersionString(), Id: r.GetId()}
				markFinal(out, true)
				send(&pb.ModelStreamInferResponse{InferResponse: out})
			}
			return nil
		}
		if resp.Err != nil {
			sendErr(resp.Err)
			return nil
		}
		out, err := encodeResponse(cur, r, resp, s.opts.SharedMemory)
		if err != nil {
			sendErr(err)
			return nil
		}
		markFinal(out, final)
		send(&pb.ModelStreamInferResponse{InferResponse: out})
		return nil
	})
	if err != nil && ctx.Err() == nil {
		sendErr(err)
	}
	return true
}

// modelParameters converts a request's parameters for the model, leaving
// out those the server consumes (repository.ReservedParameter).
func modelParameters(ps map[string]*pb.InferParameter) map[string]any {
	var out map[string]any
	for k, p := range ps {
		if repository.ReservedParameter(k) {
			continue
		}
		v := paramValue(p)
		if v == nil {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(ps))
		}
		out[k] = v
	}
	return out
}

// sequenceParameters reads the request's correlation id and flags, whose
// types parameterError checked: an int64_param id is taken as the
// unsigned value of its bits, as Triton's TRITONSERVER_InferenceRequest-
// SetCorrelationId takes it.
func sequenceParameters(ps map[string]*pb.InferParameter) (backend.Sequence, error) {
	vals := map[string]any{}
	for _, k := range []string{"sequence_id", "sequence_start", "sequence_end"} {
		if p, ok := ps[k]; ok {
			v := paramValue(p)
			if id, ok := v.(int64); ok {
				v = uint64(id)
			}
			vals[k] = v
		}
	}
	return repository.SequenceParameters(vals)
}

// parameterError is Triton's refusal of the request parameter name with
// value p (grpc/infer_handler.cc, SetInferenceRequestMetadata),
// INVALID_ARGUMENT; nil when Triton takes it. The parameters the server
// consumes must have their types (sequence_id an int64_param or a
// string_param, sequence_start and sequence_end bool_params, priority an
// int64_param not below 0 or a uint64_param, timeout an int64_param);
// keys starting with "triton_" are Triton's own but for
// triton_enable_empty_final_response, a bool_param; any other parameter
// must be an int64_param, a bool_param, a string_param or a
// double_param.
func parameterError(name string, p *pb.InferParameter) error {
	c := p.GetParameterChoice()
	var ok bool
	var want string
	switch name {
	case "sequence_id":
		switch c.(type) {
		case *pb.InferParameter_Int64Param, *pb.InferParameter_StringParam:
			ok = true
		}
		want = "int64_param or string_param"
	case "sequence_start", "sequence_end", emptyFinal:
		_, ok = c.(*pb.InferParameter_BoolParam)
		want = "bool_param"
	case "priority":
		switch x := c.(type) {
		case *pb.InferParameter_Int64Param:
			if x.Int64Param < 0 {
				return backend.Errorf(backend.InvalidArg, "invalid value for 'priority', expected value >= 0.")
			}
			ok = true
		case *pb.InferParameter_Uint64Param:
			ok = true
		}
		want = "int64_param or uint64_param"
	case "timeout":
		_, ok = c.(*pb.InferParameter_Int64Param)
		want = "int64_param"
	default:
		if strings.HasPrefix(name, "triton_") {
			return backend.Errorf(backend.InvalidArg, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: %s", emptyFinal)
		}
		switch c.(type) {
		case *pb.InferParameter_Int64Param, *pb.InferParameter_BoolParam, *pb.InferParameter_StringParam, *pb.InferParameter_DoubleParam:
			ok = true
		}
		want = "int64_param, bool_param, or string_param"
	}
	if ok {
		return nil
	}
	return backend.Errorf(backend.InvalidArg, "invalid value type for '%s' parameter, expected %s.", name, want)
}

// paramValue is an InferParameter's value as a Go value (nil when unset).
func paramValue(p *pb.InferParameter) any {
	switch c := p.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		return c.BoolParam
	case *pb.InferParameter_Int64Param:
		return c.Int64Param
	case *pb.InferParameter_StringParam:
		return c.StringParam
	case *pb.InferParameter_DoubleParam:
		return c.DoubleParam
	case *pb.InferParameter_Uint64Param:
		return c.Uint64Param
	}
	return nil
}
