package scheduler

import (
	"slices"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// State is one implicit state tensor of a sequence model
// (sequence_batching.state): the model reads it as input Input and writes
// the next value as output Output; the sequence batcher keeps that output
// and feeds it back with the sequence's next request, so the model itself
// keeps nothing between requests.
type State struct {
	Input, Output string
	DataType      backend.DataType
	// Dims are the state's dims without the batch dimension; -1 takes any
	// size, so the state may change shape from one request to the next.
	Dims []int64
	// InitialShape and Initial (row-major, Triton's wire encoding) are
	// what a sequence's START request gets: initial_state's zero_data or
	// data_file, or zeros of Dims with 1 for each variable dimension when
	// the config has none (Triton leaves that tensor uninitialized).
	InitialShape []int64
	Initial      []byte
	// Declared is set when Output is also one of the model's outputs, so
	// a client may request it (Triton allows that for debugging).
	Declared bool
}

// MaxStateBytes bounds one state tensor a model returns: the sequence
// batcher holds one per state and sequence slot, and a model that grows
// its state with every request would otherwise grow the server's memory
// without end.
const MaxStateBytes = 64 << 20

// initStates derives the output names requested from the backend: a
// client's request names the model's outputs (or none, meaning all
// declared ones), and the backend must also produce the state outputs.
func (q *sequencer) initStates(outputs []backend.TensorSpec) {
	if len(q.cfg.States) == 0 {
		return
	}
	for _, o := range outputs {
		q.allOutputs = append(q.allOutputs, o.Name)
	}
	for _, st := range q.cfg.States {
		if !slices.Contains(q.allOutputs, st.Output) {
			q.allOutputs = append(q.allOutputs, st.Output)
		}
	}
}

// stateOutputs is what the backend is asked to produce for a request
// whose client asked for requested.
func (q *sequencer) stateOutputs(requested []string) []string {
	if len(requested) == 0 {
		return q.allOutputs
	}
	out := slices.Clone(requested)
	for _, st := range q.cfg.States {
		if !slices.Contains(out, st.Output) {
			out = append(out, st.Output)
		}
	}
	return out
}

// initialState is state i as a START request receives it.
func (q *sequencer) initialState(i int) backend.Tensor {
	st := &q.cfg.States[i]
	return backend.Tensor{Name: st.Input, DataType: st.DataType, Shape: q.batched(st.InitialShape), Data: st.Initial}
}

// batched prepends the batch dimension of one request when the model
// batches.
func (q *sequencer) batched(shape []int64) []int64 {
	if q.s.cfg.MaxBatchSize > 0 {
		return append([]int64{1}, shape...)
	}
	return slices.Clone(shape)
}

// stateInputs are the state tensors of j's execution: the initial ones for
// the START request, else what the sequence's previous request left.
func (q *sequencer) stateInputs(j *job) []backend.Tensor {
	var kept []backend.Tensor
	if !j.req.Sequence.Start {
		kept = j.seqState
	}
	out := make([]backend.Tensor, len(q.cfg.States))
	for i := range out {
		if kept != nil {
			out[i] = kept[i]
		} else {
			out[i] = q.initialState(i)
		}
	}
	return out
}

// keepState takes the state outputs out of j's response and keeps them for
// the sequence's next request (dropping them when the sequence ended or
// lost its slot). The client sees a state output only when it asked for
// it by name, or for all outputs and the model declares it. A state output
// that is missing or does not fit the state fails the request and leaves
// the sequence's state as it was.
func (q *sequencer) keepState(j *job, r *backend.Response) *backend.Response {
	if r.Err != nil {
		return r
	}
	next := make([]backend.Tensor, len(q.cfg.States))
	outs := make([]backend.Tensor, 0, len(r.Outputs))
	for _, t := range r.Outputs {
		i := slices.IndexFunc(q.cfg.States, func(st State) bool { return st.Output == t.Name })
		if i < 0 {
			outs = append(outs, t)
			continue
		}
		if err := q.checkState(&q.cfg.States[i], &t); err != nil {
			return &backend.Response{Err: err}
		}
		next[i] = backend.Tensor{Name: q.cfg.States[i].Input, DataType: t.DataType, Shape: t.Shape, Data: t.Data}
		if q.clientWants(j.req.Outputs, &q.cfg.States[i]) {
			outs = append(outs, t)
		}
	}
	for i, t := range next {
		if t.Name == "" {
			return &backend.Response{Err: backend.Errorf(backend.Internal, "model '%s' returned no state output '%s' for sequence %s", q.s.cfg.Name, q.cfg.States[i].Output, j.req.Sequence)}
		}
	}
	q.mu.Lock()
	if slot := j.slot; slot != nil {
		// The slot may already be unbound (END was queued, or the
		// sequence idled out) or serve the next sequence, whose first
		// request starts from the initial state anyway.
		if slot.bound && slot.key == (seqKey{j.req.Sequence.ID, j.req.Sequence.StrID}) && !j.req.Sequence.End {
			slot.state = next
		} else {
			slot.state = nil
		}
	}
	q.mu.Unlock()
	r.Outputs = outs
	return r
}

func (q *sequencer) clientWants(requested []string, st *State) bool {
	if len(requested) == 0 {
		return st.Declared
	}
	return slices.Contains(requested, st.Output)
}

// checkState refuses a state output of another type or shape than the
// state's, or larger than MaxStateBytes.
func (q *sequencer) checkState(st *State, t *backend.Tensor) error {
	shape := t.Shape
	ok := t.DataType == st.DataType
	if q.s.cfg.MaxBatchSize > 0 {
		ok = ok && len(shape) > 0 && shape[0] == 1
		if len(shape) > 0 {
			shape = shape[1:]
		}
	}
	ok = ok && len(shape) == len(st.Dims)
	for d := 0; ok && d < len(shape); d++ {
		ok = st.Dims[d] < 0 || st.Dims[d] == shape[d]
	}
	if !ok {
		return backend.Errorf(backend.Internal, "model '%s' returned state output '%s' as %s %v; the state is %s %v", q.s.cfg.Name, st.Output, t.DataType, t.Shape, st.DataType, q.batched(st.Dims))
	}
	if len(t.Data) > MaxStateBytes {
		return backend.Errorf(backend.Internal, "model '%s' returned state output '%s' of %d bytes; a state may hold at most %d", q.s.cfg.Name, st.Output, len(t.Data), MaxStateBytes)
	}
	return nil
}
