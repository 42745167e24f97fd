package grpcapi

import (
	"context"
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

// sequenceParameters reads the request's correlation id and flags.
func sequenceParameters(ps map[string]*pb.InferParameter) (backend.Sequence, error) {
	vals := map[string]any{}
	for _, k := range []string{"sequence_id", "sequence_start", "sequence_end"} {
		if p, ok := ps[k]; ok {
			vals[k] = paramValue(p)
		}
	}
	return repository.SequenceParameters(vals)
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
