package scheduler

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Duration is a count of events and their cumulative duration, Triton's
// {count, ns} pair.
type Duration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// BatchStats are the compute durations of executions of one batch size.
type BatchStats struct {
	BatchSize     int      `json:"batch_size"`
	ComputeInput  Duration `json:"compute_input"`
	ComputeInfer  Duration `json:"compute_infer"`
	ComputeOutput Duration `json:"compute_output"`
}

// Stats is a snapshot of a model version's statistics. Request-level
// durations (Success, Fail, Queue, Compute*) count requests; a batch of n
// requests adds its compute time n times, as Triton does. Batches count
// executions per batch size (rows summed over the batch's requests).
type Stats struct {
	LastInference  int64 // Unix milliseconds of the last execution, 0 if none
	InferenceCount uint64
	ExecutionCount uint64
	Success        Duration
	Fail           Duration
	Queue          Duration
	ComputeInput   Duration
	ComputeInfer   Duration
	ComputeOutput  Duration
	// CacheHit and CacheMiss count the requests answered from the
	// response cache (with their lookup time) and those that were not
	// (with their lookup and insertion time).
	CacheHit, CacheMiss Duration
	Batches             []BatchStats // only sizes that ran, ascending
	// Failures counts the failed requests (Fail.Count) by reason,
	// indexed by FailureReason.
	Failures [numReasons]uint64
}

// FailureReason classifies failed requests as Triton's `reason` label on
// nv_inference_request_failure does.
type FailureReason int

// Reasons, in the order of FailureReasonNames.
const (
	Rejected FailureReason = iota // refused by the queue (full, timed out)
	Canceled                      // the client went away before it ran
	Backend                       // the model failed it
	Other                         // everything else: validation, unloads
	numReasons
)

// FailureReasonNames are the label values of the reasons.
var FailureReasonNames = [numReasons]string{"REJECTED", "CANCELED", "BACKEND", "OTHER"}

type counter struct{ count, ns atomic.Uint64 }

func (c *counter) add(d time.Duration) { c.addN(1, d) }

func (c *counter) addN(n uint64, d time.Duration) {
	c.count.Add(n)
	c.ns.Add(n * uint64(max(d, 0)))
}

func (c *counter) load() Duration { return Duration{Count: c.count.Load(), Ns: c.ns.Load()} }

type batchCounters struct{ input, infer, output counter }

// denseBatchSizes bounds the per-batch-size counter array; larger batch
// sizes (rare, and only with a large max_batch_size) go to a locked map.
const denseBatchSizes = 1024

type stats struct {
	last                             atomic.Int64
	inferences, executions           atomic.Uint64
	success, fail, queue             counter
	reasons                          [numReasons]atomic.Uint64
	computeIn, computeInfer, compOut counter
	cacheHit, cacheMiss              counter
	batch                            []batchCounters // index = batch size
	bigMu                            sync.Mutex
	big                              map[int]*batchCounters
}

func (s *stats) init(maxRows int) {
	s.batch = make([]batchCounters, min(maxRows, denseBatchSizes)+1)
	s.big = map[int]*batchCounters{}
}

func (s *stats) forSize(rows int) *batchCounters {
	if rows < len(s.batch) {
		return &s.batch[rows]
	}
	s.bigMu.Lock()
	defer s.bigMu.Unlock()
	b := s.big[rows]
	if b == nil {
		b = &batchCounters{}
		s.big[rows] = b
	}
	return b
}

// failed counts a failed request that took d, for reason.
func (s *stats) failed(reason FailureReason, d time.Duration) {
	s.fail.add(d)
	s.reasons[reason].Add(1)
}

func (s *stats) executed(rows, reqs int, in, infer time.Duration, end time.Time) {
	s.last.Store(end.UnixMilli())
	s.inferences.Add(uint64(rows))
	s.executions.Add(1)
	s.computeIn.addN(uint64(reqs), in)
	s.computeInfer.addN(uint64(reqs), infer)
	b := s.forSize(rows)
	b.input.add(in)
	b.infer.add(infer)
}

func (s *stats) output(rows, reqs int, out time.Duration) {
	s.compOut.addN(uint64(reqs), out)
	s.forSize(rows).output.add(out)
}

// Stats returns a snapshot of the statistics. Counters are read one by one,
// so a snapshot taken under load may be off by the requests in flight.
func (s *Scheduler) Stats() Stats {
	st := &s.stats
	out := Stats{
		LastInference:  st.last.Load(),
		InferenceCount: st.inferences.Load(),
		ExecutionCount: st.executions.Load(),
		Success:        st.success.load(),
		Fail:           st.fail.load(),
		Queue:          st.queue.load(),
		ComputeInput:   st.computeIn.load(),
		ComputeInfer:   st.computeInfer.load(),
		ComputeOutput:  st.compOut.load(),
		CacheHit:       st.cacheHit.load(),
		CacheMiss:      st.cacheMiss.load(),
	}
	for i := range st.reasons {
		out.Failures[i] = st.reasons[i].Load()
	}
	add := func(size int, b *batchCounters) {
		if b.infer.count.Load() == 0 {
			return
		}
		out.Batches = append(out.Batches, BatchStats{
			BatchSize: size, ComputeInput: b.input.load(), ComputeInfer: b.infer.load(), ComputeOutput: b.output.load(),
		})
	}
	for size := range st.batch {
		add(size, &st.batch[size])
	}
	st.bigMu.Lock()
	sizes := make([]int, 0, len(st.big))
	for size := range st.big {
		sizes = append(sizes, size)
	}
	slices.Sort(sizes)
	for _, size := range sizes {
		add(size, st.big[size])
	}
	st.bigMu.Unlock()
	return out
}
