package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// QueuePolicy is Triton's ModelQueuePolicy for one priority level of the
// dynamic batcher.
type QueuePolicy struct {
	// MaxQueueSize bounds the requests of the level waiting to be
	// executed, those the batcher is gathering included (Triton counts
	// them in its queue); more are refused with Triton's "Exceeds maximum
	// queue size". 0 means no bound.
	MaxQueueSize int
	// Timeout is default_timeout_microseconds: how long a request may wait
	// before TimeoutAction applies; 0 means no timeout.
	Timeout time.Duration
	// Delay is timeout_action DELAY: a request past its timeout waits
	// behind the others of its level instead of being refused (REJECT,
	// Triton's "Request timeout expired", answered when the timeout ends).
	Delay bool
	// AllowOverride is allow_timeout_override: a request's own timeout
	// parameter applies when it is shorter than Timeout.
	AllowOverride bool
}

// job states: waiting until a worker dispatches it, or expired by its
// timeout, or by its caller leaving, first. Whoever moves it out of
// waiting owns its answer and takes it off its level's count.
const (
	jobWaiting int32 = iota
	jobDispatched
	jobExpired
)

// level is one priority level's queue.
type level struct {
	policy  QueuePolicy
	ch      chan *job
	waiting atomic.Int64 // accepted and not yet dispatched (or dropped)

	delayedMu sync.Mutex
	delayed   []*job // past their timeout under a DELAY policy
}

// levelOf is the level a request goes to: its priority (1 is the highest)
// when the model has priority levels and the priority is one of them, else
// the default level, as Triton's InferenceRequest::SetPriority decides.
func (s *Scheduler) levelOf(req *backend.Request) int {
	if len(s.levels) == 1 {
		return 0
	}
	if p := req.Priority; p >= 1 && p <= uint64(len(s.levels)) {
		return int(p - 1)
	}
	return s.defaultLevel
}

// deadline is when j's timeout ends (zero: none): the level's timeout, or
// the request's own when the policy allows overriding and it is shorter.
func deadline(p *QueuePolicy, j *job) time.Time {
	t := p.Timeout
	if p.AllowOverride && j.req.Timeout > 0 && j.req.Timeout < t {
		t = j.req.Timeout
	}
	if t <= 0 {
		return time.Time{}
	}
	return j.start.Add(t)
}

// admit counts j into its level, refusing it when the level is full.
func (s *Scheduler) admit(j *job) error {
	lv := &s.levels[j.level]
	n := lv.waiting.Add(1)
	if m := lv.policy.MaxQueueSize; m > 0 && n > int64(m) {
		lv.waiting.Add(-1)
		return status.QueueFull.New(status.RequestPrefix(j.req.ID))
	}
	j.deadline = deadline(&lv.policy, j)
	return nil
}

// leave uncounts j from its level: it was dispatched or dropped.
func (s *Scheduler) leave(j *job) { s.levels[j.level].waiting.Add(-1) }

// push queues j on its level. With several levels it wakes a waiting
// worker, which scans the levels in priority order.
func (s *Scheduler) push(ctx context.Context, j *job) error {
	ch := s.levels[j.level].ch
	select {
	case ch <- j:
	default:
		// Full: wait for room as long as the caller does. Tried first
		// without the context, since a select over both channels locks
		// both, and the submitters of a busy model contend for the queue's.
		// A REJECT timeout ends the wait too: the request is answered
		// when its timeout ends, queued or waiting to be.
		var timeout <-chan time.Time
		if !j.deadline.IsZero() && !s.levels[j.level].policy.Delay {
			t := time.NewTimer(time.Until(j.deadline))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case ch <- j:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return status.RequestTimeout.New()
		}
	}
	if s.lazy {
		s.queuedRows.Add(int64(j.rows))
		s.notify()
		return nil
	}
	s.signal()
	return nil
}

// signal tells one waiting worker of the levels that there is work.
func (s *Scheduler) signal() {
	if s.wake == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// tryPop takes the next queued job without waiting: levels in priority
// order, each one's delayed jobs after its own queue (Triton serves a
// level's delayed requests after its others).
func (s *Scheduler) tryPop() *job {
	for i := range s.levels {
		lv := &s.levels[i]
		select {
		case j := <-lv.ch:
			if s.lazy {
				s.queuedRows.Add(-int64(j.rows))
			}
			return j
		default:
		}
		if !lv.policy.Delay {
			continue // only DELAY policies set jobs aside: no lock to take
		}
		if j := lv.popDelayed(); j != nil {
			return j
		}
	}
	return nil
}

func (lv *level) popDelayed() *job {
	lv.delayedMu.Lock()
	defer lv.delayedMu.Unlock()
	if len(lv.delayed) == 0 {
		return nil
	}
	j := lv.delayed[0]
	lv.delayed[0] = nil
	lv.delayed = lv.delayed[1:]
	return j
}

// expired applies the timeout of a job leaving the queue. It reports
// whether the job must not run now: refused (REJECT: answered here, unless
// its caller's timer answered it already) or set aside (DELAY, run after
// the others of its level).
func (s *Scheduler) expired(j *job) bool {
	if j.state.Load() == jobExpired {
		s.drop(j)
		return true
	}
	if j.deadline.IsZero() || j.delayed {
		return false // no clock reading for a job without a timeout
	}
	now := time.Now()
	if now.Before(j.deadline) {
		return false
	}
	lv := &s.levels[j.level]
	if lv.policy.Delay {
		j.delayed = true
		lv.delayedMu.Lock()
		lv.delayed = append(lv.delayed, j)
		lv.delayedMu.Unlock()
		s.queued.Add(1) // back in a queue
		return true
	}
	if j.state.CompareAndSwap(jobWaiting, jobExpired) {
		s.leave(j)
		s.fail(j, Rejected, status.RequestTimeout.New())
		return true
	}
	s.drop(j)
	return true
}

// drop disposes of a job its caller already answered (its timeout ended,
// or its context while it was queued). The caller took it off its level's
// count then (leave), so that its max_queue_size place went to the next
// request at once rather than when a worker met the job.
func (s *Scheduler) drop(j *job) {
	if s.seq != nil {
		s.seq.endIterative(j)
	}
	if j.sink == nil {
		s.unpend() // a decoupled request's stream counted it out when it ended
	}
}

// dispatch claims j for execution at now; false means it does not run:
// its timeout (REJECT) ended while its batch formed, and it was answered
// here or by its caller's timer.
func (s *Scheduler) dispatch(j *job, now time.Time) bool {
	if !j.deadline.IsZero() && !j.delayed && !s.levels[j.level].policy.Delay && !now.Before(j.deadline) {
		if j.state.CompareAndSwap(jobWaiting, jobExpired) {
			s.leave(j)
			s.fail(j, Rejected, status.RequestTimeout.New())
			return false
		}
	}
	if j.state.CompareAndSwap(jobWaiting, jobDispatched) {
		s.leave(j)
		return true
	}
	s.drop(j)
	return false
}
