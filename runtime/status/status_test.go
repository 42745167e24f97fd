package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestMapping(t *testing.T) {
	cases := []struct {
		err  error
		http int
		grpc codes.Code
	}{
		{backend.Errorf(backend.InvalidArg, "x"), 400, codes.InvalidArgument},
		{backend.Errorf(backend.NotFound, "x"), 404, codes.NotFound},
		{backend.Errorf(backend.Unavailable, "x"), 503, codes.Unavailable},
		{backend.Errorf(backend.Unsupported, "x"), 501, codes.Unimplemented},
		{backend.Errorf(backend.Internal, "x"), 500, codes.Internal},
		{backend.Errorf(backend.AlreadyExists, "x"), 400, codes.AlreadyExists},
		{backend.Errorf(backend.TooLarge, "x"), 413, codes.ResourceExhausted},
		{backend.Errorf(backend.UnsupportedMedia, "x"), 415, codes.Unimplemented},
		{backend.Errorf(backend.Forbidden, "x"), 403, codes.Unavailable},
		// Triton's HttpCodeFromError has no direct match for these: 400.
		{backend.Errorf(backend.Unknown, "x"), 400, codes.Unknown},
		{backend.Errorf(backend.Cancelled, "x"), 400, codes.Canceled},
		{fmt.Errorf("loading: %w", backend.Errorf(backend.NotFound, "x")), 404, codes.NotFound},
		// The outermost *backend.Error decides, whatever it wraps.
		{backend.Errorf(backend.Internal, "model failed: %w", context.Canceled), 500, codes.Internal},
		{backend.Errorf(backend.InvalidArg, "input: %w", backend.Errorf(backend.NotFound, "x")), 400, codes.InvalidArgument},
		{context.Canceled, 503, codes.Unavailable},
		// A deadline is DEADLINE_EXCEEDED over gRPC, whichever side's timer
		// fired first.
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), 503, codes.DeadlineExceeded},
		{errors.New("plain"), 500, codes.Internal},
	}
	for _, c := range cases {
		if got := HTTPStatus(c.err); got != c.http {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.http)
		}
		if got := GRPCCode(c.err); got != c.grpc {
			t.Errorf("GRPCCode(%v) = %v, want %v", c.err, got, c.grpc)
		}
	}
}

func TestHTTPHealth(t *testing.T) {
	if HTTPHealth(true) != 200 || HTTPHealth(false) != 400 {
		t.Errorf("HTTPHealth: %d when it holds, %d when not; want 200 and 400", HTTPHealth(true), HTTPHealth(false))
	}
}

// TestMessageCutsServerPaths is part of issue 17's case 10: errors that
// reach clients carry no absolute server path, whichever layer wrote them;
// endpoint paths stay.
func TestMessageCutsServerPaths(t *testing.T) {
	for in, want := range map[string]string{
		"model file: stat /tmp/repo/m/1/model.pt: no such file":       "model file: stat .../model.pt: no such file",
		`python stub with /usr/bin/python3 failed ("/etc/x" missing)`: `python stub with .../python3 failed (".../x" missing)`,
		"no such endpoint: POST /v2/nothing":                          "no such endpoint: POST /v2/nothing",
		"output 'OUT' already exists in request":                      "output 'OUT' already exists in request",
	} {
		if got := Message(errors.New(in)); got != want {
			t.Errorf("Message(%q) = %q, want %q", in, got, want)
		}
	}
}
