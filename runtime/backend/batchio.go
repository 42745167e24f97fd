package backend

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BatchInputKind is the kind of a config's batch_input (Triton's
// BatchInput.Kind): what the backend derives from the requests of a batch.
type BatchInputKind int

// Batch input kinds, in Triton's enum order.
const (
	BatchElementCount BatchInputKind = iota
	BatchAccumulatedElementCount
	BatchAccumulatedElementCountWithZero
	BatchMaxElementCountAsShape
	BatchItemShape
	BatchItemShapeFlatten
)

// BatchInput is one batch_input: a tensor the backend adds to a batch for
// each of Targets, computed from the Source input of the batch's requests.
// DataType is INT32 or FP32.
type BatchInput struct {
	Kind     BatchInputKind
	Targets  []string
	DataType DataType
	Source   string
}

// BatchOutput is one batch_output of kind BATCH_SCATTER_WITH_INPUT_SHAPE:
// the outputs named by Targets are split among the batch's requests by the
// shape of each request's Source input instead of by batch rows.
type BatchOutput struct {
	Targets []string
	Source  string
}

// Pieces returns each request's part of the batch input, in request order,
// as Triton's model configuration describes it per request: concatenated
// along their first dimension they make the tensor a backend that runs the
// batch at once passes to the model, and a backend that hands requests to
// the model one by one gives each request its own piece. batching is
// whether the model has max_batch_size > 0 (the source's first dimension is
// then the batch dimension). The pieces are unnamed.
//
// Per request i, with n_i the element count of its source input (batch
// dimension included):
//   - element count: [n_i], shape [1]
//   - accumulated: [n_0+...+n_i], shape [1]
//   - accumulated with zero: the first request [0, n_0], shape [2]; the
//     others as accumulated
//   - max element count as shape: the first request shape [max n_i]
//     (zeros; Triton leaves the data uninitialized), the others shape [0]
//   - item shape: the source's shape without its batch dimension, once per
//     batch row: shape [rows_i, rank]; flattened: [rows_i * rank]
func (b *BatchInput) Pieces(reqs []*Request, batching bool) ([]Tensor, error) {
	if b.DataType != Int32 && b.DataType != FP32 {
		return nil, fmt.Errorf("batch input data type must be TYPE_INT32 or TYPE_FP32")
	}
	shapes := make([][]int64, len(reqs))
	for i, r := range reqs {
		t := r.Input(b.Source)
		if t == nil {
			return nil, Errorf(InvalidArg, "batch input '%s' needs input '%s' in every request of the batch", b.target(), b.Source)
		}
		shapes[i] = t.Shape
	}
	count := func(s []int64) int64 {
		n := int64(1)
		for _, d := range s {
			n *= d
		}
		return n
	}
	out := make([]Tensor, len(reqs))
	var acc, most int64
	for i, s := range shapes {
		n := count(s)
		acc += n
		most = max(most, n)
		var vals []int64
		var shape []int64
		switch b.Kind {
		case BatchElementCount:
			vals = []int64{n}
		case BatchAccumulatedElementCount:
			vals = []int64{acc}
		case BatchAccumulatedElementCountWithZero:
			vals = []int64{acc}
			if i == 0 {
				vals = []int64{0, acc}
			}
		case BatchMaxElementCountAsShape:
			// Filled in below, once the maximum is known.
			shape = []int64{0}
		case BatchItemShape, BatchItemShapeFlatten:
			rows, item := int64(1), s
			if batching && len(s) > 0 {
				rows, item = s[0], s[1:]
			}
			for range rows {
				vals = append(vals, item...)
			}
			shape = []int64{rows, int64(len(item))}
			if b.Kind == BatchItemShapeFlatten {
				shape = []int64{rows * int64(len(item))}
			}
		default:
			return nil, fmt.Errorf("unknown batch input kind %d", b.Kind)
		}
		if shape == nil {
			shape = []int64{int64(len(vals))}
		}
		out[i] = Tensor{DataType: b.DataType, Shape: shape, Data: b.encode(vals)}
	}
	if b.Kind == BatchMaxElementCountAsShape && len(out) > 0 {
		out[0].Shape = []int64{most}
		out[0].Data = make([]byte, most*int64(b.DataType.Size()))
	}
	return out, nil
}

func (b *BatchInput) target() string {
	if len(b.Targets) > 0 {
		return b.Targets[0]
	}
	return ""
}

// encode writes vals as b's data type.
func (b *BatchInput) encode(vals []int64) []byte {
	data := make([]byte, 0, len(vals)*4)
	for _, v := range vals {
		if b.DataType == FP32 {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
		} else {
			data = Int32.AppendUint(data, uint64(v))
		}
	}
	return data
}

// Scatter splits t, the output of one forward over reqs, among the
// requests: request i gets the next elements of t in the shape of the
// output's dims (with the batch dimension in front when batching), each
// variable dimension (-1) taken from the same dimension of the request's
// source input. t must hold at least the elements the requests take.
func (b *BatchOutput) Scatter(t Tensor, dims []int64, reqs []*Request, batching bool) ([]Tensor, error) {
	size := int64(t.DataType.Size())
	if size == 0 {
		return nil, fmt.Errorf("batch output '%s' has data type %s; batch outputs need fixed-size elements", t.Name, t.DataType)
	}
	want := dims
	if batching {
		want = append([]int64{-1}, dims...)
	}
	out := make([]Tensor, len(reqs))
	var off int64
	for i, r := range reqs {
		src := r.Input(b.Source)
		if src == nil {
			return nil, fmt.Errorf("batch output '%s' needs input '%s' in every request of the batch", t.Name, b.Source)
		}
		shape := make([]int64, len(want))
		n := int64(1)
		for d, w := range want {
			if w < 0 {
				if d >= len(src.Shape) {
					return nil, fmt.Errorf("batch output '%s': dimension %d is variable but input '%s' has shape %v", t.Name, d, b.Source, src.Shape)
				}
				w = src.Shape[d]
			}
			shape[d] = w
			n *= w
		}
		end := off + n*size
		if end > int64(len(t.Data)) {
			return nil, fmt.Errorf("batch output '%s' has %d elements; the batch's requests take more (input '%s' shapes)", t.Name, int64(len(t.Data))/size, b.Source)
		}
		out[i] = Tensor{Name: t.Name, DataType: t.DataType, Shape: shape, Data: t.Data[off:end:end]}
		off = end
	}
	return out, nil
}
