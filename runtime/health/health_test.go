package health_test

import (
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// TestReadiness checks the decision itself against the table the frontends'
// tests also answer (runtime/httpapi, runtime/grpcapi).
func TestReadiness(t *testing.T) {
	for _, c := range frontendtest.Readiness() {
		t.Run(c.Name, func(t *testing.T) {
			_, hs := c.Setup(t)
			if hs.Live() != c.Live || hs.Ready() != c.Ready {
				t.Errorf("live %v, ready %v; want %v, %v", hs.Live(), hs.Ready(), c.Live, c.Ready)
			}
		})
	}
}
