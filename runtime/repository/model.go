package repository

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/status"
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
	// Spec is the backend's view of the model: its tensors' Dims are their
	// reshape where the config gives one.
	Spec      *backend.ModelSpec
	Scheduler *scheduler.Scheduler
	// Inputs and Outputs are the tensors as clients see them (the
	// config's dims), which requests are validated against and metadata
	// reports.
	Inputs, Outputs []backend.TensorSpec

	inputIndex  map[string]int // name -> index in Inputs
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
	// reshape maps tensors between Inputs/Outputs and Spec; nil when no
	// tensor has a reshape.
	reshape *reshapes
}

// VersionString is the version as it appears on the wire ("1").
func (m *Model) VersionString() string { return strconv.FormatInt(m.Version, 10) }

// Input returns the declared input called name.
func (m *Model) Input(name string) (*backend.TensorSpec, bool) {
	i, ok := m.inputIndex[name]
	if !ok {
		return nil, false
	}
	return &m.Inputs[i], true
}

// Output returns the declared output called name.
func (m *Model) Output(name string) (*backend.TensorSpec, bool) {
	i, ok := m.outputIndex[name]
	if !ok {
		return nil, false
	}
	return &m.Outputs[i], true
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
	m.inputIndex = make(map[string]int, len(m.Inputs))
	for i, in := range m.Inputs {
		m.inputIndex[in.Name] = i
		if !in.Optional {
			m.required++
		}
	}
	m.outputIndex = make(map[string]int, len(m.Outputs))
	for i, out := range m.Outputs {
		m.outputIndex[out.Name] = i
	}
}

// Validate checks a decoded request against the model's configuration in
// the order Triton's core does (InferenceRequest::Normalize and its byte
// size checks): input names not repeated, requested outputs declared (and
// not repeated), the number of inputs, the batch dimension (present, equal
// across inputs, within max_batch_size), each input's name, data type and
// shape, every required input present, data sizes (for BYTES, that the
// length-prefixed elements fill the data exactly) and, where the config
// fixes the outputs' sizes, that the response stays within
// Options.MaxResponseSize. Errors are *backend.Error with Triton's codes
// and texts (runtime/status); TooLarge for the response bound.
func (m *Model) Validate(req *backend.Request) error {
	// Names are checked against the config later; a repeated name is
	// refused first, as Triton's AddOriginalInput does, whatever the name.
	if name, ok := repeatedInput(req.Inputs); ok {
		return status.DuplicateInput.New(status.RequestPrefix(req.ID), name)
	}
	requested := newIndexSet(len(m.Outputs))
	for _, name := range req.Outputs {
		idx, ok := m.outputIndex[name]
		if !ok {
			return status.UnexpectedOutput.New(name, m.Name)
		}
		if !requested.add(idx) {
			return status.DuplicateOutput.New(name)
		}
	}
	if len(req.Inputs) > len(m.Inputs) || len(req.Inputs) < m.required {
		return m.inputCountError(req)
	}
	var batch int64 = -1
	if m.Spec.MaxBatchSize > 0 {
		for i := range req.Inputs {
			t := &req.Inputs[i]
			if _, ok := m.inputIndex[t.Name]; !ok {
				return status.UnexpectedInput.New(t.Name, m.Name)
			}
			if len(t.Shape) == 0 {
				return status.NoBatchDim.New(status.RequestPrefix(req.ID), t.Name, m.Name)
			}
			if batch >= 0 && t.Shape[0] != batch {
				return status.BatchMismatch.New(status.RequestPrefix(req.ID), t.Name, m.Name)
			}
			batch = t.Shape[0]
		}
		if batch > int64(m.Spec.MaxBatchSize) || batch == 0 {
			return status.BatchTooLarge.New(status.RequestPrefix(req.ID), m.Spec.MaxBatchSize, m.Name)
		}
	}
	seen := 0
	for i := range req.Inputs {
		t := &req.Inputs[i]
		idx, ok := m.inputIndex[t.Name]
		if !ok {
			return status.UnexpectedInput.New(t.Name, m.Name)
		}
		spec := &m.Inputs[idx]
		if !spec.Optional {
			seen++
		}
		if t.DataType != spec.DataType {
			return status.InputDataType.New(status.RequestPrefix(req.ID), t.Name, t.DataType, m.Name, spec.DataType)
		}
		dims := t.Shape
		if m.Spec.MaxBatchSize > 0 {
			dims = t.Shape[1:]
		} else if m.leadingDim && len(t.Shape) == len(spec.Dims)+1 && t.Shape[0] >= 1 {
			// The field report's client sends [2,10] to a model declaring
			// dims [10] without batching; its model.py handles the rows.
			// Triton refuses this; --strict-input-shapes does too.
			if batch >= 0 && t.Shape[0] != batch {
				return status.BatchMismatch.New(status.RequestPrefix(req.ID), t.Name, m.Name)
			}
			batch = t.Shape[0]
			dims = t.Shape[1:]
		}
		if len(dims) == len(spec.Dims) {
			for k, d := range dims {
				if d < 0 {
					return status.WildcardDim.New(status.RequestPrefix(req.ID), t.Name, m.Name, FormatShape(t.Shape))
				}
				if spec.Dims[k] != -1 && d != spec.Dims[k] {
					return m.shapeError(req, t, spec)
				}
			}
		} else {
			return m.shapeError(req, t, spec)
		}
	}
	if seen != m.required {
		// Triton's count check passes when optional inputs make up the
		// number; a required one is still missing, which its backends
		// refuse later. The text is the count check's.
		return m.inputCountError(req)
	}
	for i := range req.Inputs {
		if err := m.checkByteSize(req, &req.Inputs[i]); err != nil {
			return err
		}
	}
	return m.checkResponseBound(req, max(batch, 1))
}

// repeatedInput returns the first input name given twice; a map only for
// requests with many inputs, so that the common request allocates nothing
// and a huge one costs no quadratic scan.
func repeatedInput(ins []backend.Tensor) (string, bool) {
	if len(ins) > 16 {
		seen := make(map[string]struct{}, len(ins))
		for i := range ins {
			if _, ok := seen[ins[i].Name]; ok {
				return ins[i].Name, true
			}
			seen[ins[i].Name] = struct{}{}
		}
		return "", false
	}
	for i := range ins {
		for k := 0; k < i; k++ {
			if ins[k].Name == ins[i].Name {
				return ins[i].Name, true
			}
		}
	}
	return "", false
}

// inputCountError is Triton's refusal of a request whose inputs do not
// cover the model's required ones, with its rendering of the lists: the
// inputs given in request order, the missing ones in config order (when
// none is missing Triton's code leaves just "]").
func (m *Model) inputCountError(req *backend.Request) error {
	missing := "["
	for _, in := range m.Inputs {
		if in.Optional {
			continue
		}
		found := false
		for k := range req.Inputs {
			found = found || req.Inputs[k].Name == in.Name
		}
		if !found {
			missing += "'" + in.Name + "',"
		}
	}
	missing = missing[:len(missing)-1] + "]"
	got := inputNames(req)
	if m.required == len(m.Inputs) {
		return status.InputCount.New(status.RequestPrefix(req.ID), len(m.Inputs), len(req.Inputs), m.Name, got, missing)
	}
	return status.InputCountRange.New(status.RequestPrefix(req.ID), m.required, len(m.Inputs), len(req.Inputs), m.Name, got, missing)
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
		for i := range m.Outputs {
			add(&m.Outputs[i])
		}
	} else {
		for _, name := range req.Outputs {
			add(&m.Outputs[m.outputIndex[name]])
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

func (m *Model) shapeError(req *backend.Request, t *backend.Tensor, spec *backend.TensorSpec) error {
	note := ""
	if m.Spec.MaxBatchSize > 0 {
		note = status.BatchNote
	}
	return status.InputShape.New(status.RequestPrefix(req.ID), t.Name, m.Name, FormatShape(m.FullShape(spec)), FormatShape(t.Shape), note)
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

// checkByteSize verifies that t.Data holds exactly the elements of
// t.Shape, with Triton's texts.
func (m *Model) checkByteSize(req *backend.Request, t *backend.Tensor) error {
	n := int64(1)
	for _, d := range t.Shape {
		n = satMul(n, d)
	}
	if t.DataType != backend.Bytes {
		want := satMul(n, int64(t.DataType.Size()))
		if want == math.MaxInt64 {
			return status.ElementCountOverflow.New(status.RequestPrefix(req.ID), t.Name, FormatShape(t.Shape), int64(math.MaxInt64))
		}
		if want != int64(len(t.Data)) {
			return status.ByteSizeMismatch.New(status.RequestPrefix(req.ID), t.Name, m.Name, want, len(t.Data))
		}
		return nil
	}
	data := t.Data
	var count int64
	for len(data) > 0 {
		if count == n {
			return status.StringsTooMany.New(status.RequestPrefix(req.ID), count+1, t.Name, m.Name, n)
		}
		if len(data) < 4 {
			return status.StringIndicator.New(status.RequestPrefix(req.ID), t.Name, m.Name, len(data))
		}
		l := int64(binary.LittleEndian.Uint32(data))
		if int64(len(data)-4) < l {
			return status.StringTruncated.New(status.RequestPrefix(req.ID), t.Name, m.Name, l, len(data)-4)
		}
		data = data[4+l:]
		count++
	}
	if count != n {
		return status.StringsTooFew.New(status.RequestPrefix(req.ID), n, t.Name, m.Name, count)
	}
	return nil
}
