package repository

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// Model is one loaded, servable version of a model. Its fields are read-only
// once the Manager hands it out.
type Model struct {
	Name     string
	Version  int64
	Backend  string // registered backend name ("pytorch", "python", ...)
	Platform string // as reported in metadata ("pytorch_libtorch", "python", ...)
	Config   *modelconfig.ModelConfig
	// ConfigJSON is Config rendered by modelconfig.JSON.
	ConfigJSON []byte
	Spec       *backend.ModelSpec
	Scheduler  *scheduler.Scheduler

	inputIndex  map[string]int // name -> index in Spec.Inputs
	outputIndex map[string]int
	required    int // inputs that are not optional
	// leadingDim accepts one extra leading dimension on the inputs of a
	// model with max_batch_size 0 (see Options.StrictInputShapes).
	leadingDim bool
	// labels are the class labels of outputs with a label_filename.
	labels map[string][]string
	// maxResponse bounds the output bytes of one response
	// (Options.MaxResponseSize); 0 means no bound.
	maxResponse int64
}

// VersionString is the version as it appears on the wire ("1").
func (m *Model) VersionString() string { return strconv.FormatInt(m.Version, 10) }

// Input returns the declared input called name.
func (m *Model) Input(name string) (*backend.TensorSpec, bool) {
	i, ok := m.inputIndex[name]
	if !ok {
		return nil, false
	}
	return &m.Spec.Inputs[i], true
}

// Output returns the declared output called name.
func (m *Model) Output(name string) (*backend.TensorSpec, bool) {
	i, ok := m.outputIndex[name]
	if !ok {
		return nil, false
	}
	return &m.Spec.Outputs[i], true
}

// FullShape is a declared tensor's shape as clients see it: with a leading
// -1 batch dimension when the model batches.
func (m *Model) FullShape(t *backend.TensorSpec) []int64 {
	if m.Spec.MaxBatchSize > 0 {
		return append([]int64{-1}, t.Dims...)
	}
	return t.Dims
}

func (m *Model) index() {
	m.inputIndex = make(map[string]int, len(m.Spec.Inputs))
	for i, in := range m.Spec.Inputs {
		m.inputIndex[in.Name] = i
		if !in.Optional {
			m.required++
		}
	}
	m.outputIndex = make(map[string]int, len(m.Spec.Outputs))
	for i, out := range m.Spec.Outputs {
		m.outputIndex[out.Name] = i
	}
}

// Validate checks a decoded request against the model's configuration:
// input names (none unknown, none repeated, every required one present),
// data types, shapes (the batch dimension against max_batch_size and equal
// across inputs), data sizes (for BYTES, that the length-prefixed elements
// fill the data exactly), requested output names (none unknown, none
// repeated) and, where the config fixes the outputs' sizes, that the
// response stays within Options.MaxResponseSize. Errors are *backend.Error
// with code InvalidArg (TooLarge for the response bound); messages follow
// Triton's wording.
func (m *Model) Validate(req *backend.Request) error {
	seen := 0
	var batch int64 = -1
	given := newIndexSet(len(m.Spec.Inputs))
	for i := range req.Inputs {
		t := &req.Inputs[i]
		idx, ok := m.inputIndex[t.Name]
		if !ok {
			return backend.Errorf(backend.InvalidArg, "unexpected inference input '%s' for model '%s'", t.Name, m.Name)
		}
		if !given.add(idx) {
			return backend.Errorf(backend.InvalidArg, "input '%s' already exists in request", t.Name)
		}
		spec := &m.Spec.Inputs[idx]
		if !spec.Optional {
			seen++
		}
		if t.DataType != spec.DataType {
			return backend.Errorf(backend.InvalidArg, "unexpected datatype %s for inference input '%s', expecting %s for model '%s'",
				t.DataType, t.Name, spec.DataType, m.Name)
		}
		dims := t.Shape
		if m.Spec.MaxBatchSize > 0 {
			if len(t.Shape) == 0 {
				return m.shapeError(t, spec)
			}
			if t.Shape[0] < 1 || t.Shape[0] > int64(m.Spec.MaxBatchSize) {
				return backend.Errorf(backend.InvalidArg, "inference request batch-size must be <= %d for '%s'", m.Spec.MaxBatchSize, m.Name)
			}
			if batch >= 0 && t.Shape[0] != batch {
				return backend.Errorf(backend.InvalidArg, "input '%s' has batch size %d but other inputs have %d for model '%s'", t.Name, t.Shape[0], batch, m.Name)
			}
			batch = t.Shape[0]
			dims = t.Shape[1:]
		} else if m.leadingDim && len(t.Shape) == len(spec.Dims)+1 && t.Shape[0] >= 1 {
			// The field report's client sends [2,10] to a model declaring
			// dims [10] without batching; its model.py handles the rows.
			// Triton refuses this; --strict-input-shapes does too.
			if batch >= 0 && t.Shape[0] != batch {
				return backend.Errorf(backend.InvalidArg, "input '%s' has leading dimension %d but other inputs have %d for model '%s'", t.Name, t.Shape[0], batch, m.Name)
			}
			batch = t.Shape[0]
			dims = t.Shape[1:]
		}
		if len(dims) != len(spec.Dims) {
			return m.shapeError(t, spec)
		}
		for k, d := range dims {
			if d < 0 || (spec.Dims[k] != -1 && d != spec.Dims[k]) {
				return m.shapeError(t, spec)
			}
		}
		if err := checkByteSize(t); err != nil {
			return backend.Errorf(backend.InvalidArg, "input '%s' for model '%s': %s", t.Name, m.Name, err.Msg)
		}
	}
	if seen != m.required {
		var missing []string
		for i, in := range m.Spec.Inputs {
			if !in.Optional && given.add(i) {
				missing = append(missing, "'"+in.Name+"'")
			}
		}
		return backend.Errorf(backend.InvalidArg, "expected %d inputs but got %d inputs for model '%s'. Got input(s) %s, but missing required input(s) %s",
			m.required, seen, m.Name, inputNames(req), strings.Join(missing, ","))
	}
	requested := newIndexSet(len(m.Spec.Outputs))
	for _, name := range req.Outputs {
		idx, ok := m.outputIndex[name]
		if !ok {
			return backend.Errorf(backend.InvalidArg, "unexpected inference output '%s' for model '%s'", name, m.Name)
		}
		if !requested.add(idx) {
			return backend.Errorf(backend.InvalidArg, "output '%s' already exists in request", name)
		}
	}
	return m.checkResponseBound(req, max(batch, 1))
}

// indexSet records which declared inputs or outputs a request names; up to
// 64 of them fit in a word, so the common request allocates nothing.
type indexSet struct {
	small uint64
	large []bool
}

func newIndexSet(n int) indexSet {
	if n > 64 {
		return indexSet{large: make([]bool, n)}
	}
	return indexSet{}
}

// add marks i and reports whether it was new.
func (s *indexSet) add(i int) bool {
	if s.large != nil {
		if s.large[i] {
			return false
		}
		s.large[i] = true
		return true
	}
	if s.small&(1<<uint(i)) != 0 {
		return false
	}
	s.small |= 1 << uint(i)
	return true
}

// checkResponseBound refuses, before anything runs, a request whose
// outputs the config sizes beyond the response limit: outputs of fixed
// dimensions and element size take rows x dims x size bytes. Outputs of
// variable size (BYTES, -1 dimensions) are checked once they exist
// (CheckResponse).
func (m *Model) checkResponseBound(req *backend.Request, rows int64) error {
	if m.maxResponse <= 0 {
		return nil
	}
	var total int64
	add := func(spec *backend.TensorSpec) {
		size := int64(spec.DataType.Size())
		if size == 0 {
			return
		}
		n := rows
		for _, d := range spec.Dims {
			if d < 0 {
				return
			}
			n = satMul(n, d)
		}
		total = satAdd(total, satMul(n, size))
	}
	if len(req.Outputs) == 0 {
		for i := range m.Spec.Outputs {
			add(&m.Spec.Outputs[i])
		}
	} else {
		for _, name := range req.Outputs {
			add(&m.Spec.Outputs[m.outputIndex[name]])
		}
	}
	if total > m.maxResponse {
		return responseTooLarge(m.Name, total, m.maxResponse)
	}
	return nil
}

// CheckResponse refuses a response whose outputs hold more than the
// response limit, before a frontend renders it.
func (m *Model) CheckResponse(resp *backend.Response) error {
	if m.maxResponse <= 0 {
		return nil
	}
	var total int64
	for i := range resp.Outputs {
		total += int64(len(resp.Outputs[i].Data))
	}
	if total > m.maxResponse {
		return responseTooLarge(m.Name, total, m.maxResponse)
	}
	return nil
}

// MaxResponse is the bound on the output bytes of one response (0: none);
// frontends hold their rendering of a response to it as well.
func (m *Model) MaxResponse() int64 { return m.maxResponse }

func responseTooLarge(model string, n, limit int64) error {
	return backend.Errorf(backend.TooLarge, "response of model '%s' would hold %d bytes of output, more than the maximum of %d bytes (--max-response-size)", model, n, limit)
}

// satMul and satAdd multiply and add non-negative counts, saturating at
// math.MaxInt64 instead of overflowing.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func inputNames(req *backend.Request) string {
	names := make([]string, len(req.Inputs))
	for i := range req.Inputs {
		names[i] = "'" + req.Inputs[i].Name + "'"
	}
	return "[" + strings.Join(names, ",") + "]"
}

func (m *Model) shapeError(t *backend.Tensor, spec *backend.TensorSpec) error {
	return backend.Errorf(backend.InvalidArg, "unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
		t.Name, m.Name, FormatShape(m.FullShape(spec)), FormatShape(t.Shape))
}

// FormatShape renders a shape as Triton does in messages: [-1,10].
func FormatShape(s []int64) string {
	b := []byte{'['}
	for i, d := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// checkByteSize verifies that t.Data holds exactly the elements of t.Shape.
func checkByteSize(t *backend.Tensor) *backend.Error {
	n := int64(1)
	for _, d := range t.Shape {
		n = satMul(n, d)
	}
	if t.DataType != backend.Bytes {
		want := satMul(n, int64(t.DataType.Size()))
		if want == math.MaxInt64 {
			return backend.Errorf(backend.InvalidArg, "shape %s has more elements than a request can carry", FormatShape(t.Shape))
		}
		if want != int64(len(t.Data)) {
			return backend.Errorf(backend.InvalidArg, "expected %d bytes of data for shape %s, got %d", want, FormatShape(t.Shape), len(t.Data))
		}
		return nil
	}
	data := t.Data
	var count int64
	for len(data) > 0 {
		if len(data) < 4 {
			return backend.Errorf(backend.InvalidArg, "BYTES element %d has a truncated length prefix", count)
		}
		l := int64(binary.LittleEndian.Uint32(data))
		if int64(len(data)-4) < l {
			return backend.Errorf(backend.InvalidArg, "BYTES element %d of length %d runs past the end of the data", count, l)
		}
		data = data[4+l:]
		count++
	}
	if count != n {
		return backend.Errorf(backend.InvalidArg, "expected %d BYTES elements for shape %s, got %d", n, FormatShape(t.Shape), count)
	}
	return nil
}
