// Package scheduler runs inference requests of one model version on its
// loaded instances: it owns the instances, a request queue, the dynamic
// batcher that groups queued requests into one Execute call, model warmup,
// and the per-model statistics (Triton's shape) that the statistics endpoint
// and the metrics exporter read.
//
// Each instance has one worker goroutine. A request goes straight to the
// most recently idle worker when one is waiting, and otherwise into a shared
// queue the workers drain, so no goroutine is started per request. Handing
// work to the most recently idle instance rather than the longest idle one
// keeps a lightly loaded model on one warm instance: its caches stay hot
// and, for the python backend, its stub is still polling rather than asleep.
//
// Under the dynamic batcher one batch gathers at a time, as under
// Triton's: while a worker waits to fill its batch, requests join it
// through the queue instead of starting another batch on an idle
// instance, and (with one priority level without a DELAY policy) the
// gathering worker is woken only when the queued rows let the batch close
// or its delay ends, not by every request.
//
// Instances that report their CPU (python stubs) may execute fewer at
// once than there are (concentrate.go): as many as their threads' waits
// for a core allow.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// Config describes how one model version is scheduled.
type Config struct {
	Name    string
	Version int64
	// MaxBatchSize is config.pbtxt's max_batch_size; 0 means the model does
	// not batch and every request is a batch of 1.
	MaxBatchSize int
	// Instances is the number of instances to create (at least 1).
	Instances int
	// Dynamic enables the dynamic batcher; nil runs each request alone.
	Dynamic *Dynamic
	// Warmup samples run on every instance before the scheduler is returned.
	Warmup []Warmup
	// EqualShapes names the inputs whose shapes (batch dimension aside)
	// must agree between the requests of one dynamic batch: as Triton's
	// dynamic batcher, a forming batch ends at a request whose shape of one
	// of them differs. Triton's set is every input with a variable
	// dimension that does not allow ragged batches (allow_ragged_batch).
	EqualShapes []string
	// Observer, when not nil, is told each successful request's durations
	// (the latency summaries of --metrics-config summary_latencies).
	Observer Observer
	// Decoupled is model_transaction_policy.decoupled: requests are run
	// with Stream, and the backend answers through Request.Sender.
	Decoupled bool
	// Sequence enables the sequence batcher (sequence.go) instead of the
	// dynamic batcher; nil for models without sequence_batching.
	Sequence *Sequence
	// Cache, when not nil, answers repeated requests without running the
	// model (response_cache with --cache-config; cache.go). It is shared
	// by every model that uses it; decoupled and sequence models get none.
	Cache *Cache
	// RateLimiter, when not nil (--rate-limit=execution_count), makes
	// instance i hold Limits[i]'s resources while it executes
	// (ratelimit.go); instances beyond Limits need none.
	RateLimiter *RateLimiter
	Limits      []InstanceLimit
}

// InstanceLimit is an instance group's rate_limiter.
type InstanceLimit struct {
	Resources []Resource
	Priority  uint32
}

// Observer receives the durations of one successful request: in the
// queue, preparing inputs, executing, producing outputs, and in total.
// It is called from the instance's worker and must not block.
type Observer interface {
	Observe(queue, computeInput, computeInfer, computeOutput, total time.Duration)
}

// Dynamic holds the dynamic batching settings.
type Dynamic struct {
	// PreferredBatchSizes end batch gathering early: a batch goes at once
	// at the largest of these sizes the queued requests reach.
	PreferredBatchSizes []int
	// MaxQueueDelay is how long the oldest request of a forming batch may
	// wait for more requests.
	MaxQueueDelay time.Duration
	// Levels are the priority levels (priority_levels; one when the
	// config has none), Levels[0] being priority 1, the highest, each with
	// its queue policy. Empty means one level without a policy.
	Levels []QueuePolicy
	// DefaultLevel is default_priority_level (1-based): the level of a
	// request without a valid priority.
	DefaultLevel int
}

// Warmup is one materialized warmup sample: a request run Count times (at
// least once) on every instance.
type Warmup struct {
	Name    string
	Count   int
	Request backend.Request
}

// queueChanCap is the most a level's queue channel holds, and what it
// holds when max_queue_size is 0; senders block (respecting their context)
// when it is full rather than failing.
const queueChanCap = 4096

type job struct {
	ctx   context.Context
	req   *backend.Request
	rows  int
	start time.Time
	resp  *backend.Response
	err   error
	done  chan struct{}
	// level is the job's priority level (index into Scheduler.levels);
	// deadline ends its wait under the level's timeout (zero: none);
	// delayed is set once a DELAY policy set it aside; state decides
	// between dispatch and expiry (queue.go).
	level    int
	deadline time.Time
	delayed  bool
	state    atomic.Int32
	// sink takes the responses of a request of a decoupled model; such
	// jobs are answered through it, never through done.
	sink *stream
	// null marks the filler of an empty slot of a direct sequence batch:
	// executed, never answered or counted.
	null bool
	// slot is the sequence slot the job was taken from and seqState the
	// sequence's implicit state then (sequence batcher).
	slot     *seqSlot
	seqState []backend.Tensor
}

// Scheduler queues and executes the requests of one model version.
// It is safe for concurrent use.
type Scheduler struct {
	cfg       Config
	preferred map[int]bool // preferred batch sizes; nil without dynamic batching
	// topRows is the size at which a dynamic batch closes at once: the
	// largest preferred batch size, max_batch_size without preferred
	// sizes. As under Triton, a batch does not grow past it, and a
	// request that would carry it past starts the next batch.
	topRows int
	// levels are the priority levels' queues (one without priorities);
	// wake, with several levels only, tells a waiting worker that a
	// level has work.
	levels       []level
	defaultLevel int
	wake         chan struct{}
	stop         chan struct{}
	workers      sync.WaitGroup
	instances    []backend.Instance
	execCtx      context.Context
	cancel       context.CancelFunc

	pending atomic.Int64  // accepted and not yet answered
	drained chan struct{} // unpend's wake-up for Close, when pending reaches 0
	queued  atomic.Int64  // accepted and not yet executing
	closed  atomic.Bool
	once    sync.Once

	jobs  sync.Pool
	stats stats

	// idle is a stack of the handoff channels of workers waiting for
	// work, the most recently idle last; handoffs has every worker's.
	idleMu   sync.Mutex
	idle     []chan *job
	handoffs []chan *job

	// lazy is set when a gathering worker is woken only by the requests
	// that let its batch close (see gatherPop): one priority level
	// without a DELAY policy, dynamic batching with a queue delay, and no
	// shapes that must agree. gathering[i] is then the rows of the batch
	// worker i waits to fill (0: none), gatherWake[i] wakes it, and
	// queuedRows counts the rows of the jobs in the level's queue.
	lazy       bool
	gathering  []atomic.Int64
	gatherWake []chan struct{}
	queuedRows atomic.Int64

	// running holds, per instance, the batch its worker is executing, so
	// that Close can answer it when the instance does not return.
	running []*slot
	// carried counts the slots whose carry another worker may take
	// (takeCarry): read before looking, so that a worker finding no work
	// pays one atomic load when nothing is carried.
	carried atomic.Int32

	// open are the requests of a decoupled model that were executed and
	// wait for their backend to finish them (see Stream).
	openMu sync.Mutex
	open   map[*stream]struct{}

	// seq routes requests under the sequence batcher; nil otherwise.
	seq *sequencer

	// conc decides how many instances execute at once when they report
	// their CPU (concentrate.go); nil otherwise.
	conc *concentrator

	// swept is set once Close answered what was queued (sweepMu
	// serialises the sweeps of Close and of late submits).
	sweepMu sync.Mutex
	swept   bool
}

// slot is one worker's executing batch. Once Close abandons it, the jobs
// belong to Close and the worker drops whatever its instance returns.
type slot struct {
	limit     *Ticket // the instance's place in the rate limiter; nil without one
	mu        sync.Mutex
	batch     []*job
	abandoned bool
	// carry is the queued request the worker keeps for its next batch
	// while it executes this one (it did not fit). A worker that frees up
	// first takes it (takeCarry); Close answers it with the batch when it
	// abandons the batch.
	carry *job
}

// HealthReporter is implemented by instances that can tell they cannot
// serve (a python stub that crashed and failed to restart, a forward stuck
// past its timeout). Healthy returns nil while the instance can serve.
type HealthReporter interface {
	Healthy() error
}

// New creates cfg.Instances instances of spec with be, runs the warmup
// samples on each, and starts serving. On error every instance created so far
// is closed again.
func New(ctx context.Context, be backend.Backend, spec *backend.ModelSpec, cfg Config) (*Scheduler, error) {
	if cfg.Instances < 1 {
		cfg.Instances = 1
	}
	if cfg.MaxBatchSize < 0 {
		return nil, fmt.Errorf("max_batch_size %d is negative", cfg.MaxBatchSize)
	}
	if cfg.Sequence != nil && cfg.Dynamic != nil {
		// Triton's scheduling_choice holds one of them; the queue
		// policies are the dynamic batcher's, and the sequence workers
		// would strand a request a DELAY policy set aside.
		return nil, fmt.Errorf("model '%s': dynamic_batching and sequence_batching are exclusive (one scheduling_choice); sequence batching has no queue policy", cfg.Name)
	}
	s := &Scheduler{cfg: cfg, stop: make(chan struct{}), drained: make(chan struct{}, 1)}
	s.jobs.New = func() any { return &job{done: make(chan struct{}, 1)} }
	var policies []QueuePolicy
	if cfg.Dynamic != nil {
		policies = cfg.Dynamic.Levels
		if len(policies) > 1 {
			s.defaultLevel = cfg.Dynamic.DefaultLevel - 1
			if s.defaultLevel < 0 || s.defaultLevel >= len(policies) {
				return nil, fmt.Errorf("default priority level %d is outside 1..%d", cfg.Dynamic.DefaultLevel, len(policies))
			}
			s.wake = make(chan struct{}, cfg.Instances)
		}
	}
	if len(policies) == 0 {
		policies = []QueuePolicy{{}}
	}
	s.levels = make([]level, len(policies))
	for i, p := range policies {
		// A bounded level admits no more than its bound (admit counts
		// first). Requests whose callers left stay in the channel, no
		// longer counted, until a worker meets them: room for as many
		// again keeps sends from blocking in all but a flood of those
		// (push then waits for room). The channel is allocated whole
		// here, so it never holds more than queueChanCap: a Triton config
		// with a bound in the millions (max_queue_size is a uint32) would
		// otherwise cost gigabytes at load, or fail it. Requests past the
		// channel's room wait in push, still counted against the bound.
		qcap := queueChanCap
		if m := p.MaxQueueSize; m > 0 && m < queueChanCap/2 {
			qcap = 2 * m
		}
		s.levels[i].policy = p
		s.levels[i].ch = make(chan *job, qcap)
	}
	if cfg.Dynamic != nil && cfg.MaxBatchSize > 0 {
		s.preferred = map[int]bool{}
		s.topRows = cfg.MaxBatchSize
		if len(cfg.Dynamic.PreferredBatchSizes) > 0 {
			s.topRows = slices.Max(cfg.Dynamic.PreferredBatchSizes)
		}
		for _, p := range cfg.Dynamic.PreferredBatchSizes {
			if p < 1 || p > cfg.MaxBatchSize {
				return nil, fmt.Errorf("preferred batch size %d is outside 1..max_batch_size %d", p, cfg.MaxBatchSize)
			}
			s.preferred[p] = true
		}
		if len(s.levels) == 1 && !s.levels[0].policy.Delay && cfg.Dynamic.MaxQueueDelay > 0 && len(cfg.EqualShapes) == 0 {
			// Idle workers then wait on wake, not on the queue, so that
			// a push reaches the gathering worker's batch (notify).
			s.lazy = true
			s.wake = make(chan struct{}, cfg.Instances)
			s.gathering = make([]atomic.Int64, cfg.Instances)
			s.gatherWake = make([]chan struct{}, cfg.Instances)
			for i := range s.gatherWake {
				s.gatherWake[i] = make(chan struct{}, 1)
			}
		}
	}
	s.stats.init(max(cfg.MaxBatchSize, 1))

	for i := 0; i < cfg.Instances; i++ {
		inst, err := be.NewInstance(ctx, spec, i)
		if err != nil {
			_ = closeInstances(spec.Name, s.instances)
			return nil, fmt.Errorf("creating instance %d of %s: %w", i, spec.Name, err)
		}
		s.instances = append(s.instances, inst)
		for _, w := range cfg.Warmup {
			if err := runWarmup(ctx, inst, &w, cfg.Decoupled); err != nil {
				_ = closeInstances(spec.Name, s.instances)
				return nil, fmt.Errorf("warmup %q on instance %d of %s: %w", w.Name, i, spec.Name, err)
			}
		}
	}
	// Executions run under a context of their own: a request's context only
	// decides whether the request is still wanted, not whether a batch that
	// also serves other requests may finish.
	s.execCtx, s.cancel = context.WithCancel(context.Background())
	tickets := make([]*Ticket, len(s.instances))
	if cfg.RateLimiter != nil {
		for i := range tickets {
			var lim InstanceLimit
			if i < len(cfg.Limits) {
				lim = cfg.Limits[i]
			}
			t, err := cfg.RateLimiter.Register(lim.Resources, lim.Priority)
			if err != nil {
				for _, t := range tickets[:i] {
					t.Unregister()
				}
				s.cancel()
				_ = closeInstances(spec.Name, s.instances)
				return nil, fmt.Errorf("instance %d of %s: %w", i, spec.Name, err)
			}
			tickets[i] = t
		}
	}
	if cfg.Sequence != nil {
		s.seq = newSequencer(s, cfg.Sequence, len(s.instances), cfg.MaxBatchSize, spec.Outputs)
		for i, inst := range s.instances {
			s.running = append(s.running, &slot{limit: tickets[i]})
			s.workers.Add(1)
			go s.workSequence(inst, i, s.running[i])
		}
		// An iterative sequence is one request, bounded by its client and
		// timeout, never idle while it lives.
		if cfg.Sequence.MaxIdle > 0 && !cfg.Sequence.Iterative {
			go s.seq.reap(s.stop)
		}
		return s, nil
	}
	if len(s.instances) > 1 && !cfg.Decoupled {
		s.conc = newConcentrator(s.instances, time.Now())
	}
	for i, inst := range s.instances {
		// Room for two: a worker that took a queued job while being popped
		// from the idle stack may be popped again before it drains the first.
		mine := make(chan *job, 2)
		s.handoffs = append(s.handoffs, mine)
		s.running = append(s.running, &slot{limit: tickets[i]})
		s.workers.Add(1)
		go s.work(inst, i, mine, s.running[i])
	}
	return s, nil
}

func runWarmup(ctx context.Context, inst backend.Instance, w *Warmup, decoupled bool) error {
	n := max(w.Count, 1)
	for i := 0; i < n; i++ {
		req := w.Request
		if decoupled {
			req.Sender = discard{}
		}
		resps, err := inst.Execute(ctx, []*backend.Request{&req})
		if err != nil {
			return err
		}
		if decoupled {
			continue // responses go to the sender; only Execute's error counts
		}
		if len(resps) != 1 {
			return fmt.Errorf("backend returned %d responses for 1 request", len(resps))
		}
		if resps[0].Err != nil {
			return resps[0].Err
		}
	}
	return nil
}

// Infer queues req and waits for its response. Frontends validate req
// against the model first (repository.Model.Validate); Infer itself only
// checks the batch dimension. The returned error is a
// *backend.Error (or the context's error) when the request was rejected or
// failed; otherwise the response's own Err is nil.
func (s *Scheduler) Infer(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	if s.cfg.Decoupled {
		return nil, backend.Errorf(backend.Unsupported, "model '%s' uses the decoupled transaction policy: its responses can only be streamed", s.cfg.Name)
	}
	if s.cfg.Cache != nil && s.seq == nil {
		return s.inferCached(ctx, req)
	}
	return s.infer(ctx, req)
}

// Caching reports whether the scheduler answers from a response cache.
func (s *Scheduler) Caching() bool { return s.cfg.Cache != nil && s.seq == nil && !s.cfg.Decoupled }

func (s *Scheduler) infer(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	start := time.Now()
	rows, err := s.rows(req)
	if err != nil {
		return nil, err
	}
	j := s.jobs.Get().(*job)
	j.ctx, j.req, j.rows, j.start = ctx, req, rows, start
	if err := s.submit(ctx, j); err != nil {
		s.release(j)
		return nil, err
	}
	// A REJECT timeout is answered when it ends, as Triton does, whether
	// or not an instance is free by then.
	var timeout <-chan time.Time
	if !j.deadline.IsZero() && !s.levels[j.level].policy.Delay {
		t := time.NewTimer(time.Until(j.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-j.done:
	case <-timeout:
		if j.state.CompareAndSwap(jobWaiting, jobExpired) {
			// The worker that meets the job drops it; it is not recycled.
			s.leave(j)
			s.stats.failed(Rejected, time.Since(start))
			return nil, status.RequestTimeout.New()
		}
		<-j.done // dispatched just in time: it runs
	case <-ctx.Done():
		// Still queued: the request is over now, and its place in the
		// queue goes to the next one (max_queue_size) instead of waiting
		// for a worker to meet it, which under load is after a whole
		// execution. Members of a sequence are left to its batcher.
		if s.seq == nil && j.state.CompareAndSwap(jobWaiting, jobExpired) {
			s.leave(j)
			s.stats.failed(Canceled, time.Since(start))
			return nil, ctx.Err()
		}
		// Otherwise a worker owns j and will answer into its buffered
		// channel; the job is simply not recycled.
		return nil, ctx.Err()
	}
	resp, err := j.resp, j.err
	s.release(j)
	return resp, err
}

// rows is the batch size req contributes.
func (s *Scheduler) rows(req *backend.Request) (int, error) {
	if s.cfg.MaxBatchSize == 0 {
		return 1, nil
	}
	if len(req.Inputs) == 0 || len(req.Inputs[0].Shape) == 0 {
		return 0, backend.Errorf(backend.InvalidArg, "request for batching model '%s' has no batch dimension", s.cfg.Name)
	}
	rows := int(req.Inputs[0].Shape[0])
	if rows < 1 || rows > s.cfg.MaxBatchSize {
		return 0, backend.Errorf(backend.InvalidArg, "inference request batch-size must be <= %d for '%s'", s.cfg.MaxBatchSize, s.cfg.Name)
	}
	return rows, nil
}

// submit accepts j (counted pending until it is answered) and hands it to
// an idle worker or queues it. On error j was not accepted.
func (s *Scheduler) submit(ctx context.Context, j *job) error {
	defer queued(ctx)
	s.pending.Add(1)
	if s.closed.Load() {
		s.unpend()
		return backend.Errorf(backend.Unavailable, "model '%s' version %d is unloading", s.cfg.Name, s.cfg.Version)
	}
	j.level = s.levelOf(j.req)
	if err := s.admit(j); err != nil {
		s.unpend()
		s.stats.failed(Rejected, time.Since(j.start))
		return err
	}
	s.queued.Add(1)
	if s.seq != nil {
		if err := s.seq.enqueue(j); err != nil {
			s.queued.Add(-1)
			s.leave(j)
			s.unpend()
			s.stats.failed(Rejected, time.Since(j.start))
			return err
		}
	} else if s.isGathering() || !s.handoff(j) {
		// While a batch gathers, a request joins it through the queue
		// rather than starting a second batch on an idle instance: one
		// batch forms at a time, as under Triton's dynamic batcher.
		if err := s.push(ctx, j); err != nil {
			s.queued.Add(-1)
			s.leave(j)
			s.unpend()
			// Accepted, then left or timed out while waiting for room in
			// the queue: a failure like a queued request's.
			reason := Rejected
			if ctx.Err() != nil {
				reason = Canceled
			}
			s.stats.failed(reason, time.Since(j.start))
			return err
		}
	}
	if s.closed.Load() {
		// An unload began meanwhile and may have swept the queues
		// already: j must not be left where no worker looks.
		s.sweepLate()
	}
	return nil
}

// handoff gives j to the most recently idle worker, if any is waiting.
func (s *Scheduler) handoff(j *job) bool {
	s.idleMu.Lock()
	n := len(s.idle)
	if n == 0 {
		s.idleMu.Unlock()
		return false
	}
	w := s.idle[n-1]
	s.idle[n-1] = nil
	s.idle = s.idle[:n-1]
	s.idleMu.Unlock()
	if s.lazy {
		// The worker gathers from now on, before it runs: a request
		// that comes meanwhile joins its batch instead of another
		// idle worker's. The worker ends the mark (endGather).
		for i, h := range s.handoffs {
			if h == w {
				s.gathering[i].Store(int64(j.rows))
			}
		}
	}
	select {
	case w <- j:
		return true
	default:
		// The worker still holds two earlier handoffs (see New); queue it.
		return false
	}
}

// next waits for a worker's next request: one handed to it, else a queued
// one. It returns nil when the scheduler stops.
func (s *Scheduler) next(mine chan *job) *job {
	select {
	case j := <-mine:
		return j
	default:
	}
	if s.conc != nil {
		if ok, j := s.conc.park(mine, s.stop); !ok || j != nil {
			return j
		}
	}
	// What is queued while a batch gathers is that batch's; the worker
	// that closes it wakes an idle one for what it leaves (work).
	if !s.isGathering() {
		// A request another worker carries came before anything queued.
		if j := s.takeCarry(); j != nil {
			return j
		}
		if j := s.tryPop(); j != nil {
			return j
		}
	}
	s.idleMu.Lock()
	s.idle = append(s.idle, mine)
	s.idleMu.Unlock()
	if s.wake == nil {
		select {
		case j := <-mine:
			// Whoever popped us sent it; we are off the stack.
			return j
		case j := <-s.levels[0].ch:
			// Queued by a request that found no idle worker while we were
			// registering. Leave the stack; if a handoff popped us
			// meanwhile, its job waits in mine for the next call.
			s.leaveIdle(mine)
			return j
		case <-s.stop:
			s.leaveIdle(mine)
			return nil
		}
	}
	for {
		select {
		case j := <-mine:
			return j
		case <-s.wake:
			if s.isGathering() {
				continue // what is queued joins the gathering batch
			}
			if j := s.tryPop(); j != nil {
				s.leaveIdle(mine)
				if !s.lazy && s.queued.Load() > 0 {
					s.signal() // more queued: wake another worker too
				}
				return j
			}
		case <-s.stop:
			s.leaveIdle(mine)
			return nil
		}
	}
}

// waitPop waits for a queued job until expire fires or the scheduler
// stops (nil then).
func (s *Scheduler) waitPop(expire <-chan time.Time) *job {
	if s.wake == nil {
		select {
		case j := <-s.levels[0].ch:
			return j
		case <-expire:
		case <-s.stop:
		}
		return nil
	}
	for {
		select {
		case <-s.wake:
			if j := s.tryPop(); j != nil {
				return j
			}
		case <-expire:
			return nil
		case <-s.stop:
			return nil
		}
	}
}

// gatherPop waits, in lazy mode, for a queued job for worker i's batch
// of rows rows: the worker is woken only when the queued rows let the
// batch close (notify), not by every request; when expire fires it takes
// what is queued, if anything, and when the scheduler stops it returns
// nil. The worker's batch stays announced in
// gathering[i] until it closes it (work).
func (s *Scheduler) gatherPop(i, rows int, expire <-chan time.Time) *job {
	s.gathering[i].Store(int64(rows))
	for {
		// Looked at after announcing the batch: a push before the
		// announcement is found here, one after it sees the batch.
		if j := s.tryPop(); j != nil {
			return j
		}
		select {
		case <-s.gatherWake[i]:
		case <-expire:
			// What was queued without letting the batch close is still
			// this batch's: the batch takes it as its delay ends
			// (the gather loop goes on taking while the queue has more).
			return s.tryPop()
		case <-s.stop:
			return nil
		}
	}
}

// endGather ends, in lazy mode, worker i's announcement of a gathering
// batch (gatherPop, handoff) once the batch is closed; what was queued
// after its last look, or did not fit, then starts the next batch on an
// idle worker.
func (s *Scheduler) endGather(i int) {
	if !s.lazy || s.gathering[i].Load() == 0 {
		return
	}
	s.gathering[i].Store(0)
	if s.queuedRows.Load() > 0 {
		s.signal()
	}
}

// handOn gives j, taken from the queue for a batch it did not fit, to
// an idle worker to start the next batch, as Triton's batcher starts the
// next batch at once for any free instance: in lazy mode requests join
// the gathering batch through the queue even while instances are idle,
// and kept by this worker, j would wait for its execution. It reports
// false, the job staying with this worker (where the first worker to
// free up takes it, takeCarry), when none is idle.
func (s *Scheduler) handOn(j *job) bool {
	s.queued.Add(1) // the worker it goes to takes it again (take)
	if s.handoff(j) {
		return true
	}
	s.queued.Add(-1)
	return false
}

// takeCarry takes a request another worker carries for its next batch
// while it executes (nil if none), counted queued again for the take the
// caller does, as handOn's.
func (s *Scheduler) takeCarry() *job {
	if s.carried.Load() <= 0 {
		return nil
	}
	for _, run := range s.running {
		run.mu.Lock()
		j := run.carry
		if j != nil {
			run.carry = nil
			s.carried.Add(-1)
		}
		run.mu.Unlock()
		if j != nil {
			s.queued.Add(1)
			return j
		}
	}
	return nil
}

// reclaim takes back the request run's worker left for its next batch
// while it executed; nil when another worker took it meanwhile.
func (s *Scheduler) reclaim(run *slot) *job {
	run.mu.Lock()
	defer run.mu.Unlock()
	j := run.carry
	if j != nil {
		run.carry = nil
		s.carried.Add(-1)
	}
	return j
}

// isGathering reports whether a worker waits, in lazy mode, to fill a
// batch.
func (s *Scheduler) isGathering() bool {
	for i := range s.gathering {
		if s.gathering[i].Load() > 0 {
			return true
		}
	}
	return false
}

// queuedAhead is how many rows are queued now: exact in lazy mode, else
// the queued requests (a row or more each).
func (s *Scheduler) queuedAhead() int {
	if s.lazy {
		return int(s.queuedRows.Load())
	}
	return int(s.queued.Load())
}

// late reports whether a batch whose oldest request has waited until
// deadline (its queue delay) is past it: Triton's batcher then sends what
// is queued, up to max_batch_size, instead of stopping at the largest
// preferred size, so that a model falling behind runs larger batches.
func (s *Scheduler) late(deadline time.Time) bool {
	return !time.Now().Before(deadline)
}

// nextPreferred is the smallest preferred batch size above rows, or
// topRows past the largest.
func (s *Scheduler) nextPreferred(rows int) int {
	next := s.topRows
	for p := range s.preferred {
		if p > rows && p < next {
			next = p
		}
	}
	return next
}

// notify wakes, after a push in lazy mode, each gathering worker whose
// batch the queued rows let close (a preferred size, or full), and an
// idle worker when no batch gathers.
func (s *Scheduler) notify() {
	q := s.queuedRows.Load()
	gathering := false
	for i := range s.gathering {
		g := s.gathering[i].Load()
		if g == 0 {
			continue
		}
		gathering = true
		if r := int(g + q); r >= s.topRows || s.preferred[r] {
			select {
			case s.gatherWake[i] <- struct{}{}:
			default: // already woken
			}
		}
	}
	if !gathering {
		s.signal()
	}
}

func (s *Scheduler) leaveIdle(mine chan *job) {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	for i, w := range s.idle {
		if w == mine {
			s.idle = append(s.idle[:i], s.idle[i+1:]...)
			return
		}
	}
}

func (s *Scheduler) release(j *job) {
	*j = job{done: j.done}
	s.jobs.Put(j)
}

// RecordFailure counts a request for this model that failed before it could
// be queued (for example failed validation in a frontend), as Triton counts
// such requests in its failure statistics.
func (s *Scheduler) RecordFailure(start time.Time) { s.stats.failed(Other, time.Since(start)) }

// Closing reports whether Close was called: the scheduler accepts no more
// requests, so a caller may send a refused request to a replacement.
func (s *Scheduler) Closing() bool { return s.closed.Load() }

// Queued is the number of accepted requests waiting for an instance.
func (s *Scheduler) Queued() int { return int(s.queued.Load()) }

// Config returns the configuration the scheduler runs with.
func (s *Scheduler) Config() Config { return s.cfg }

// unpend counts an accepted request answered. The last one while the
// scheduler closes wakes Close's drain, which otherwise sleeps: an unload
// may wait out --exit-timeout-secs for slow requests.
func (s *Scheduler) unpend() {
	if s.pending.Add(-1) == 0 && s.closed.Load() {
		select {
		case s.drained <- struct{}{}:
		default: // a wake-up is already due; Close checks the count again
		}
	}
}

// finish answers j, a request that is not decoupled's (fail answers
// those), with resp or err.
func (s *Scheduler) finish(j *job, resp *backend.Response, err error) {
	if s.seq != nil {
		s.seq.endIterative(j) // before the job goes back to its caller
	}
	j.resp, j.err = resp, err
	s.unpend()
	j.done <- struct{}{}
}

// fail answers j with err and counts it failed for reason, once: a
// request of a decoupled model that its backend finished or its client
// left was counted then, and is neither answered nor counted again.
func (s *Scheduler) fail(j *job, reason FailureReason, err error) {
	if j.null {
		return
	}
	if j.sink != nil {
		if s.seq != nil {
			s.seq.endIterative(j)
		}
		j.sink.end(err, reason)
		return
	}
	// Counted before the answer: the caller may read the statistics as
	// soon as it has it.
	s.stats.failed(reason, time.Since(j.start))
	s.finish(j, nil, err)
}

// work is one instance's loop: take the oldest request, gather more while
// the dynamic batcher allows, execute, answer.
func (s *Scheduler) work(inst backend.Instance, i int, mine chan *job, run *slot) {
	defer s.workers.Done()
	maxRows := max(s.cfg.MaxBatchSize, 1)
	batch := make([]*job, 0, min(maxRows, 64))
	reqs := make([]*backend.Request, 0, min(maxRows, 64))
	var carry *job // taken (and accounted) from the queue but did not fit the previous batch
	var timer *time.Timer
	for {
		first := carry
		carry = nil
		if first == nil {
			if first = s.next(mine); first == nil {
				return
			}
			if !s.take(first) {
				s.endGather(i)
				continue
			}
		}
		batch = append(batch[:0], first)
		rows := first.rows
		var deadline time.Time
		if s.preferred != nil {
			deadline = first.start.Add(s.cfg.Dynamic.MaxQueueDelay)
		}
		if s.preferred != nil && (rows < s.topRows || rows < maxRows && s.late(deadline)) {
		gather:
			for rows < s.topRows || rows < maxRows && s.late(deadline) {
				if s.preferred[rows] && rows+s.queuedAhead() < s.nextPreferred(rows) && time.Until(deadline) > 0 {
					// As Triton's batcher does, the largest preferred size
					// the queue reaches goes at once: the requests queued
					// beyond it, too few for the next size, wait for a
					// batch of their own rather than hold this one.
					break gather
				}
				j := s.tryPop()
				if j == nil {
					// Queue empty: a preferred size or an expired delay ends
					// the batch, otherwise wait for more until the deadline.
					wait := time.Until(deadline)
					if s.preferred[rows] || wait <= 0 {
						break gather
					}
					if timer == nil {
						timer = time.NewTimer(wait)
					} else {
						timer.Reset(wait)
					}
					if s.lazy {
						j = s.gatherPop(i, rows, timer.C)
					} else {
						j = s.waitPop(timer.C)
					}
					timer.Stop()
					if j == nil {
						break gather
					}
				}
				if !s.take(j) {
					continue
				}
				if rows+j.rows > s.topRows && (rows+j.rows > maxRows || !s.late(deadline)) || !s.sameShapes(first.req, j.req) {
					carry = j
					break gather
				}
				batch = append(batch, j)
				rows += j.rows
			}
		}
		s.endGather(i)
		held := false
		if run.limit != nil && s.preferred != nil && carry == nil {
			batch, rows, carry, held = s.awaitResources(i, run.limit, batch, rows)
		}
		if carry != nil && s.handOn(carry) {
			carry = nil
		}
		// Claim the batch: a request whose timeout ended while the batch
		// formed was answered and leaves it.
		now := time.Now()
		kept := batch[:0]
		for _, j := range batch {
			// Read first: a job dispatch answers goes back to its
			// caller, which recycles it.
			r := j.rows
			if s.dispatch(j, now) {
				kept = append(kept, j)
			} else {
				rows -= r
			}
		}
		clear(batch[len(kept):])
		batch = kept
		if len(batch) == 0 {
			continue
		}
		reqs = reqs[:0]
		for _, j := range batch {
			reqs = append(reqs, j.req)
		}
		if carry != nil {
			// Left where a worker that frees up before this one takes it:
			// under Triton the request stays queued for any instance.
			run.mu.Lock()
			s.carried.Add(1)
			run.carry = carry
			run.mu.Unlock()
		}
		if !s.execute(inst, batch, reqs, rows, run, held) {
			return // Close gave up on this instance and answered the batch and carry
		}
		if carry != nil {
			carry = s.reclaim(run) // nil when another worker took it
		}
		clear(batch)
		clear(reqs)
	}
}

// awaitResources takes the rate limiter resources of a closed batch (by
// ticket t of worker i) and, while it waits for them, lets the batch grow
// as Triton's dynamic batcher grows a payload that waits in its rate
// limiter: once granted, the batch takes what was queued meanwhile, up to
// the largest preferred batch size (max_batch_size without preferred
// sizes). Without that, a model whose instances outnumber the resources
// (four python stubs sharing two cores' worth) executes the small batches
// its idle instances closed, each waiting its turn, while the requests
// behind them queue. It returns the batch, its rows, a job taken that did
// not fit (for the next batch) and whether t holds the resources; false
// means the model unloaded first, and execute answers the batch. Outside
// lazy mode nothing keeps an idle worker from taking queued requests for
// a batch of its own, so the batch grows by what they leave.
func (s *Scheduler) awaitResources(i int, t *Ticket, batch []*job, rows int) ([]*job, int, *job, bool) {
	if t.tryAcquire() {
		return batch, rows, nil, true
	}
	if s.lazy {
		// Announced as gathering, the batch is where requests go while it
		// waits: they queue for it instead of starting another batch on
		// an idle instance, which would only wait for resources too.
		s.gathering[i].Store(int64(rows))
	}
	defer s.endGather(i)
	if !t.acquire(s.execCtx) {
		return batch, rows, nil, false
	}
	for rows < s.topRows {
		j := s.tryPop()
		if j == nil {
			break
		}
		if !s.take(j) {
			continue
		}
		if rows+j.rows > s.topRows || !s.sameShapes(batch[0].req, j.req) {
			return batch, rows, j, true
		}
		batch = append(batch, j)
		rows += j.rows
	}
	return batch, rows, nil, true
}

// sameShapes reports whether b may join a batch that a started: their
// inputs named by Config.EqualShapes have equal shapes past the batch
// dimension (and are present in both or in neither).
func (s *Scheduler) sameShapes(a, b *backend.Request) bool {
	skip := 0
	if s.cfg.MaxBatchSize > 0 {
		skip = 1
	}
	for _, name := range s.cfg.EqualShapes {
		x, y := a.Input(name), b.Input(name)
		if (x == nil) != (y == nil) {
			return false
		}
		if x != nil && (len(x.Shape) < skip || len(y.Shape) < skip || !slices.Equal(x.Shape[skip:], y.Shape[skip:])) {
			return false
		}
	}
	return true
}

// take accounts for a job leaving the queue and reports whether it should
// run; a job whose caller has gone away is answered and dropped here.
func (s *Scheduler) take(j *job) bool {
	s.queued.Add(-1)
	if j.state.Load() == jobExpired {
		s.drop(j) // its timeout answered it
		return false
	}
	if err := j.ctx.Err(); err != nil {
		if !j.state.CompareAndSwap(jobWaiting, jobExpired) {
			s.drop(j)
			return false
		}
		s.leave(j)
		s.fail(j, Canceled, err)
		return false
	}
	return !s.expired(j)
}

// execute runs one batch and answers its jobs. It returns false when Close
// abandoned the batch meanwhile (the jobs were answered there).
func (s *Scheduler) execute(inst backend.Instance, batch []*job, reqs []*backend.Request, rows int, run *slot, held bool) bool {
	if run.limit != nil && !held {
		// The wait for resources is queue time, as on Triton. Close ends
		// it (execCtx) only once it gave up draining.
		if !run.limit.acquire(s.execCtx) {
			err := backend.Errorf(backend.Unavailable, "model '%s' version %d was unloaded while this request waited for rate limiter resources", s.cfg.Name, s.cfg.Version)
			for _, j := range batch {
				s.fail(j, Other, err)
			}
			return true
		}
	}
	if run.limit != nil {
		defer run.limit.release()
	}
	t0 := time.Now()
	for _, j := range batch {
		if !j.null {
			s.stats.queue.add(t0.Sub(j.start))
		}
	}
	for i, j := range batch {
		if j.ctx != nil && !j.null {
			reqs[i].Ctx = j.ctx
		}
	}
	run.mu.Lock()
	run.batch = batch
	run.mu.Unlock()
	var along int32
	if s.conc != nil {
		along = s.conc.executing.Add(1)
	}
	t1 := time.Now()
	resps, err := inst.Execute(s.execCtx, reqs)
	t2 := time.Now()
	if s.conc != nil {
		s.conc.executing.Add(-1)
		s.conc.observe(t2.Sub(t1), along, s.queued.Load() > 0, t2)
	}
	run.mu.Lock()
	abandoned := run.abandoned
	run.batch = nil
	run.mu.Unlock()
	if abandoned {
		return false
	}
	if err == nil && len(resps) != len(reqs) && !s.cfg.Decoupled {
		err = backend.Errorf(backend.Internal, "backend returned %d responses for %d requests of model '%s'", len(resps), len(reqs), s.cfg.Name)
	}
	if err != nil {
		var be *backend.Error
		reason := Backend
		switch {
		case s.execCtx.Err() != nil && errors.Is(err, context.Canceled):
			// Close cut the execution short at the drain deadline: that is
			// the answer, not the backend's "context canceled".
			reason = Other
			err = backend.Errorf(backend.Unavailable, "model '%s' version %d was unloaded while this request was executing", s.cfg.Name, s.cfg.Version)
		case !errors.As(err, &be):
			err = backend.Errorf(backend.Internal, "model '%s' failed: %w", s.cfg.Name, err)
		}
		for _, j := range batch {
			s.fail(j, reason, err)
		}
		return true
	}
	in, infer := t1.Sub(t0), t2.Sub(t1)
	s.stats.executed(rows, len(batch), in, infer, t2)
	for i, j := range batch {
		if j.null {
			continue
		}
		if tr := j.req.Trace; tr != nil {
			// Before finish: afterwards the job belongs to its caller.
			tr.Activity("COMPUTE_START", t0)
			tr.Activity("COMPUTE_INPUT_END", t1)
			tr.Activity("COMPUTE_OUTPUT_START", t2)
			tr.Activity("COMPUTE_END", time.Now())
		}
		if i < len(resps) && resps[i] != nil && resps[i].Reschedule {
			if s.reschedule(j) {
				continue
			}
			resps[i] = &backend.Response{Err: backend.Errorf(backend.Internal, "model '%s' released request %d for rescheduling, which needs sequence_batching { iterative_sequence: true }", s.cfg.Name, i)}
		}
		if j.sink != nil {
			// Decoupled: the backend answers through the sender; a response
			// returned here is the request's last. The request is released
			// either way, which ends an iterative sequence.
			if i < len(resps) && resps[i] != nil {
				_ = j.sink.Send(resps[i], true)
			}
			if s.seq != nil {
				s.seq.endIterative(j)
			}
			continue
		}
		r := resps[i]
		if r == nil {
			r = &backend.Response{Err: backend.Errorf(backend.Internal, "backend returned no response for request %d of model '%s'", i, s.cfg.Name)}
		}
		if s.seq != nil && len(s.seq.cfg.States) > 0 {
			r = s.seq.keepState(j, r)
		}
		end := time.Now()
		if r.Err != nil {
			s.stats.failed(Backend, end.Sub(j.start))
		} else {
			s.stats.success.add(end.Sub(j.start))
			if o := s.cfg.Observer; o != nil {
				o.Observe(t0.Sub(j.start), in, infer, end.Sub(t2), end.Sub(j.start))
			}
		}
		s.finish(j, r, nil)
	}
	s.stats.output(rows, len(batch), time.Since(t2))
	return true
}

// reschedule puts j back into the sequence batcher's queue for another
// execute (Response.Reschedule), as Triton's iterative sequences do. It
// reports false when the model has no iterative sequences. A request whose
// model is unloading is answered instead; one whose client went away or
// whose timeout ended is answered when it is next taken (take), so no
// request is executed again without bound once nobody waits for it.
func (s *Scheduler) reschedule(j *job) bool {
	if s.seq == nil || !s.seq.cfg.Iterative || j.slot == nil {
		return false
	}
	if j.sink != nil && j.sink.done() {
		// Its final response was sent or its client left (accounted
		// there): nothing waits for another iteration.
		s.seq.endIterative(j)
		return true
	}
	if s.closed.Load() {
		s.fail(j, Other, backend.Errorf(backend.Unavailable, "model '%s' version %d was unloaded while this request was being rescheduled", s.cfg.Name, s.cfg.Version))
		return true
	}
	// Back in the queue: counted as waiting again, as when it was
	// accepted, so that take and dispatch count it out once more.
	s.levels[j.level].waiting.Add(1)
	s.queued.Add(1)
	j.state.CompareAndSwap(jobDispatched, jobWaiting)
	s.seq.requeue(j)
	return true
}

// closeGrace is how long Close still waits, after ctx ended, for workers
// to return from a cancelled execution and for instances to close.
const closeGrace = 250 * time.Millisecond

// Close stops accepting requests, waits until the accepted ones are answered
// (or ctx ends), stops the workers and closes the instances. When ctx ends
// first, it returns within closeGrace whatever the instances do: requests
// still executing are answered with an Unavailable error (their instance
// is left as it is, since it cannot be freed while it runs), queued ones
// too, and instances that do not close in time are left to the process.
func (s *Scheduler) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
	drain:
		for s.pending.Load() > 0 {
			select {
			case <-ctx.Done():
				err = fmt.Errorf("unloading %s: %d requests still pending: %w", s.cfg.Name, s.pending.Load(), ctx.Err())
				break drain
			case <-s.drained:
			}
		}
		s.cancel()
		close(s.stop)
		stuck := s.waitWorkers(ctx)
		// Requests still queued or handed off after a timed-out drain get
		// an answer; so do those queued later (sweepLate).
		s.sweepMu.Lock()
		s.sweep()
		s.swept = true
		s.sweepMu.Unlock()
		s.endOpen()
		for _, run := range s.running {
			if run.limit != nil {
				run.limit.Unregister()
			}
		}
		err = errors.Join(err, s.closeInstancesWithin(ctx, stuck))
	})
	return err
}

// queuedKey is the context key of WithQueued's function.
type queuedKey struct{}

// WithQueued returns ctx carrying fn, which the scheduler calls once a
// request under ctx holds its place in its model's queue (or was refused
// one), before it waits for its response: a caller that runs several
// requests at once, each on its own goroutine, can hold the next one back
// until then, so that they queue in the order they came. A gRPC stream
// needs that for sequences (Triton queues a stream's requests as it reads
// them). fn may be called more than once (an ensemble's steps queue under
// the same context) and must not block.
func WithQueued(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, queuedKey{}, fn)
}

// queued calls ctx's WithQueued function, if it has one.
func queued(ctx context.Context) {
	if fn, ok := ctx.Value(queuedKey{}).(func()); ok {
		fn()
	}
}

// unloaded answers a request that an unload leaves unexecuted, unless its
// timeout or its caller's leaving answered it first.
func (s *Scheduler) unloaded(j *job) {
	if !j.state.CompareAndSwap(jobWaiting, jobExpired) {
		s.drop(j)
		return
	}
	s.leave(j)
	s.fail(j, Other, backend.Errorf(backend.Unavailable, "model '%s' was unloaded", s.cfg.Name))
}

// sweep answers every request still queued or handed off once the
// workers stopped. Called with sweepMu held.
func (s *Scheduler) sweep() {
	unloaded := func(j *job) {
		s.queued.Add(-1)
		s.unloaded(j)
	}
	if s.seq != nil {
		s.seq.drain(unloaded)
	}
	chans := slices.Clone(s.handoffs)
	for i := range s.levels {
		chans = append(chans, s.levels[i].ch)
		for j := s.levels[i].popDelayed(); j != nil; j = s.levels[i].popDelayed() {
			unloaded(j)
		}
	}
	for _, ch := range chans {
		for {
			select {
			case j := <-ch:
				unloaded(j)
				continue
			default:
			}
			break
		}
	}
}

// sweepLate answers, after an unload swept the queues, a request that was
// accepted before the unload began but queued only after the sweep
// (nothing reads the queues any more). A submit that queued a request
// while closing calls it: either Close's sweep, which it waits for, met
// the request, or this one does.
func (s *Scheduler) sweepLate() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.swept {
		s.sweep()
	}
}

// waitWorkers waits for the workers to stop, until ctx ends and closeGrace
// more. It then abandons the batches still executing, answering their
// requests, and returns which instances never came back.
func (s *Scheduler) waitWorkers(ctx context.Context) []bool {
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	stuck := make([]bool, len(s.running))
	select {
	case <-done:
		return stuck
	case <-ctx.Done():
	}
	select {
	case <-done:
		return stuck
	case <-time.After(closeGrace):
	}
	for i, run := range s.running {
		run.mu.Lock()
		batch := run.batch
		var carry *job
		if batch != nil {
			run.abandoned = true
			run.batch = nil
			carry, run.carry = run.carry, nil
			if carry != nil {
				s.carried.Add(-1)
			}
			stuck[i] = true
		}
		run.mu.Unlock()
		for _, j := range batch {
			s.fail(j, Other, backend.Errorf(backend.Unavailable,
				"model '%s' version %d was unloaded while this request was executing on instance %d, which did not return in time", s.cfg.Name, s.cfg.Version, i))
		}
		if carry != nil {
			// Taken from the queue (take counted it out) for the worker's
			// next batch, which never comes: answered as a queued one.
			s.unloaded(carry)
		}
	}
	return stuck
}

// closeInstancesWithin closes the instances that are not stuck, waiting
// until ctx ends (and closeGrace more) for them.
func (s *Scheduler) closeInstancesWithin(ctx context.Context, stuck []bool) error {
	closing := slices.Clone(s.instances)
	for i := range closing {
		if i < len(stuck) && stuck[i] {
			closing[i] = nil // still executing: freeing it now would pull memory from under it
		}
	}
	done := make(chan error, 1)
	go func() { done <- closeInstances(s.cfg.Name, closing) }()
	var left error
	for i, st := range stuck {
		if st {
			left = errors.Join(left, fmt.Errorf("instance %d of %s did not return from its execution; it is left running", i, s.cfg.Name))
		}
	}
	select {
	case err := <-done:
		return errors.Join(left, err)
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return errors.Join(left, err)
	case <-time.After(closeGrace):
		return errors.Join(left, fmt.Errorf("closing the instances of %s: not done at the unload deadline; left to finish in the background", s.cfg.Name))
	}
}

// Healthy returns nil when every instance can serve, else the first
// instance's reason (see HealthReporter).
func (s *Scheduler) Healthy() error {
	if s.closed.Load() {
		return nil // unloading: the repository reports that state
	}
	for i, inst := range s.instances {
		if h, ok := inst.(HealthReporter); ok {
			if err := h.Healthy(); err != nil {
				return fmt.Errorf("instance %d: %w", i, err)
			}
		}
	}
	return nil
}

// closeInstances closes every non-nil instance of insts.
func closeInstances(model string, insts []backend.Instance) error {
	var errs []error
	for i, inst := range insts {
		if inst == nil {
			continue
		}
		if err := inst.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing instance %d of %s: %w", i, model, err))
		}
	}
	return errors.Join(errs...)
}
