// Package status maps the serving core's errors to protocol status codes in
// one place, so that the HTTP and gRPC frontends answer the same error with
// corresponding codes (Triton's mapping: not found 404, unavailable 503,
// unsupported 501, internal 500, everything else 400; 413 for a body over
// --http-max-input-size or a response over --max-response-size, 415 for
// an unsupported Content-Encoding, 403 for a restricted API). It also holds the status of health answers, so
// that no frontend writes a literal code.
package status

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Code classifies err. A *backend.Error anywhere in the chain decides;
// a cancelled or timed-out context counts as Unavailable; any other error is
// Internal, since frontends report request errors as *backend.Error.
func Code(err error) backend.Code {
	var be *backend.Error
	switch {
	case errors.As(err, &be):
		return be.Code
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return backend.Unavailable
	}
	return backend.Internal
}

// HTTPStatus is the HTTP status code for err.
func HTTPStatus(err error) int {
	switch Code(err) {
	case backend.NotFound:
		return http.StatusNotFound
	case backend.Unavailable:
		return http.StatusServiceUnavailable
	case backend.Unsupported:
		return http.StatusNotImplemented
	case backend.Internal:
		return http.StatusInternalServerError
	case backend.TooLarge:
		return http.StatusRequestEntityTooLarge
	case backend.UnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case backend.Forbidden:
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// HTTPHealth is the HTTP status of a health answer (server live, server
// ready, model ready): 200 when it holds, 400 when not, as Triton answers.
// Not being ready is a state rather than an error, so the answer has no
// body.
func HTTPHealth(ok bool) int {
	if ok {
		return http.StatusOK
	}
	return http.StatusBadRequest
}

// GRPCCode is the gRPC status code for err.
func GRPCCode(err error) codes.Code {
	// A call that ran out of its deadline answers DEADLINE_EXCEEDED, what
	// the client sees when its own timer fires first: the server's timer
	// (set from the grpc-timeout header) may fire first, and the client
	// then got UNAVAILABLE. A cancelled context stays UNAVAILABLE: that is
	// also the server shutting down, which clients retry.
	var be *backend.Error
	if !errors.As(err, &be) && errors.Is(err, context.DeadlineExceeded) {
		return codes.DeadlineExceeded
	}
	switch Code(err) {
	case backend.NotFound:
		return codes.NotFound
	case backend.Unavailable:
		return codes.Unavailable
	case backend.Unsupported:
		return codes.Unimplemented
	case backend.Internal:
		return codes.Internal
	case backend.AlreadyExists:
		return codes.AlreadyExists
	case backend.TooLarge:
		// What gRPC itself answers for a message over its size limit.
		return codes.ResourceExhausted
	case backend.UnsupportedMedia:
		return codes.Unimplemented
	case backend.Forbidden:
		// Triton answers a restricted protocol with UNAVAILABLE.
		return codes.Unavailable
	case backend.Unknown:
		return codes.Unknown
	case backend.Cancelled:
		return codes.Canceled
	}
	return codes.InvalidArgument
}

// absPath matches an absolute path token in a message: after the start, a
// space, a quote, a parenthesis or '=', up to the next space, quote,
// colon, comma or parenthesis.
var absPath = regexp.MustCompile(`(^|[\s'"(=\[])(/[^\s'"():,\]]+)`)

// Message is the text a client gets for err: its message with absolute
// server paths cut to their last element (".../model.pt"), so that errors
// from any layer reveal nothing of the server's file system. The log keeps
// the full error. Only paths whose first element exists in the server's
// root are cut, so that endpoint paths such as /v2/models stay.
func Message(err error) string { return Redact(err.Error()) }

// Redact cuts the absolute server paths in s, as Message does.
func Redact(s string) string {
	if !strings.Contains(s, "/") {
		return s
	}
	return absPath.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '/')
		lead, p := m[:i], m[i:]
		first, _, _ := strings.Cut(p[1:], "/")
		if first == "" {
			return m
		}
		if _, err := os.Lstat("/" + first); err != nil {
			return m
		}
		return lead + ".../" + filepath.Base(p)
	})
}
