package grpcapi

import (
	"encoding/binary"
	"math"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
)

// decodeRequest builds the backend request from a ModelInferRequest. Raw
// contents are used in place (the protobuf message owns them for the whole
// call); typed contents are encoded little-endian. Shapes, data sizes and
// names are left to repository.Model.Validate, shared with the HTTP frontend.
func decodeRequest(r *pb.ModelInferRequest, shm *sharedmem.Registry) (*backend.Request, error) {
	// Triton reads the parameters before the inputs.
	for k, p := range r.GetParameters() {
		if err := parameterError(k, p); err != nil {
			return nil, err
		}
	}
	ins := r.GetInputs()
	raw := r.GetRawInputContents()
	// Inputs in shared memory have no raw contents: the raw contents
	// belong, in order, to the other inputs.
	var refs []*sharedmem.Ref // allocated only when an input uses shared memory
	inShm := 0
	for i, in := range ins {
		if len(in.GetParameters()) == 0 {
			continue
		}
		ref, ok, err := shmRef(in.GetParameters(), "input", in.GetName())
		if err != nil {
			return nil, err
		}
		if ok {
			if refs == nil {
				refs = make([]*sharedmem.Ref, len(ins))
			}
			refs[i] = &ref
			inShm++
		}
	}
	if len(raw) > 0 && len(raw) != len(ins)-inShm {
		return nil, backend.Errorf(backend.InvalidArg, "expected %d raw input contents (one per input not in shared memory) for model '%s', got %d",
			len(ins)-inShm, r.GetModelName(), len(raw))
	}
	req := &backend.Request{ID: r.GetId(), Inputs: make([]backend.Tensor, len(ins))}
	next := 0 // the next raw contents entry
	for i, in := range ins {
		dt := backend.DataType(in.GetDatatype())
		if !dt.Valid() {
			return nil, backend.Errorf(backend.InvalidArg, "input '%s' has invalid datatype '%s'", in.GetName(), in.GetDatatype())
		}
		t := &req.Inputs[i]
		t.Name, t.DataType, t.Shape = in.GetName(), dt, in.GetShape()
		if t.Shape == nil {
			t.Shape = []int64{} // a scalar; never nil so backends can rely on it
		}
		if refs != nil && refs[i] != nil {
			if elements(in.GetContents()) > 0 {
				return nil, backend.Errorf(backend.InvalidArg, "input '%s' has shared memory parameters and also contents", in.GetName())
			}
			data, err := shm.Read(*refs[i])
			if err != nil {
				return nil, err
			}
			t.Data = data
			continue
		}
		if len(raw) > 0 {
			if n := elements(in.GetContents()); n > 0 {
				return nil, backend.Errorf(backend.InvalidArg, "input '%s' has both contents and raw_input_contents", in.GetName())
			}
			t.Data = raw[next]
			next++
			continue
		}
		data, err := typedData(in.GetName(), dt, in.GetContents())
		if err != nil {
			return nil, err
		}
		t.Data = data
	}
	if ps := r.GetParameters(); len(ps) > 0 {
		req.Parameters = modelParameters(ps)
		seq, err := sequenceParameters(ps)
		if err != nil {
			return nil, err
		}
		req.Sequence = seq
		for _, k := range []string{"priority", "timeout"} {
			p, ok := ps[k]
			if !ok {
				continue
			}
			// parameterError let through an int64 or a uint64 (a
			// timeout only an int64, and a priority not a negative one):
			// Triton takes an int64 as the unsigned value of its bits.
			var v any
			switch c := p.GetParameterChoice().(type) {
			case *pb.InferParameter_Int64Param:
				v = uint64(c.Int64Param)
			case *pb.InferParameter_Uint64Param:
				v = c.Uint64Param
			}
			if err := repository.Schedule(req, k, v); err != nil {
				return nil, err
			}
		}
	}
	if outs := r.GetOutputs(); len(outs) > 0 {
		req.Outputs = make([]string, len(outs))
		for i, o := range outs {
			if _, err := classCount(o); err != nil {
				return nil, err
			}
			if _, _, err := shmRef(o.GetParameters(), "output", o.GetName()); err != nil {
				return nil, err
			}
			req.Outputs[i] = o.GetName()
		}
	}
	return req, nil
}

// elements counts the values in every field of c.
func elements(c *pb.InferTensorContents) int {
	if c == nil {
		return 0
	}
	return len(c.BoolContents) + len(c.IntContents) + len(c.Int64Contents) + len(c.UintContents) +
		len(c.Uint64Contents) + len(c.Fp32Contents) + len(c.Fp64Contents) + len(c.BytesContents)
}

// typedData encodes the contents field that matches dt. Values in a field
// of another type, or integers out of dt's range, are errors rather than
// silently converted.
func typedData(name string, dt backend.DataType, c *pb.InferTensorContents) ([]byte, error) {
	var out []byte
	var used int
	rangeErr := func(v int64) error {
		return backend.Errorf(backend.InvalidArg, "input '%s': value %d is out of range for datatype %s", name, v, dt)
	}
	switch dt {
	case backend.Bool:
		used = len(c.GetBoolContents())
		out = make([]byte, used)
		for i, v := range c.GetBoolContents() {
			if v {
				out[i] = 1
			}
		}
	case backend.Int8, backend.Int16, backend.Int32:
		vals := c.GetIntContents()
		used = len(vals)
		size := dt.Size()
		lo, hi := int64(-1)<<(8*size-1), int64(1)<<(8*size-1)-1
		out = make([]byte, 0, used*size)
		for _, v := range vals {
			if int64(v) < lo || int64(v) > hi {
				return nil, rangeErr(int64(v))
			}
			out = dt.AppendUint(out, uint64(v))
		}
	case backend.Int64:
		vals := c.GetInt64Contents()
		used = len(vals)
		out = make([]byte, 0, 8*used)
		for _, v := range vals {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case backend.Uint8, backend.Uint16, backend.Uint32:
		vals := c.GetUintContents()
		used = len(vals)
		size := dt.Size()
		hi := uint64(1)<<(8*size) - 1
		out = make([]byte, 0, used*size)
		for _, v := range vals {
			if uint64(v) > hi {
				return nil, rangeErr(int64(v))
			}
			out = dt.AppendUint(out, uint64(v))
		}
	case backend.Uint64:
		vals := c.GetUint64Contents()
		used = len(vals)
		out = make([]byte, 0, 8*used)
		for _, v := range vals {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	case backend.FP32:
		vals := c.GetFp32Contents()
		used = len(vals)
		out = make([]byte, 4*used)
		for i, v := range vals {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case backend.FP64:
		vals := c.GetFp64Contents()
		used = len(vals)
		out = make([]byte, 8*used)
		for i, v := range vals {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v))
		}
	case backend.Bytes:
		vals := c.GetBytesContents()
		used = len(vals)
		n := 0
		for _, v := range vals {
			n += 4 + len(v)
		}
		out = make([]byte, 0, n)
		for _, v := range vals {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
			out = append(out, v...)
		}
	default: // FP16, BF16: the typed contents have no field for them
		if elements(c) > 0 {
			return nil, backend.Errorf(backend.InvalidArg, "input '%s': datatype %s is only accepted in raw_input_contents", name, dt)
		}
		return []byte{}, nil
	}
	if other := elements(c) - used; other > 0 {
		return nil, backend.Errorf(backend.InvalidArg, "input '%s' of datatype %s has %d values in contents fields of other datatypes", name, dt, other)
	}
	return out, nil
}

// encodeResponse renders the outputs the request asked for (all, in the
// model's order, when it named none) as raw_output_contents. The output
// data is handed to GRPC without a copy.
func encodeResponse(m *repository.Model, r *pb.ModelInferRequest, resp *backend.Response, shm *sharedmem.Registry) (*pb.ModelInferResponse, error) {
	out := &pb.ModelInferResponse{ModelName: m.Name, ModelVersion: m.VersionString(), Id: r.GetId(), Parameters: responseParameters(resp.Parameters)}
	add := func(t *backend.Tensor) {
		out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{
			Name: t.Name, Datatype: string(t.DataType), Shape: t.Shape,
		})
		out.RawOutputContents = append(out.RawOutputContents, t.Data)
	}
	outs := resp.Outputs
	if req := r.GetOutputs(); len(req) > 0 {
		out.Outputs = make([]*pb.ModelInferResponse_InferOutputTensor, 0, len(req))
		out.RawOutputContents = make([][]byte, 0, len(req))
		for _, ro := range req {
			var t *backend.Tensor
			for i := range outs {
				if outs[i].Name == ro.GetName() {
					t = &outs[i]
					break
				}
			}
			if t == nil {
				return nil, backend.Errorf(backend.Internal, "model '%s' did not produce requested output '%s'", m.Name, ro.GetName())
			}
			if n, _ := classCount(ro); n > 0 {
				ct, err := m.Classify(t, n)
				if err != nil {
					return nil, err
				}
				t = &ct
			}
			if ref, ok, _ := shmRef(ro.GetParameters(), "output", ro.GetName()); ok {
				if err := shm.Write(ro.GetName(), ref, t.Data); err != nil {
					return nil, err
				}
				// An empty raw entry keeps the others aligned with outputs.
				out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{
					Name: t.Name, Datatype: string(t.DataType), Shape: t.Shape,
					Parameters: map[string]*pb.InferParameter{
						"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: ref.Region}},
						"shared_memory_offset":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(ref.Offset)}},
						"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(len(t.Data))}},
					},
				})
				out.RawOutputContents = append(out.RawOutputContents, []byte{})
				continue
			}
			add(t)
		}
		return out, nil
	}
	out.Outputs = make([]*pb.ModelInferResponse_InferOutputTensor, 0, len(outs))
	out.RawOutputContents = make([][]byte, 0, len(outs))
	for i := range outs {
		add(&outs[i])
	}
	return out, nil
}

// responseParameters converts a response's parameters (a python model's
// InferenceResponse(parameters=...)) to InferParameters; nil when it has
// none.
func responseParameters(ps map[string]any) map[string]*pb.InferParameter {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]*pb.InferParameter, len(ps))
	for k, v := range ps {
		var p *pb.InferParameter
		switch x := v.(type) {
		case bool:
			p = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: x}}
		case int64:
			p = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: x}}
		case uint64:
			p = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: x}}
		case string:
			p = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}
		case float64:
			p = &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: x}}
		default:
			continue
		}
		out[k] = p
	}
	return out
}

// classCount is the classification extension's count for a requested
// output (its "classification" int64 parameter), 0 when absent.
func classCount(o *pb.ModelInferRequest_InferRequestedOutputTensor) (int, error) {
	p, ok := o.GetParameters()["classification"]
	if !ok {
		return 0, nil
	}
	v, ok := p.GetParameterChoice().(*pb.InferParameter_Int64Param)
	if !ok || v.Int64Param < 0 || v.Int64Param > math.MaxInt32 {
		return 0, backend.Errorf(backend.InvalidArg, "output '%s': the classification parameter must be a non-negative int64_param", o.GetName())
	}
	return int(v.Int64Param), nil
}

// shmRef reads the shared-memory extension's parameters of a tensor: none,
// or a string shared_memory_region with an int64 shared_memory_byte_size
// (and optionally shared_memory_offset).
func shmRef(params map[string]*pb.InferParameter, kind, name string) (sharedmem.Ref, bool, error) {
	region, hasRegion := params["shared_memory_region"]
	size, hasSize := params["shared_memory_byte_size"]
	offset, hasOffset := params["shared_memory_offset"]
	var ref sharedmem.Ref
	if !hasRegion && !hasSize && !hasOffset {
		return ref, false, nil
	}
	bad := func(what string) error {
		return backend.Errorf(backend.InvalidArg, "%s '%s': %s", kind, name, what)
	}
	if !hasRegion || !hasSize {
		return ref, false, bad("shared_memory_region and shared_memory_byte_size must be given together")
	}
	rs, ok := region.GetParameterChoice().(*pb.InferParameter_StringParam)
	if !ok {
		return ref, false, bad("shared_memory_region must be a string_param")
	}
	ref.Region = rs.StringParam
	n, ok := size.GetParameterChoice().(*pb.InferParameter_Int64Param)
	if !ok || n.Int64Param < 0 {
		return ref, false, bad("shared_memory_byte_size must be a non-negative int64_param")
	}
	ref.ByteSize = uint64(n.Int64Param)
	if hasOffset {
		o, ok := offset.GetParameterChoice().(*pb.InferParameter_Int64Param)
		if !ok || o.Int64Param < 0 {
			return ref, false, bad("shared_memory_offset must be a non-negative int64_param")
		}
		ref.Offset = uint64(o.Int64Param)
	}
	return ref, true, nil
}
