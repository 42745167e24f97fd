// Package health decides whether the server is live and ready, in one place
// for both frontends (HTTP /v2/health/live and /v2/health/ready, gRPC
// ServerLive and ServerReady), the way Triton decides it: the server is
// live while it can answer, and ready while it is live and accepting
// requests; with strict readiness (--strict-readiness, true by default)
// every model must be ready too.
package health

import "sync/atomic"

// Models is what readiness asks of the model repository:
// repository.Manager.Ready, true when every model it knows has a READY
// version whose instances can all serve (models explicitly unloaded
// excepted).
type Models interface{ Ready() bool }

// State is the server's health, shared by the frontends. It is safe for
// concurrent use.
type State struct {
	models   Models
	strict   bool
	draining atomic.Bool
}

// New returns the health of a server over models; strict is
// --strict-readiness.
func New(models Models, strict bool) *State {
	return &State{models: models, strict: strict}
}

// Live reports whether the server is live. It is for as long as it answers,
// including while it drains on shutdown: Triton stays live while exiting so
// that orchestrators do not kill it before the requests in flight finish.
func (s *State) Live() bool { return true }

// Ready reports whether the server is live and accepting requests and, with
// strict readiness, every model is ready.
func (s *State) Ready() bool {
	return s.Live() && !s.draining.Load() && (!s.strict || s.models.Ready())
}

// Drain marks the server as shutting down: from now on it is not ready, so
// that load balancers stop sending it work, while it stays live.
func (s *State) Drain() { s.draining.Store(true) }
