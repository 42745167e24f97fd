package scheduler

import (
	"context"

	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/status"
)

// streamBuffer is how many responses of one request may wait for their
// client before the backend's Send blocks.
const streamBuffer = 16

// errFinished and errGone are what Send answers once a request is over.
var (
	errFinished = backend.Errorf(backend.InvalidArg, "the request already received its final response")
	errGone     = backend.Errorf(backend.Unavailable, "the request was cancelled: its client is gone")
)

type streamItem struct {
	resp  *backend.Response
	final bool
}

// stream is the backend.Sender of one request of a decoupled model. The
// backend's responses go through ch to the Stream call that waits for
// them; gone closes when that call returned (the client no longer reads),
// ended when the server finished the request itself (endErr says why).
type stream struct {
	s     *Scheduler
	start time.Time
	ch    chan streamItem
	gone  chan struct{}
	ended chan struct{}

	mu       sync.Mutex
	finished bool // the final response was sent or the request ended: accounted once
	failed   bool // an error response was sent
	endErr   error
	goneOnce sync.Once
}

// Send implements backend.Sender.
func (st *stream) Send(resp *backend.Response, final bool) error {
	if resp == nil && !final {
		return backend.Errorf(backend.InvalidArg, "a response that is not final must not be empty")
	}
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		if st.Cancelled() {
			return errGone
		}
		return errFinished
	}
	if resp != nil && resp.Err != nil {
		st.failed = true
	}
	if final {
		st.finished = true
	}
	failed := st.failed
	st.mu.Unlock()
	var err error
	select {
	case st.ch <- streamItem{resp: resp, final: final}:
	case <-st.gone:
		err = errGone
	}
	if final {
		if err != nil {
			// The client left while the final response waited for room:
			// leave found the request finished and counted nothing.
			st.s.stats.failed(Canceled, time.Since(st.start))
		}
		st.s.closeStream(st, failed, err != nil)
	}
	return err
}

// Cancelled implements backend.Sender.
func (st *stream) Cancelled() bool {
	select {
	case <-st.gone:
		return true
	case <-st.ended:
		return true
	default:
		return false
	}
}

// done reports whether the request is over: final response sent, ended
// by the server or left by its client.
func (st *stream) done() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.finished
}

// end finishes the request from the server's side (a failed execution, an
// unload, a client gone while queued) with err as its last response,
// counted as a failure for reason, unless the backend or its client
// already finished it (and it was counted then). It reports whether it
// ended the request.
func (st *stream) end(err error, reason FailureReason) bool {
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return false
	}
	st.finished = true
	st.endErr = err
	st.mu.Unlock()
	// Counted before the caller sees the end.
	st.s.stats.failed(reason, time.Since(st.start))
	close(st.ended)
	st.s.closeStream(st, false, true)
	return true
}

// leave marks the client gone: the request counts as cancelled unless it
// was finished, and pending and future Sends return errGone.
func (st *stream) leave() {
	st.goneOnce.Do(func() { close(st.gone) })
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return
	}
	st.finished = true
	st.mu.Unlock()
	st.s.stats.failed(Canceled, time.Since(st.start))
	st.s.closeStream(st, false, true)
}

// closeStream accounts for a finished request once: success or failure
// statistics (unless counted elsewhere: counted), no longer pending.
func (s *Scheduler) closeStream(st *stream, failed, counted bool) {
	if !counted {
		d := time.Since(st.start)
		if failed {
			s.stats.failed(Backend, d)
		} else {
			s.stats.success.add(d)
		}
	}
	s.openMu.Lock()
	delete(s.open, st)
	s.openMu.Unlock()
	s.unpend()
}

// Stream runs req on a model with the decoupled transaction policy and
// calls fn with each of its responses in the order the backend sent them,
// final set on the last; a response with Err set is an error response.
// fn runs on the caller's goroutine; an error from it ends the request
// (the backend's further Sends fail) and is returned. Stream returns when
// the final response was handed to fn, or with the context's error when
// ctx ends first. An error returned before fn was called means the
// request was not accepted (*backend.Error).
func (s *Scheduler) Stream(ctx context.Context, req *backend.Request, fn func(resp *backend.Response, final bool) error) error {
	start := time.Now()
	if !s.cfg.Decoupled {
		return backend.Errorf(backend.Unsupported, "model '%s' does not use the decoupled transaction policy", s.cfg.Name)
	}
	rows, err := s.rows(req)
	if err != nil {
		return err
	}
	st := &stream{s: s, start: start, ch: make(chan streamItem, streamBuffer), gone: make(chan struct{}), ended: make(chan struct{})}
	// The scheduler's copy carries the sender: the caller's request is
	// left as it is, so it may be sent again.
	own := *req
	own.Sender = st
	// The job is not pooled: the worker may still hold it after the
	// request was answered through the sender.
	j := &job{ctx: ctx, req: &own, rows: rows, start: start, sink: st}
	s.openMu.Lock()
	if s.open == nil {
		s.open = map[*stream]struct{}{}
	}
	s.open[st] = struct{}{}
	s.openMu.Unlock()
	if err := s.submit(ctx, j); err != nil {
		s.openMu.Lock()
		delete(s.open, st)
		s.openMu.Unlock()
		return err
	}
	defer st.leave()
	// A REJECT timeout ends the request when it ends, as Infer's does;
	// the worker that meets the expired job drops it.
	var timeout <-chan time.Time
	if !j.deadline.IsZero() && !s.levels[j.level].policy.Delay {
		t := time.NewTimer(time.Until(j.deadline))
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-timeout:
			timeout = nil
			if j.state.CompareAndSwap(jobWaiting, jobExpired) {
				s.leave(j) // its place in the queue is free now (drop)
				st.end(status.RequestTimeout.New(), Rejected)
			}
		case it := <-st.ch:
			if err := fn(it.resp, it.final); err != nil {
				return err
			}
			if it.final {
				return nil
			}
		case <-st.ended:
			if err := ctx.Err(); err != nil {
				// The client left: the worker that met the request ended
				// it for that (or raced an unload), and nobody reads fn.
				return err
			}
			// Responses the backend sent before the end go first.
			for {
				select {
				case it := <-st.ch:
					if err := fn(it.resp, it.final); err != nil || it.final {
						return err
					}
					continue
				default:
				}
				break
			}
			return fn(&backend.Response{Err: st.endErr}, true)
		case <-ctx.Done():
			// Still queued: its place goes to the next request now, as
			// Infer's does; st.leave (deferred) counts it cancelled, and
			// the worker that meets it drops it. Members of a sequence
			// are left to its batcher.
			if s.seq == nil && j.state.CompareAndSwap(jobWaiting, jobExpired) {
				s.leave(j)
			}
			return ctx.Err()
		}
	}
}

// endOpen finishes the requests whose backend never finished them, when
// the model unloads.
func (s *Scheduler) endOpen() {
	s.openMu.Lock()
	open := make([]*stream, 0, len(s.open))
	for st := range s.open {
		open = append(open, st)
	}
	s.openMu.Unlock()
	for _, st := range open {
		st.end(backend.Errorf(backend.Unavailable, "model '%s' version %d was unloaded before the request received its final response", s.cfg.Name, s.cfg.Version), Other)
	}
}

// discard is the sender of warmup requests of decoupled models.
type discard struct{}

func (discard) Send(*backend.Response, bool) error { return nil }
func (discard) Cancelled() bool                    { return false }
