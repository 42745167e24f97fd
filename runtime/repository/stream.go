package repository

import (
	"context"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Decoupled reports whether the model uses the decoupled transaction
// policy: its requests are run with InferStream, and frontends that carry
// exactly one response per request refuse them.
func (m *Model) Decoupled() bool { return m.Scheduler.Config().Decoupled }

// InferStream is Infer for a model with the decoupled transaction policy:
// it validates req against mod and calls fn with each response as the
// model sends it, final set on the last (see scheduler.Scheduler.Stream).
// An error response reaches fn with Err set; fn's own error ends the
// request. The returned error is non-nil when the request was refused or
// did not run to its final response. Reloads retarget a request as Infer
// does, as long as it was not accepted yet.
func (m *Manager) InferStream(ctx context.Context, mod *Model, version int64, req *backend.Request, start time.Time, fn func(resp *backend.Response, final bool) error) (*Model, error) {
	for retargets := 0; ; retargets++ {
		if err := mod.Validate(req); err != nil {
			mod.Scheduler.RecordFailure(start)
			return mod, err
		}
		if req.Trace != nil {
			req.Trace.Activity("QUEUE_START", time.Now())
		}
		accepted := false
		cur := mod
		err := mod.Scheduler.Stream(ctx, mod.forBackend(req), func(resp *backend.Response, final bool) error {
			accepted = true
			if resp != nil && resp.Err == nil {
				err := cur.fromBackend(resp)
				if err == nil {
					err = cur.CheckResponse(resp)
				}
				if err != nil {
					resp = &backend.Response{Err: err}
				}
			}
			return fn(resp, final)
		})
		if err == nil || accepted {
			return mod, err
		}
		if retargets < maxRetargets && ctx.Err() == nil && mod.Scheduler.Closing() {
			if next, gerr := m.Get(mod.Name, version); gerr == nil && next != mod {
				mod = next
				continue
			}
		}
		return mod, err
	}
}
