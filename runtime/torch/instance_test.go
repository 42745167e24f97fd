package torch

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// rowModel stands in for a module in the batching tests: output 0 is the
// input times two, output 1 the sum of each row, computed in Go. It records
// the shapes of every forward so tests can see what was concatenated.
type rowModel struct {
	calls [][]int64
}

func (m *rowModel) Forward(in []backend.Tensor) ([]backend.Tensor, error) {
	x := in[0]
	m.calls = append(m.calls, append([]int64(nil), x.Shape...))
	vals := f32s(x.Data)
	rows, cols := x.Shape[0], x.Shape[1]
	doubled := make([]float32, len(vals))
	sums := make([]float32, rows)
	for r := int64(0); r < rows; r++ {
		for c := int64(0); c < cols; c++ {
			v := vals[r*cols+c]
			doubled[r*cols+c] = 2 * v
			sums[r] += v
		}
	}
	return []backend.Tensor{
		{DataType: backend.FP32, Shape: []int64{rows, cols}, Data: f32bytes(doubled)},
		{DataType: backend.FP32, Shape: []int64{rows, 1}, Data: f32bytes(sums)},
	}, nil
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func rowSpec(maxBatch int) *backend.ModelSpec {
	return &backend.ModelSpec{
		Name:         "rows",
		MaxBatchSize: maxBatch,
		Inputs:       []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.FP32, Dims: []int64{-1}}},
		Outputs: []backend.TensorSpec{
			{Name: "OUTPUT__0", DataType: backend.FP32, Dims: []int64{-1}},
			{Name: "OUTPUT__1", DataType: backend.FP32, Dims: []int64{1}},
		},
	}
}

func rowRequest(rows, cols int, base float32, outputs ...string) *backend.Request {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = base + float32(i)
	}
	return &backend.Request{
		Inputs:  []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{int64(rows), int64(cols)}, Data: f32bytes(v)}},
		Outputs: outputs,
	}
}

func TestBatchingConcatenatesAndSplits(t *testing.T) {
	m := &rowModel{}
	inst, err := newInstance(rowSpec(8), m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*backend.Request{
		rowRequest(1, 3, 0),
		rowRequest(3, 3, 100),
		rowRequest(2, 3, 1000, "OUTPUT__1"),
		rowRequest(2, 4, 5), // other width: cannot join the 3-wide forward
	}
	resps, err := inst.Execute(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.calls) != 2 || m.calls[0][0] != 6 || m.calls[1][0] != 2 || m.calls[1][1] != 4 {
		t.Fatalf("forward shapes %v, want [[6 3] [2 4]]", m.calls)
	}
	for i, r := range reqs {
		resp := resps[i]
		if resp.Err != nil {
			t.Fatalf("request %d: %v", i, resp.Err)
		}
		in := f32s(r.Inputs[0].Data)
		shape := r.Inputs[0].Shape
		want := []string{"OUTPUT__0", "OUTPUT__1"}
		if len(r.Outputs) > 0 {
			want = r.Outputs
		}
		if len(resp.Outputs) != len(want) {
			t.Fatalf("request %d: %d outputs, want %v", i, len(resp.Outputs), want)
		}
		for k, out := range resp.Outputs {
			if out.Name != want[k] {
				t.Fatalf("request %d output %d is %q, want %q", i, k, out.Name, want[k])
			}
			got := f32s(out.Data)
			if out.Shape[0] != shape[0] {
				t.Fatalf("request %d %s: batch %d, want %d", i, out.Name, out.Shape[0], shape[0])
			}
			switch out.Name {
			case "OUTPUT__0":
				for j := range in {
					if got[j] != 2*in[j] {
						t.Fatalf("request %d %s[%d] = %v, want %v", i, out.Name, j, got[j], 2*in[j])
					}
				}
			case "OUTPUT__1":
				for row := int64(0); row < shape[0]; row++ {
					var s float32
					for c := int64(0); c < shape[1]; c++ {
						s += in[row*shape[1]+c]
					}
					if got[row] != s {
						t.Fatalf("request %d row %d sum %v, want %v", i, row, got[row], s)
					}
				}
			}
		}
	}
}

func TestBatchingRespectsMaxBatchSize(t *testing.T) {
	m := &rowModel{}
	inst, err := newInstance(rowSpec(4), m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*backend.Request{rowRequest(3, 2, 0), rowRequest(2, 2, 0), rowRequest(1, 2, 0), rowRequest(5, 2, 0)}
	resps, _ := inst.Execute(context.Background(), reqs)
	// 3 rows, then 2+1; the 5-row request exceeds max_batch_size alone.
	if len(m.calls) != 2 || m.calls[0][0] != 3 || m.calls[1][0] != 3 {
		t.Fatalf("forward shapes %v", m.calls)
	}
	if resps[3].Err == nil || !strings.Contains(resps[3].Err.Error(), "batch size 5") {
		t.Fatalf("oversized request: %v", resps[3].Err)
	}
	for i := 0; i < 3; i++ {
		if resps[i].Err != nil {
			t.Fatalf("request %d: %v", i, resps[i].Err)
		}
	}
}

func TestBadRequestFailsAlone(t *testing.T) {
	m := &rowModel{}
	inst, err := newInstance(rowSpec(8), m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	bad := []*backend.Request{
		{Inputs: []backend.Tensor{{Name: "nope", DataType: backend.FP32, Shape: []int64{1, 1}, Data: make([]byte, 4)}}},
		{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.Int32, Shape: []int64{1, 1}, Data: make([]byte, 4)}}},
		{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: []int64{1, 2}, Data: make([]byte, 4)}}},
		{Inputs: nil},
		rowRequest(1, 2, 0, "OUTPUT__9"),
	}
	wants := []string{`unexpected inference input "nope"`, "data type INT32, expected FP32", "8", `expected input "INPUT__0"`, `unexpected inference output "OUTPUT__9"`}
	reqs := append(bad, rowRequest(2, 2, 1))
	resps, err := inst.Execute(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range wants {
		if resps[i].Err == nil || !strings.Contains(resps[i].Err.Error(), w) {
			t.Errorf("request %d: error %v, want one mentioning %q", i, resps[i].Err, w)
		}
		var be *backend.Error
		if !asBackendError(resps[i].Err, &be) || be.Code != backend.InvalidArg {
			t.Errorf("request %d: error %#v is not an InvalidArg *backend.Error", i, resps[i].Err)
		}
	}
	if last := resps[len(bad)]; last.Err != nil || len(last.Outputs) != 2 {
		t.Fatalf("good request: %+v", last)
	}
	if len(m.calls) != 1 {
		t.Fatalf("%d forwards, want 1", len(m.calls))
	}
}

func TestUnbatchedRunsEachRequest(t *testing.T) {
	m := &rowModel{}
	spec := rowSpec(0)
	spec.Inputs[0].Dims = []int64{-1, -1}
	inst, err := newInstance(spec, m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	resps, _ := inst.Execute(context.Background(), []*backend.Request{rowRequest(2, 2, 0), rowRequest(2, 2, 0)})
	if len(m.calls) != 2 {
		t.Fatalf("%d forwards, want 2", len(m.calls))
	}
	for i, r := range resps {
		if r.Err != nil || len(r.Outputs) != 2 || r.Outputs[0].Shape[0] != 2 {
			t.Fatalf("response %d: %+v", i, r)
		}
	}
}

func TestInputPositions(t *testing.T) {
	specs := func(names ...string) []backend.TensorSpec {
		var s []backend.TensorSpec
		for _, n := range names {
			s = append(s, backend.TensorSpec{Name: n, DataType: backend.FP32})
		}
		return s
	}
	cases := []struct {
		names    []string
		forward  []string
		required int
		pinned   map[int]int
		want     []int
		err      string
	}{
		{[]string{"INPUT__1", "INPUT__0"}, []string{"a", "b"}, 2, nil, []int{1, 0}, ""},
		{[]string{"b", "a"}, []string{"a", "b"}, 2, nil, []int{1, 0}, ""},
		{[]string{"y", "x"}, []string{"a", "b"}, 2, nil, []int{0, 1}, ""},
		{[]string{"x"}, []string{"a", "b"}, 1, nil, []int{0}, ""},
		{[]string{"INPUT__0", "INPUT__0"}, []string{"a", "b"}, 2, nil, nil, "both claim position 0"},
		{[]string{"INPUT__0", "INPUT__2"}, []string{"a", "b"}, 2, nil, nil, "position 2"},
		{[]string{"x", "y"}, []string{"a"}, 1, nil, nil, "config declares 2 inputs but the model's forward() takes 1"},
		{[]string{"x"}, []string{"a", "b"}, 2, nil, nil, "takes 2 (a, b)"},
		// Control inputs (pinned) keep their index under every rule.
		{[]string{"IN", "START__1", "STATE"}, []string{"IN", "start", "STATE"}, 3, map[int]int{1: 1}, []int{0, 1, 2}, ""},
		{[]string{"STATE", "IN", "START__0"}, []string{"x", "IN", "STATE"}, 3, map[int]int{2: 0}, []int{2, 1, 0}, ""},
		{[]string{"a", "b", "START__0"}, []string{"x", "y", "z"}, 3, map[int]int{2: 0}, []int{1, 2, 0}, ""},
		{[]string{"INPUT__0", "START__0"}, []string{"x", "y"}, 2, map[int]int{1: 0}, nil, "both claim position 0"},
		{[]string{"a", "START__5"}, []string{"x", "y"}, 2, map[int]int{1: 5}, nil, "names position 5 but there are only 2"},
	}
	for _, c := range cases {
		got, err := inputPositions(specs(c.names...), c.forward, c.required, c.pinned)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.names, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%v: %v, %v; want %v", c.names, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: %v, want %v", c.names, got, c.want)
				break
			}
		}
	}
}

func TestOutputPositions(t *testing.T) {
	outs := []backend.TensorSpec{{Name: "OUTPUT__1"}, {Name: "OUTPUT__0"}}
	if got, err := outputPositions(outs, 2); err != nil || got[0] != 1 || got[1] != 0 {
		t.Fatalf("indexed: %v %v", got, err)
	}
	if _, err := outputPositions(outs, 1); err == nil || !strings.Contains(err.Error(), "declares 2 outputs but the model's forward() returns 1") {
		t.Fatalf("count mismatch: %v", err)
	}
	plain := []backend.TensorSpec{{Name: "b"}, {Name: "a"}}
	if got, err := outputPositions(plain, -1); err != nil || got[0] != 0 || got[1] != 1 {
		t.Fatalf("config order: %v %v", got, err)
	}
}

func TestSpecChecks(t *testing.T) {
	b := New(Options{})
	spec := rowSpec(0)
	spec.Inputs[0].DataType = backend.Uint32
	_, err := b.NewInstance(context.Background(), spec, 0)
	if err == nil || !strings.Contains(err.Error(), "UINT32 is not supported") {
		t.Fatalf("UINT32 input: %v", err)
	}
	spec = rowSpec(0)
	spec.Parameters = map[string]string{ParamIntraOpThreads: "two"}
	_, err = b.NewInstance(context.Background(), spec, 0)
	if err == nil || !strings.Contains(err.Error(), "INTRA_OP_THREAD_COUNT") {
		t.Fatalf("bad thread count: %v", err)
	}
}

func TestOpLibrariesOrder(t *testing.T) {
	spec := &backend.ModelSpec{
		BackendConfig: map[string]string{ConfigOpLibraries: "/a.so: /b.so"},
		OpLibraries:   []string{"/c.so", "/a.so"},
	}
	got := strings.Join(opLibraries(spec), ",")
	if got != "/a.so,/b.so,/c.so" {
		t.Fatalf("op libraries %q", got)
	}
}

func TestDtypeCodesRoundTrip(t *testing.T) {
	for _, d := range []backend.DataType{backend.Bool, backend.Uint8, backend.Uint16, backend.Uint32, backend.Uint64,
		backend.Int8, backend.Int16, backend.Int32, backend.Int64, backend.FP16, backend.FP32, backend.FP64, backend.BF16, backend.Bytes} {
		c := dtypeCode(d)
		if c == 0 || dtypeFromCode(c) != d {
			t.Errorf("%s: code %d maps back to %q", d, c, dtypeFromCode(c))
		}
	}
}

func TestCanceledContextFailsRequests(t *testing.T) {
	m := &rowModel{}
	inst, err := newInstance(rowSpec(8), m, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	closed := 0
	inst.close = func() error { closed++; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resps, err := inst.Execute(ctx, []*backend.Request{rowRequest(1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var be *backend.Error
	if !asBackendError(resps[0].Err, &be) || be.Code != backend.Unavailable || len(m.calls) != 0 {
		t.Fatalf("canceled: %#v after %d forwards", resps[0].Err, len(m.calls))
	}
	// Close twice: the second call must not run the closer again.
	for i := range 2 {
		if err := inst.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if closed != 1 {
		t.Fatalf("Close ran the closer %d times", closed)
	}
}

func TestOutputDtypeMismatch(t *testing.T) {
	spec := rowSpec(8)
	spec.Outputs[1].DataType = backend.FP64
	inst, err := newInstance(spec, &rowModel{}, []string{"x"}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	resps, _ := inst.Execute(context.Background(), []*backend.Request{rowRequest(1, 2, 0)})
	if resps[0].Err == nil || !strings.Contains(resps[0].Err.Error(), `returned FP32 for output "OUTPUT__1", config declares FP64`) {
		t.Fatalf("dtype mismatch: %v", resps[0].Err)
	}
	// Asking only for the matching output works.
	resps, _ = inst.Execute(context.Background(), []*backend.Request{rowRequest(1, 2, 0, "OUTPUT__0")})
	if resps[0].Err != nil || len(resps[0].Outputs) != 1 {
		t.Fatalf("OUTPUT__0 only: %+v", resps[0])
	}
}

// raggedModel takes a ragged input flattened to 1-D and the batch input
// INDEX (accumulated element counts, INT32); it returns the input doubled
// (a batch output scattered by the input's shapes) and each request's sum.
type raggedModel struct {
	shapes [][]int64
	index  [][]int32
}

func (m *raggedModel) Forward(in []backend.Tensor) ([]backend.Tensor, error) {
	x, idx := in[0], in[1]
	m.shapes = append(m.shapes, append([]int64(nil), x.Shape...))
	var ends []int32
	for i := 0; i+4 <= len(idx.Data); i += 4 {
		ends = append(ends, int32(binary.LittleEndian.Uint32(idx.Data[i:])))
	}
	m.index = append(m.index, ends)
	vals := f32s(x.Data)
	doubled := make([]float32, len(vals))
	for i, v := range vals {
		doubled[i] = 2 * v
	}
	sums := make([]float32, len(ends))
	start := int32(0)
	for r, end := range ends {
		for _, v := range vals[start:end] {
			sums[r] += v
		}
		start = end
	}
	return []backend.Tensor{
		{DataType: backend.FP32, Shape: []int64{int64(len(vals))}, Data: f32bytes(doubled)},
		{DataType: backend.FP32, Shape: []int64{int64(len(ends)), 1}, Data: f32bytes(sums)},
	}, nil
}

func TestRaggedBatchWithBatchInputAndOutput(t *testing.T) {
	spec := &backend.ModelSpec{
		Name:         "ragged",
		MaxBatchSize: 8,
		Inputs:       []backend.TensorSpec{{Name: "INPUT", DataType: backend.FP32, Dims: []int64{-1}, Ragged: true}},
		Outputs: []backend.TensorSpec{
			{Name: "DOUBLED", DataType: backend.FP32, Dims: []int64{-1}},
			{Name: "SUM", DataType: backend.FP32, Dims: []int64{1}},
		},
		BatchInputs:  []backend.BatchInput{{Kind: backend.BatchAccumulatedElementCount, Targets: []string{"INDEX"}, DataType: backend.Int32, Source: "INPUT"}},
		BatchOutputs: []backend.BatchOutput{{Targets: []string{"DOUBLED"}, Source: "INPUT"}},
	}
	m := &raggedModel{}
	// forward(INPUT, INDEX): matched by forward()'s argument names.
	inst, err := newInstance(spec, m, []string{"INPUT", "INDEX"}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	req := func(n int, base float32) *backend.Request {
		r := rowRequest(1, n, base)
		r.Inputs[0].Name = "INPUT"
		return r
	}
	reqs := []*backend.Request{req(3, 0), req(4, 10), req(5, 100)}
	resps, err := inst.Execute(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.shapes) != 1 || len(m.shapes[0]) != 1 || m.shapes[0][0] != 12 {
		t.Fatalf("forward input shapes %v, want one forward of [12]", m.shapes)
	}
	if got := m.index[0]; len(got) != 3 || got[0] != 3 || got[1] != 7 || got[2] != 12 {
		t.Fatalf("INDEX = %v, want [3 7 12]", got)
	}
	for i, r := range reqs {
		resp := resps[i]
		if resp.Err != nil {
			t.Fatalf("request %d: %v", i, resp.Err)
		}
		in := f32s(r.Inputs[0].Data)
		d, s := resp.Outputs[0], resp.Outputs[1]
		if d.Name != "DOUBLED" || len(d.Shape) != 2 || d.Shape[0] != 1 || d.Shape[1] != int64(len(in)) {
			t.Fatalf("request %d: %s shape %v, want [1 %d]", i, d.Name, d.Shape, len(in))
		}
		var sum float32
		for j, v := range f32s(d.Data) {
			if v != 2*in[j] {
				t.Fatalf("request %d DOUBLED[%d] = %v, want %v", i, j, v, 2*in[j])
			}
			sum += in[j]
		}
		if got := f32s(s.Data); len(got) != 1 || got[0] != sum {
			t.Fatalf("request %d SUM = %v, want [%v]", i, got, sum)
		}
	}

	// One request alone is flattened too, and its INDEX is its own count.
	if _, err := inst.Execute(context.Background(), reqs[1:2]); err != nil {
		t.Fatal(err)
	}
	if got := m.shapes[1]; len(got) != 1 || got[0] != 4 || len(m.index[1]) != 1 || m.index[1][0] != 4 {
		t.Fatalf("single request: forward shape %v INDEX %v, want [4] and [4]", got, m.index[1])
	}
}

// seqModel stands in for a stateful module: forward(INPUT__0, START__1,
// STATE__2) returns INPUT__0 plus STATE__2 unless START__1, twice (the
// output and the next state).
type seqModel struct{}

func (m *seqModel) Forward(in []backend.Tensor) ([]backend.Tensor, error) {
	x, start, state := in[0], in[1], in[2]
	out := make([]byte, len(x.Data))
	for i := 0; i+4 <= len(x.Data); i += 4 {
		v := binary.LittleEndian.Uint32(x.Data[i:])
		if binary.LittleEndian.Uint32(start.Data[i:]) == 0 {
			v += binary.LittleEndian.Uint32(state.Data[i:])
		}
		binary.LittleEndian.PutUint32(out[i:], v)
	}
	return []backend.Tensor{
		{DataType: backend.Int32, Shape: x.Shape, Data: out},
		{DataType: backend.Int32, Shape: x.Shape, Data: out},
	}, nil
}

// TestSequenceInputsAndStateOutputs: the sequence batcher's control and
// state inputs are forward() arguments after the config's (here by their
// __<index> suffixes), batched like them, and an undeclared state output
// is produced after the config's outputs.
func TestSequenceInputsAndStateOutputs(t *testing.T) {
	spec := &backend.ModelSpec{
		Name: "seq", MaxBatchSize: 4,
		Inputs:           []backend.TensorSpec{{Name: "INPUT__0", DataType: backend.Int32, Dims: []int64{1}}},
		Outputs:          []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.Int32, Dims: []int64{1}}},
		SequenceInputs:   []backend.TensorSpec{{Name: "START__1", DataType: backend.Int32, Dims: []int64{1}}, {Name: "STATE__2", DataType: backend.Int32, Dims: []int64{-1}}},
		SequenceOutputs:  []backend.TensorSpec{{Name: "STATE_OUT__1", DataType: backend.Int32, Dims: []int64{-1}}},
		SequenceControls: 1,
	}
	inst, err := newInstance(spec, &seqModel{}, []string{"x", "start", "state"}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	i32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	req := func(x, start, state uint32) *backend.Request {
		one := []int64{1, 1}
		return &backend.Request{Outputs: []string{"OUTPUT__0", "STATE_OUT__1"}, Inputs: []backend.Tensor{
			{Name: "STATE__2", DataType: backend.Int32, Shape: one, Data: i32(state)},
			{Name: "INPUT__0", DataType: backend.Int32, Shape: one, Data: i32(x)},
			{Name: "START__1", DataType: backend.Int32, Shape: one, Data: i32(start)},
		}}
	}
	resps, err := inst.Execute(context.Background(), []*backend.Request{req(5, 1, 100), req(5, 0, 100)})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint32{5, 105} {
		r := resps[i]
		if r.Err != nil || len(r.Outputs) != 2 || r.Outputs[1].Name != "STATE_OUT__1" {
			t.Fatalf("request %d: %v %v", i, r.Outputs, r.Err)
		}
		for _, o := range r.Outputs {
			if got := binary.LittleEndian.Uint32(o.Data); got != want {
				t.Fatalf("request %d %s = %d, want %d", i, o.Name, got, want)
			}
		}
	}
}

// TestControlInputNames: a control input must be named <name>__<index>,
// whatever names the config's inputs use, and is refused otherwise with
// the text of Triton's libtorch backend; state inputs follow the config's
// inputs' rule (here forward()'s argument names).
func TestControlInputNames(t *testing.T) {
	spec := func(control string) *backend.ModelSpec {
		return &backend.ModelSpec{
			Name: "seq", MaxBatchSize: 4,
			Inputs:           []backend.TensorSpec{{Name: "x", DataType: backend.Int32, Dims: []int64{1}}},
			Outputs:          []backend.TensorSpec{{Name: "OUTPUT__0", DataType: backend.Int32, Dims: []int64{1}}},
			SequenceInputs:   []backend.TensorSpec{{Name: control, DataType: backend.Int32, Dims: []int64{1}}, {Name: "state", DataType: backend.Int32, Dims: []int64{1}}},
			SequenceOutputs:  []backend.TensorSpec{{Name: "STATE_OUT__1", DataType: backend.Int32, Dims: []int64{1}}},
			SequenceControls: 1,
		}
	}
	for _, bad := range []string{"START", "START_1", "START__x", "A__1__2"} {
		_, err := newInstance(spec(bad), &seqModel{}, []string{"x", "START", "state"}, 3, 2)
		if want := "input '" + bad + "' does not follow <name>__<index> naming convention."; err == nil || err.Error() != want {
			t.Errorf("control %q: error %v, want %q", bad, err, want)
		}
	}
	// forward(state, start, x): x and state by name, the control at 1.
	inst, err := newInstance(spec("START__1"), &seqModel{}, []string{"state", "start", "x"}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 1, 0}; !slices.Equal(inst.inPos, want) {
		t.Errorf("positions of x, START__1, state: %v, want %v", inst.inPos, want)
	}
}
