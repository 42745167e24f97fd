package repository

import (
	"fmt"
	"slices"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// reshapes holds the `reshape` of a model's inputs and outputs, indexed
// like its declared tensors (nil where a tensor has none): clients send and
// receive tensors of the config's dims, the backend sees and produces them
// in the reshape's shape, with the batch dimension kept in front.
type reshapes struct {
	in, out [][]int64
	any     bool
}

// validateReshape checks the reshape of tensor name as Triton's
// ValidateIOShape does, with its texts (prefix "model input 'name' " or
// "model output 'name' ", the caller appends " for <model>"): dimensions
// >= 1 or -1, the same element count as dims (an empty reshape for dims of
// one element), and with variable dimensions the same number of them and
// equal counts between them.
func validateReshape(kind, name string, dims, shape []int64) error {
	for _, d := range shape {
		if d < 1 && d != -1 {
			return fmt.Errorf("model %s '%s' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension", kind, name)
		}
	}
	dn, rn := elementCount(dims), elementCount(shape)
	if dn != rn && (rn != 0 || dn != 1) {
		return fmt.Errorf("model %s '%s' has different size for dims and reshape", kind, name)
	}
	if dn == -1 {
		a, b := trunks(dims), trunks(shape)
		if len(a) != len(b) {
			return fmt.Errorf("model %s '%s' has different number of variable-size dimensions for dims and reshape", kind, name)
		}
		if !slices.Equal(a, b) {
			return fmt.Errorf("model %s '%s' has different size for dims and reshape", kind, name)
		}
	}
	return nil
}

// elementCount is Triton's GetElementCount of config dims: -1 when a
// dimension is variable, 0 for no dimensions.
func elementCount(dims []int64) int64 {
	if len(dims) == 0 {
		return 0
	}
	n := int64(1)
	for _, d := range dims {
		if d == -1 {
			return -1
		}
		n = satMul(n, d)
	}
	return n
}

// trunks are the element counts between variable dimensions.
func trunks(dims []int64) []int64 {
	out := []int64{}
	n := int64(1)
	for _, d := range dims {
		if d == -1 {
			out = append(out, n)
			n = 1
			continue
		}
		n = satMul(n, d)
	}
	return append(out, n)
}

// newReshapes collects the reshapes of cfg, validated, and returns the
// backend's view of the tensors (their reshape as Dims).
func newReshapes(cfg *modelconfig.ModelConfig, inputs, outputs []backend.TensorSpec) (*reshapes, []backend.TensorSpec, []backend.TensorSpec, error) {
	r := &reshapes{in: make([][]int64, len(inputs)), out: make([][]int64, len(outputs))}
	beIn, beOut := inputs, outputs
	for i, in := range cfg.GetInput() {
		if in.GetReshape() == nil {
			continue
		}
		shape := append([]int64{}, in.GetReshape().GetShape()...) // non-nil: an empty reshape is a scalar
		if err := validateReshape("input", in.GetName(), in.GetDims(), shape); err != nil {
			return nil, nil, nil, fmt.Errorf("%w for %s", err, cfg.GetName())
		}
		if !r.any {
			beIn, beOut = slices.Clone(inputs), slices.Clone(outputs)
		}
		r.in[i], r.any = shape, true
		beIn[i].Dims = shape
	}
	for i, out := range cfg.GetOutput() {
		if out.GetReshape() == nil {
			continue
		}
		shape := append([]int64{}, out.GetReshape().GetShape()...)
		if err := validateReshape("output", out.GetName(), out.GetDims(), shape); err != nil {
			return nil, nil, nil, fmt.Errorf("%w for %s", err, cfg.GetName())
		}
		if !r.any {
			beIn, beOut = slices.Clone(inputs), slices.Clone(outputs)
		}
		r.out[i], r.any = shape, true
		beOut[i].Dims = shape
	}
	return r, beIn, beOut, nil
}

// convert maps shape, a tensor's shape in the from dims (with the batch
// dimension when batched), to the to dims: fixed dimensions from to,
// variable ones taken in order from shape's variable positions, as
// Triton's core fills a reshape's variable dimensions. ok is false when
// shape does not have from's rank.
func convert(shape, from, to []int64, batched bool) ([]int64, bool) {
	lead := 0
	if batched {
		lead = 1
	}
	if len(shape) != len(from)+lead {
		return nil, false
	}
	var vars []int64
	for k, d := range from {
		if d == -1 {
			vars = append(vars, shape[lead+k])
		}
	}
	out := make([]int64, 0, lead+len(to))
	out = append(out, shape[:lead]...)
	for _, d := range to {
		if d == -1 {
			if len(vars) == 0 {
				return nil, false
			}
			d, vars = vars[0], vars[1:]
		}
		out = append(out, d)
	}
	return out, true
}

// forBackend returns req with its inputs in the backend's shapes: req
// itself when no input has a reshape, else a copy (req stays as the client
// sent it, for a retry against a reloaded model).
func (m *Model) forBackend(req *backend.Request) *backend.Request {
	if m.reshape == nil || !m.reshape.any {
		return req
	}
	cp := *req
	cp.Inputs = slices.Clone(req.Inputs)
	batched := m.Spec.MaxBatchSize > 0
	for i := range cp.Inputs {
		t := &cp.Inputs[i]
		idx := m.inputIndex[t.Name]
		to := m.reshape.in[idx]
		if to == nil {
			continue
		}
		if s, ok := convert(t.Shape, m.Inputs[idx].Dims, to, batched); ok {
			t.Shape = s
		}
	}
	return &cp
}

// fromBackend puts the outputs of resp with a reshape back into the
// config's dims, in place (the response is the request's own).
func (m *Model) fromBackend(resp *backend.Response) error {
	if m.reshape == nil || !m.reshape.any || resp == nil {
		return nil
	}
	batched := m.Spec.MaxBatchSize > 0
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		idx, ok := m.outputIndex[t.Name]
		if !ok || m.reshape.out[idx] == nil {
			continue
		}
		s, ok := convert(t.Shape, m.reshape.out[idx], m.Outputs[idx].Dims, batched)
		if !ok {
			return backend.Errorf(backend.Internal, "output '%s' of model '%s' has shape %s, which does not match its reshape %s",
				t.Name, m.Name, FormatShape(t.Shape), FormatShape(m.reshape.out[idx]))
		}
		t.Shape = s
	}
	return nil
}
