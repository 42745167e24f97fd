package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// inferRequest is the JSON part of an infer request. Data stays raw so that
// decodeData can scan it without reflection. The json tags document the
// wire names and let tests decode the same document with encoding/json.
type inferRequest struct {
	ID         string `json:"id"`
	Parameters struct {
		BinaryDataOutput bool `json:"binary_data_output"`
		// Values are the other parameters (sequence ids and flags, the
		// model's own ones).
		Values map[string]any `json:"-"`
		// Refused is Triton's refusal of the first parameter it refuses
		// (parameterError), returned once the document is parsed.
		Refused error `json:"-"`
	} `json:"parameters"`
	Inputs  []inferInput  `json:"inputs"`
	Outputs []inferOutput `json:"outputs"`

	// badID is an "id" that is not a string, refused once the document
	// is parsed, before the parameters (as Triton reads the id first).
	badID bool
}

type inferInput struct {
	Name       string           `json:"name"`
	Shape      []int64          `json:"shape"`
	Datatype   backend.DataType `json:"datatype"`
	Parameters struct {
		BinaryDataSize *int64 `json:"binary_data_size"`
		shmParams
	} `json:"parameters"`
	Data json.RawMessage `json:"data"`

	// shape and binarySize hold the usual few dimensions and the binary
	// size in the input itself, so that parsing allocates for neither:
	// the request aliases them and lives no longer than its decoded
	// (which is not reused).
	shape      [4]int64
	binarySize int64
}

// shmParams are the shared-memory extension's parameters of an input or a
// requested output.
type shmParams struct {
	Region   *string `json:"shared_memory_region"`
	Offset   *int64  `json:"shared_memory_offset"`
	ByteSize *int64  `json:"shared_memory_byte_size"`
}

// ref checks the parameters of tensor name: none, or a region and a byte
// size (the offset defaults to 0). ok is false without a region.
func (p *shmParams) ref(kind, name string) (ref sharedmem.Ref, ok bool, err error) {
	if p.Region == nil && p.ByteSize == nil && p.Offset == nil {
		return ref, false, nil
	}
	if p.Region == nil || p.ByteSize == nil {
		return ref, false, backend.Errorf(backend.InvalidArg, "%s '%s': shared_memory_region and shared_memory_byte_size must be given together", kind, name)
	}
	ref.Region = *p.Region
	if *p.ByteSize < 0 || (p.Offset != nil && *p.Offset < 0) {
		return ref, false, backend.Errorf(backend.InvalidArg, "%s '%s': shared memory offset and byte size must not be negative", kind, name)
	}
	ref.ByteSize = uint64(*p.ByteSize)
	if p.Offset != nil {
		ref.Offset = uint64(*p.Offset)
	}
	return ref, true, nil
}

type inferOutput struct {
	Name       string `json:"name"`
	Parameters struct {
		BinaryData     *bool `json:"binary_data"`
		Classification *int  `json:"classification"`
		shmParams
	} `json:"parameters"`
}

// decodeRequest splits body into the JSON header and the binary tail (when
// hdrLen, the Inference-Header-Content-Length value, is set) and builds the
// backend request. Binary inputs alias body.
func decodeRequest(body []byte, hdrLen string, m *repository.Model, shm *sharedmem.Registry) (*backend.Request, *inferRequest, error) {
	if hdrLen == "0" {
		return decodeRaw(body, m)
	}
	header, tail := body, []byte(nil)
	if hdrLen != "" {
		n, err := strconv.ParseInt(hdrLen, 10, 64)
		if err != nil || n < 0 {
			return nil, nil, backend.Errorf(backend.InvalidArg, "invalid %s header value '%s'", HeaderLength, hdrLen)
		}
		if n > int64(len(body)) {
			return nil, nil, backend.Errorf(backend.InvalidArg, "%s is %d but the request body has only %d bytes", HeaderLength, n, len(body))
		}
		header, tail = body[:n], body[n:]
	}
	// One allocation for the parsed header, the request and (for the
	// usual single input) their inputs, which live as long as each other.
	d := new(decoded)
	ir := &d.ir
	ir.Inputs = d.parsed[:0]
	if err := parseHeader(header, ir, m.Inputs); err != nil {
		var be *backend.Error
		if errors.As(err, &be) {
			return nil, nil, be // Triton's own text (nesting too deep)
		}
		return nil, nil, backend.Errorf(backend.InvalidArg, "failed to parse the request JSON: %w", err)
	}
	if ir.badID {
		return nil, nil, badID()
	}
	if ir.Parameters.Refused != nil {
		return nil, nil, ir.Parameters.Refused
	}
	req := &d.req
	req.ID = ir.ID
	if len(ir.Inputs) <= len(d.inputs) {
		req.Inputs = d.inputs[:len(ir.Inputs)]
	} else {
		req.Inputs = make([]backend.Tensor, len(ir.Inputs))
	}
	if ir.Parameters.Values != nil {
		req.Parameters = modelParameters(ir.Parameters.Values)
		seq, err := repository.SequenceParameters(ir.Parameters.Values)
		if err != nil {
			return nil, nil, err
		}
		req.Sequence = seq
		for _, k := range []string{"priority", "timeout"} {
			if v, ok := ir.Parameters.Values[k]; ok {
				if err := repository.Schedule(req, k, v); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	for i := range ir.Inputs {
		in := &ir.Inputs[i]
		// Triton checks first, before the input's name, that its data is
		// given one way (ValidateInputContentType). A "data" member counts
		// whatever its value (null too), as Triton's Find("data") does;
		// shared memory is the shared_memory_region parameter.
		hasData := len(in.Data) > 0
		hasBinary := in.Parameters.BinaryDataSize != nil
		hasShm := in.Parameters.Region != nil
		if err := contentTypeError(hasData, hasBinary, hasShm); err != nil {
			return nil, nil, err
		}
		if in.Name == "" {
			return nil, nil, backend.Errorf(backend.InvalidArg, "input %d has no name", i)
		}
		if !in.Datatype.Valid() {
			return nil, nil, backend.Errorf(backend.InvalidArg, "input '%s' has invalid datatype '%s'", in.Name, in.Datatype)
		}
		if in.Shape == nil {
			return nil, nil, backend.Errorf(backend.InvalidArg, "input '%s' has no shape", in.Name)
		}
		n := int64(1)
		for _, d := range in.Shape {
			if d < 0 {
				return nil, nil, backend.Errorf(backend.InvalidArg, "input '%s' has a negative dimension in shape %s", in.Name, repository.FormatShape(in.Shape))
			}
			if d != 0 && n > (1<<40)/d {
				return nil, nil, backend.Errorf(backend.InvalidArg, "input '%s' shape %s is too large", in.Name, repository.FormatShape(in.Shape))
			}
			n *= d
		}
		t := &req.Inputs[i]
		t.Name, t.DataType, t.Shape = in.Name, in.Datatype, in.Shape
		switch sz := in.Parameters.BinaryDataSize; {
		case hasShm:
			ref, _, err := in.Parameters.ref("input", in.Name)
			if err != nil {
				return nil, nil, err
			}
			if t.Data, err = shm.Read(ref); err != nil {
				return nil, nil, err
			}
		case hasBinary:
			if hdrLen == "" {
				return nil, nil, backend.Errorf(backend.InvalidArg, "input '%s' has binary_data_size but the request has no %s header", in.Name, HeaderLength)
			}
			if *sz < 0 || *sz > int64(len(tail)) {
				return nil, nil, backend.Errorf(backend.InvalidArg, "unexpected end of binary data for input '%s': it needs %d bytes, %d remain", in.Name, *sz, len(tail))
			}
			t.Data, tail = tail[:*sz:*sz], tail[*sz:]
		case n == 0:
			// Triton reads no data for an input without elements,
			// whatever the member holds.
			t.Data = []byte{}
		default:
			if in.Data[0] != '[' {
				// Triton reads "data" as an array (MemberAsArray) before its
				// elements: a lone value is its JSON library's error, an
				// INTERNAL one, behind "Unable to parse 'data'".
				return nil, nil, backend.Errorf(backend.Internal, "Unable to parse 'data': attempt to access JSON non-array as array (input '%s')", in.Name)
			}
			data, err := decodeData(in.Data, in.Datatype, n, in.Name)
			if err != nil {
				return nil, nil, err
			}
			t.Data = data
		}
	}
	if len(tail) > 0 {
		return nil, nil, backend.Errorf(backend.InvalidArg, "%d bytes of binary data follow the last binary input", len(tail))
	}
	if len(ir.Outputs) > 0 {
		req.Outputs = make([]string, len(ir.Outputs))
		for i, o := range ir.Outputs {
			if _, _, err := o.Parameters.ref("output", o.Name); err != nil {
				return nil, nil, err
			}
			if c := o.Parameters.Classification; c != nil && *c < 0 {
				return nil, nil, backend.Errorf(backend.InvalidArg, "output '%s': classification count must not be negative, got %d", o.Name, *c)
			}
			req.Outputs[i] = o.Name
		}
		if name, dup := repeatedName(req.Outputs); dup {
			return nil, nil, status.DuplicateOutputHTTP.New(name)
		}
	}
	return req, ir, nil
}

// contentTypeError is Triton's refusal of an input whose data is given
// in none or more than one of the three ways (http_server.cc,
// ValidateInputContentType), 400: the ways it was given are listed in
// this order. nil when exactly one is set.
func contentTypeError(data, binary, shm bool) error {
	set := 0
	for _, b := range [...]bool{data, binary, shm} {
		if b {
			set++
		}
	}
	if set == 1 {
		return nil
	}
	msg := "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
	if set == 0 {
		msg += " no field is set"
	} else {
		msg += " set"
		if data {
			msg += " 'data'"
		}
		if binary {
			msg += " 'binary_data_size'"
		}
		if shm {
			msg += " 'shared_memory_region'"
		}
	}
	return backend.Errorf(backend.InvalidArg, "%s", msg)
}

// decoded holds what decodeRequest makes of a request, in one object.
type decoded struct {
	ir     inferRequest
	req    backend.Request
	parsed [1]inferInput
	inputs [1]backend.Tensor
}

// decodeRaw builds the request of a raw binary body (Triton's binary data
// extension with Inference-Header-Content-Length 0): the body is the one
// input's data, its name, type and shape come from the model's
// configuration (a batching model gets batch 1; one variable dimension is
// deduced from the size; a BYTES input must have shape [1] and the body is
// its one element), and every output is answered as binary data.
func decodeRaw(body []byte, m *repository.Model) (*backend.Request, *inferRequest, error) {
	if len(m.Inputs) != 1 {
		return nil, nil, status.RawInputCount.New(status.RequestPrefix(""), len(m.Inputs), m.Name)
	}
	spec := &m.Inputs[0]
	var shape []int64
	if m.Spec.MaxBatchSize > 0 {
		shape = append(shape, 1)
	}
	dynamic, elems := -1, int64(1)
	for _, d := range spec.Dims {
		if d == -1 {
			if dynamic >= 0 {
				return nil, nil, status.RawVariableDims.New(status.RequestPrefix(""), spec.Name)
			}
			dynamic = len(shape)
		} else {
			elems *= d
		}
		shape = append(shape, d)
	}
	data := body
	if spec.DataType == backend.Bytes {
		if dynamic >= 0 || elems != 1 {
			return nil, nil, status.RawBytesShape.New(status.RequestPrefix(""), spec.Name)
		}
		data = binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
		data = append(data, body...)
	} else if dynamic >= 0 {
		if size := int64(spec.DataType.Size()); elems > 0 && size > 0 {
			shape[dynamic] = int64(len(body)) / elems / size
		} else {
			shape[dynamic] = 0
		}
	}
	ir := &inferRequest{}
	ir.Parameters.BinaryDataOutput = true
	req := &backend.Request{Inputs: []backend.Tensor{{Name: spec.Name, DataType: spec.DataType, Shape: shape, Data: data}}}
	return req, ir, nil
}

// repeatedName returns the first name given twice: Triton's HTTP frontend
// refuses a request naming an output twice before the request reaches the
// core. A set only for long lists, so that the common request allocates
// nothing and a huge one costs no quadratic scan.
func repeatedName(names []string) (string, bool) {
	if len(names) > 16 {
		seen := make(map[string]struct{}, len(names))
		for _, n := range names {
			if _, ok := seen[n]; ok {
				return n, true
			}
			seen[n] = struct{}{}
		}
		return "", false
	}
	for i := range names {
		for k := 0; k < i; k++ {
			if names[k] == names[i] {
				return names[i], true
			}
		}
	}
	return "", false
}
