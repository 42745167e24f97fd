package grpcapi

import (
	"context"
	"sync"
	"time"

	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tritonbuild/tritonbuild/runtime/health"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// watchRefresh is how often an open Watch stream re-reads readiness: the
// health state has no change notification, and a probe that watches only
// needs to learn of a change within a probe period.
const watchRefresh = time.Second

// readinessHealth is the standard grpc.health.v1 service answering from the
// same readiness as ServerReady and /v2/health/ready (as Triton's gRPC
// health check does), so that a Kubernetes gRPC probe or a load balancer
// sees a server that is draining, or has a model that failed to load under
// strict readiness, as NOT_SERVING. grpc-go's server keeps the statuses and
// the Watch streams; this only refreshes them from the state before
// answering.
type readinessHealth struct {
	*grpchealth.Server
	state *health.State

	mu   sync.Mutex
	last healthpb.HealthCheckResponse_ServingStatus // last status set; UNKNOWN before the first
}

func newReadinessHealth(state *health.State) *readinessHealth {
	h := &readinessHealth{Server: grpchealth.NewServer(), state: state}
	h.refresh()
	return h
}

// refresh sets the overall and the inference service's status when the
// readiness changed. Only then: setting a status wakes every Watch stream
// of the service, and every open stream refreshes each watchRefresh, so
// setting it on each refresh would cost the streams' count squared per
// period, which any client opening Watch streams could drive up. After
// Shutdown the embedded server ignores it and everything stays
// NOT_SERVING.
func (h *readinessHealth) refresh() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.state.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if st == h.last {
		return
	}
	h.last = st
	h.SetServingStatus("", st)
	h.SetServingStatus(pb.GRPCInferenceService_ServiceDesc.ServiceName, st)
}

// Check answers from the readiness at the time of the call.
func (h *readinessHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.refresh()
	return h.Server.Check(ctx, req)
}

// Watch streams status changes, re-reading readiness every watchRefresh
// while the stream is open; the refresher ends with the stream.
func (h *readinessHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	h.refresh()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		t := time.NewTicker(watchRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.refresh()
			}
		}
	}()
	return h.Server.Watch(req, stream)
}
