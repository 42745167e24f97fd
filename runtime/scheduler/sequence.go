package scheduler

import (
	"slices"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// Strategy is how the sequence batcher forms batches.
type Strategy int

const (
	// Direct binds each sequence to one batch slot of one instance: the
	// request of slot i is always row i of the batch, and slots without a
	// request up to the highest busy one get a request with READY false,
	// so a model may keep its state per slot.
	Direct Strategy = iota
	// Oldest binds each sequence to one instance and batches the oldest
	// ready requests of that instance's candidate sequences, at most one
	// per sequence, like the dynamic batcher.
	Oldest
)

// ControlKind is the signal a control input carries.
type ControlKind int

// Triton's CONTROL_SEQUENCE_START, _READY, _END and _CORRID.
const (
	ControlStart ControlKind = iota
	ControlReady
	ControlEnd
	ControlCorrID
)

// Control is one control input the sequence batcher adds to every request
// it hands the model.
type Control struct {
	Kind     ControlKind
	Input    string
	DataType backend.DataType
	// False and True are the encoded element for the boolean kinds.
	False, True []byte
}

// Sequence holds the sequence batching settings (config.pbtxt's
// sequence_batching).
type Sequence struct {
	Strategy Strategy
	// MaxIdle releases the slot of a sequence that received no request for
	// this long; a later request of it without the START flag is refused.
	MaxIdle time.Duration
	// MaxQueueDelay is how long a forming batch may wait for more ready
	// sequences (direct: until MinSlotUtilization is reached; oldest:
	// until a preferred size or max_batch_size).
	MaxQueueDelay time.Duration
	// MinSlotUtilization (direct) is the share of an instance's slots that
	// must have a request before the delay is cut short.
	MinSlotUtilization float64
	// PreferredBatchSizes (oldest) end the gathering early.
	PreferredBatchSizes []int
	// MaxCandidates (oldest) is the number of sequences bound to one
	// instance at a time; 0 means max(max_batch_size, 1).
	MaxCandidates int
	Controls      []Control
	// MaxBacklog bounds the sequences waiting for a slot when every slot
	// is bound; 0 means DefaultMaxBacklog.
	MaxBacklog int
	// States are the implicit state tensors the scheduler carries from
	// one request of a sequence to the next (state.go).
	States []State
	// Iterative (Triton's iterative_sequence) makes each request a
	// sequence of its own, without a correlation id from the client: the
	// backend may release it for rescheduling (Response.Reschedule), and
	// it then waits in its slot for another execute; the
	// sequence ends when the request is answered. It is bounded by the
	// request's client: a cancelled or timed-out request is not executed
	// again.
	Iterative bool
}

// DefaultMaxBacklog is the backlog bound when Sequence.MaxBacklog is 0.
// Triton's backlog is unbounded; here a client opening sequences faster
// than they end gets a refusal instead of growing the server's memory.
const DefaultMaxBacklog = 1024

// maxSequenceQueued bounds the requests queued in the sequence batcher
// (in slots and in the backlog) across all sequences.
const maxSequenceQueued = queueChanCap

type seqKey struct {
	id  uint64
	str string
}

// seqSlot is one batch slot of one instance. It is bound while requests of
// its sequence may still come (its key maps to it); it is released to the
// next sequence once it is unbound (the END request was queued, or the
// sequence was idle too long) and its queue is empty.
type seqSlot struct {
	inst, idx int
	key       seqKey
	bound     bool
	last      time.Time // when the sequence's latest request arrived
	queue     []*job
	// state holds the sequence's implicit state tensors (index as
	// Sequence.States), nil until its first request produced them. Only
	// the slot's instance worker executes its requests, one at a time,
	// so the state is read and written in the sequence's order.
	state []backend.Tensor
}

// backlogSeq is a sequence waiting for a slot.
type backlogSeq struct {
	key    seqKey
	mapped bool // still reachable by its key (no END request yet)
	queue  []*job
}

// sequencer routes the requests of a sequence batching model to slots.
type sequencer struct {
	s   *Scheduler
	cfg *Sequence

	mu           sync.Mutex
	slots        [][]*seqSlot // per instance
	wake         []chan struct{}
	bound        map[seqKey]*seqSlot
	backlog      []*backlogSeq
	backlogByKey map[seqKey]*backlogSeq
	free         []*seqSlot // the next to bind last
	queued       int
	// iterID numbers the sequences of an iterative model (Iterative):
	// each request is one.
	iterID uint64
	// allOutputs are the outputs the backend produces for a request that
	// names none: the declared ones and the state outputs (state.go).
	allOutputs []string
}

func newSequencer(s *Scheduler, cfg *Sequence, instances, maxBatch int, outputs []backend.TensorSpec) *sequencer {
	per := max(maxBatch, 1)
	if cfg.Strategy == Oldest && cfg.MaxCandidates > 0 {
		per = cfg.MaxCandidates
	}
	q := &sequencer{s: s, cfg: cfg, bound: map[seqKey]*seqSlot{}, backlogByKey: map[seqKey]*backlogSeq{}}
	q.initStates(outputs)
	for i := 0; i < instances; i++ {
		row := make([]*seqSlot, per)
		for k := range row {
			row[k] = &seqSlot{inst: i, idx: k}
		}
		q.slots = append(q.slots, row)
		q.wake = append(q.wake, make(chan struct{}, 1))
	}
	// Slot 0 of every instance first, so that sequences spread over the
	// instances before they share one.
	for k := per - 1; k >= 0; k-- {
		for i := instances - 1; i >= 0; i-- {
			q.free = append(q.free, q.slots[i][k])
		}
	}
	return q
}

func (q *sequencer) signal(inst int) {
	select {
	case q.wake[inst] <- struct{}{}:
	default:
	}
}

// enqueue routes j to its sequence's slot or backlog, as Triton's sequence
// batch scheduler does, with Triton's refusals.
func (q *sequencer) enqueue(j *job) error {
	name := q.s.cfg.Name
	if q.cfg.Iterative {
		// The request is a sequence of its own, whatever the client
		// sent: a correlation id of the server's that no client request
		// names, START now, END never queued (the slot stays bound until
		// the request is answered, endIterative). The id goes on the
		// scheduler's copy of the request: the caller's may be sent
		// again, also concurrently.
		own := *j.req
		q.mu.Lock()
		q.iterID++
		own.Sequence = backend.Sequence{ID: q.iterID, Start: true}
		q.mu.Unlock()
		j.req = &own
	}
	seq := j.req.Sequence
	if !seq.InSequence() {
		return backend.Errorf(backend.InvalidArg, "inference request to model '%s' must specify a non-zero or non-empty correlation ID", name)
	}
	if j.rows > 1 {
		return backend.Errorf(backend.InvalidArg, "inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", name)
	}
	key := seqKey{seq.ID, seq.StrID}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	slot, bl := q.bound[key], q.backlogByKey[key]
	if !seq.Start && slot == nil && bl == nil {
		return backend.Errorf(backend.InvalidArg, "inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", seq, name)
	}
	if q.queued >= maxSequenceQueued {
		return status.QueueFull.New(status.RequestPrefix(j.req.ID))
	}
	switch {
	case slot != nil:
		slot.queue = append(slot.queue, j)
		slot.last = now
		if seq.End {
			delete(q.bound, key)
			slot.bound = false
		}
		q.signal(slot.inst)
	case bl != nil:
		bl.queue = append(bl.queue, j)
		if seq.End {
			delete(q.backlogByKey, key)
			bl.mapped = false
		}
	case len(q.free) > 0:
		slot = q.free[len(q.free)-1]
		q.free = q.free[:len(q.free)-1]
		slot.key, slot.bound, slot.last = key, !seq.End, now
		slot.queue = append(slot.queue, j)
		if slot.bound {
			q.bound[key] = slot
		}
		q.signal(slot.inst)
	default:
		limit := q.cfg.MaxBacklog
		if limit <= 0 {
			limit = DefaultMaxBacklog
		}
		if len(q.backlog) >= limit {
			return backend.Errorf(backend.Unavailable, "inference request for sequence %s to model '%s' cannot start: all %d sequence slots are in use and %d sequences already wait for one", seq, name, q.numSlots(), limit)
		}
		bl = &backlogSeq{key: key, mapped: !seq.End, queue: []*job{j}}
		q.backlog = append(q.backlog, bl)
		if bl.mapped {
			q.backlogByKey[key] = bl
		}
	}
	q.queued++
	return nil
}

func (q *sequencer) numSlots() int { return len(q.slots) * len(q.slots[0]) }

// releaseIfDone frees slot for the next sequence once it is unbound and
// has nothing queued. Called with mu held.
func (q *sequencer) releaseIfDone(slot *seqSlot, now time.Time) {
	if slot.bound || len(slot.queue) > 0 {
		return
	}
	slot.key = seqKey{}
	slot.state = nil // the sequence ended or idled out: free its state
	if len(q.backlog) == 0 {
		q.free = append(q.free, slot)
		return
	}
	bl := q.backlog[0]
	q.backlog[0] = nil
	q.backlog = q.backlog[1:]
	slot.key, slot.bound, slot.last, slot.queue = bl.key, bl.mapped, now, bl.queue
	if bl.mapped {
		delete(q.backlogByKey, bl.key)
		q.bound[bl.key] = slot
	}
	q.signal(slot.inst)
}

// requeue puts j, a request of an iterative model its backend released for
// rescheduling, back into its slot for another execute. The slot is still
// bound to j's sequence (only endIterative unbinds it).
func (q *sequencer) requeue(j *job) {
	j.req.Sequence.Start = false
	q.mu.Lock()
	slot := j.slot
	j.slot, j.seqState = nil, nil
	slot.queue = append(slot.queue, j)
	q.queued++
	q.signal(slot.inst)
	q.mu.Unlock()
}

// endIterative ends the sequence of j, a request of an iterative model that
// is answered or will not run again: its slot goes to the next sequence.
func (q *sequencer) endIterative(j *job) {
	slot := j.slot
	if slot == nil || !q.cfg.Iterative {
		return
	}
	key := seqKey{j.req.Sequence.ID, j.req.Sequence.StrID}
	q.mu.Lock()
	if slot.bound && slot.key == key {
		delete(q.bound, key)
		slot.bound = false
		q.releaseIfDone(slot, time.Now())
	}
	q.mu.Unlock()
}

// pop takes the head request of slot. Called with mu held.
func (q *sequencer) pop(slot *seqSlot, now time.Time) *job {
	j := slot.queue[0]
	// Before releaseIfDone, which frees the state of a sequence whose
	// END this is.
	j.slot, j.seqState = slot, slot.state
	slot.queue[0] = nil
	slot.queue = slot.queue[1:]
	if len(slot.queue) == 0 {
		slot.queue = nil
	}
	q.queued--
	q.releaseIfDone(slot, now)
	return j
}

// reap releases the slots of sequences idle longer than MaxIdle, as
// Triton's reaper does: the sequence is forgotten, so its next request
// without START is refused.
func (q *sequencer) reap(stop <-chan struct{}) {
	every := min(max(q.cfg.MaxIdle/8, time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			q.mu.Lock()
			for key, slot := range q.bound {
				if len(slot.queue) == 0 && now.Sub(slot.last) > q.cfg.MaxIdle {
					delete(q.bound, key)
					slot.bound = false
					q.releaseIfDone(slot, now)
				}
			}
			q.mu.Unlock()
		}
	}
}

// gather waits for the next batch of instance inst and returns its jobs
// (null jobs fill the empty slots of a direct batch), or nil when the
// scheduler stops.
func (q *sequencer) gather(inst int) []*job {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	maxRows := max(q.s.cfg.MaxBatchSize, 1)
	for {
		q.mu.Lock()
		now := time.Now()
		var ready []*seqSlot
		for _, slot := range q.slots[inst] {
			if len(slot.queue) > 0 {
				ready = append(ready, slot)
			}
		}
		var wait time.Duration
		if len(ready) > 0 {
			oldest := ready[0].queue[0].start
			for _, slot := range ready[1:] {
				if t := slot.queue[0].start; t.Before(oldest) {
					oldest = t
				}
			}
			wait = time.Until(oldest.Add(q.cfg.MaxQueueDelay))
			if wait <= 0 || q.full(len(ready), maxRows) {
				batch := q.take(ready, maxRows, now)
				q.mu.Unlock()
				return batch
			}
		}
		q.mu.Unlock()
		var tc <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-q.wake[inst]:
			if timer != nil && !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-tc:
		case <-q.s.stop:
			return nil
		}
	}
}

// full reports whether n ready sequences make a batch without waiting.
func (q *sequencer) full(n, maxRows int) bool {
	if q.cfg.Strategy == Direct {
		return float64(n) >= q.cfg.MinSlotUtilization*float64(len(q.slots[0])) || n >= len(q.slots[0])
	}
	return n >= maxRows || slices.Contains(q.cfg.PreferredBatchSizes, n)
}

// take pops one request from each chosen ready slot. Called with mu held.
func (q *sequencer) take(ready []*seqSlot, maxRows int, now time.Time) []*job {
	if q.cfg.Strategy == Oldest {
		slices.SortFunc(ready, func(a, b *seqSlot) int { return a.queue[0].start.Compare(b.queue[0].start) })
		if len(ready) > maxRows {
			ready = ready[:maxRows]
		}
		batch := make([]*job, 0, len(ready))
		for _, slot := range ready {
			batch = append(batch, q.pop(slot, now))
		}
		return batch
	}
	// Direct: row i is slot i, up to the highest slot with a request.
	high := ready[len(ready)-1].idx
	batch := make([]*job, high+1)
	for _, slot := range ready {
		batch[slot.idx] = q.pop(slot, now)
	}
	return batch
}

// drain answers every request still queued (at unload, after the workers
// stopped) with err.
func (q *sequencer) drain(answer func(*job)) {
	q.mu.Lock()
	var jobs []*job
	for _, row := range q.slots {
		for _, slot := range row {
			jobs = append(jobs, slot.queue...)
			slot.queue = nil
		}
	}
	for _, bl := range q.backlog {
		jobs = append(jobs, bl.queue...)
	}
	q.backlog = nil
	q.queued = 0
	q.mu.Unlock()
	for _, j := range jobs {
		answer(j)
	}
}

// workSequence is one instance's loop under the sequence batcher.
func (s *Scheduler) workSequence(inst backend.Instance, idx int, run *slot) {
	defer s.workers.Done()
	var reqs []*backend.Request
	for {
		batch := s.seq.gather(idx)
		if batch == nil {
			return
		}
		// A request whose client went away still counts for its
		// sequence's order; it leaves a READY-false row in a direct batch.
		var model *job
		now := time.Now()
		for i, j := range batch {
			// take, then dispatch: the job leaves its queue level's count.
			if j != nil && (!s.take(j) || !s.dispatch(j, now)) {
				batch[i] = nil
			}
			if batch[i] != nil && model == nil {
				model = batch[i]
			}
		}
		if model == nil {
			continue
		}
		if s.seq.cfg.Strategy == Oldest {
			batch = slices.DeleteFunc(batch, func(j *job) bool { return j == nil })
		}
		reqs = reqs[:0]
		for i, j := range batch {
			if j == nil {
				j = s.nullJob(model)
				batch[i] = j
				reqs = append(reqs, j.req)
				continue
			}
			r := *j.req
			r.Inputs = append(j.req.Inputs[:len(j.req.Inputs):len(j.req.Inputs)], s.controls(j.req.Sequence, true)...)
			if len(s.seq.cfg.States) > 0 {
				r.Inputs = append(r.Inputs, s.seq.stateInputs(j)...)
				r.Outputs = s.seq.stateOutputs(j.req.Outputs)
			}
			reqs = append(reqs, &r)
		}
		if !s.execute(inst, batch, reqs, len(batch), run, false) {
			return
		}
		clear(reqs)
	}
}

// nullJob is the READY-false filler of an empty direct slot: the inputs of
// like (zeroed) and control inputs saying not ready. It is never answered.
func (s *Scheduler) nullJob(like *job) *job {
	r := &backend.Request{}
	for _, in := range like.req.Inputs {
		n := int(in.NumElements())
		size := in.DataType.Size()
		if in.DataType == backend.Bytes {
			size = 4 // empty strings
		}
		r.Inputs = append(r.Inputs, backend.Tensor{Name: in.Name, DataType: in.DataType, Shape: in.Shape, Data: make([]byte, n*size)})
	}
	r.Inputs = append(r.Inputs, s.controls(backend.Sequence{}, false)...)
	for i := range s.seq.cfg.States {
		r.Inputs = append(r.Inputs, s.seq.initialState(i))
	}
	if like.sink != nil {
		r.Sender = discard{}
	}
	return &job{req: r, rows: 1, start: time.Now(), null: true}
}

// controls are the control input tensors of one request of a sequence.
func (s *Scheduler) controls(seq backend.Sequence, ready bool) []backend.Tensor {
	ctl := s.seq.cfg.Controls
	if len(ctl) == 0 {
		return nil
	}
	shape := []int64{1}
	if s.cfg.MaxBatchSize > 0 {
		shape = []int64{1, 1}
	}
	out := make([]backend.Tensor, 0, len(ctl))
	for _, c := range ctl {
		var data []byte
		switch c.Kind {
		case ControlStart:
			data = pick(c, seq.Start && ready)
		case ControlEnd:
			data = pick(c, seq.End && ready)
		case ControlReady:
			data = pick(c, ready)
		case ControlCorrID:
			if c.DataType == backend.Bytes {
				id := seq.String()
				if !seq.InSequence() {
					id = ""
				}
				data = backend.Uint32.AppendUint(nil, uint64(len(id)))
				data = append(data, id...)
			} else {
				data = c.DataType.AppendUint(nil, seq.ID)
			}
		}
		out = append(out, backend.Tensor{Name: c.Input, DataType: c.DataType, Shape: shape, Data: data})
	}
	return out
}

func pick(c Control, v bool) []byte {
	if v {
		return c.True
	}
	return c.False
}
