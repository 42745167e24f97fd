package python

import (
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// TestTritonErrorCodes: each pb_utils.TritonError code reaches the
// frontends as its own class (UNKNOWN and CANCELLED used to arrive as
// INTERNAL); no code means TritonError's default, INTERNAL.
func TestTritonErrorCodes(t *testing.T) {
	want := map[int]backend.Code{
		0: backend.Unknown, 1: backend.Internal, 2: backend.NotFound, 3: backend.InvalidArg,
		4: backend.Unavailable, 5: backend.Unsupported, 6: backend.AlreadyExists, 7: backend.Cancelled,
	}
	for code, w := range want {
		if got := tritonErrorCode(&code); got != w {
			t.Errorf("code %d: %v, want %v", code, got, w)
		}
	}
	if got := tritonErrorCode(nil); got != backend.Internal {
		t.Errorf("no code: %v, want Internal", got)
	}
}
