//go:build !cgo || !libtorch

package torch

import (
	"context"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestStubRefusesToLoad(t *testing.T) {
	_, err := New(Options{}).NewInstance(context.Background(), rowSpec(0), 0)
	var be *backend.Error
	if !asBackendError(err, &be) || be.Code != backend.Unavailable || be.Msg == "" {
		t.Fatalf("error %#v, want Unavailable", err)
	}
	if want := NotBuiltMessage; len(be.Msg) < len(want) || be.Msg[len(be.Msg)-len(want):] != want {
		t.Fatalf("message %q does not end with %q", be.Msg, want)
	}
}
