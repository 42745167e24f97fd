// Package access holds Triton's endpoint restrictions
// (--http-restricted-api, --grpc-restricted-protocol): the API categories
// of the HTTP and gRPC protocols, and for each restricted category the
// request header (key and value) a client must send to use it. A
// deployment keeps, say, the model-repository API (load and unload, which
// can make the server run a model's code) to operators this way, while
// inference stays open.
package access

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Category is a group of endpoints, with Triton's names.
type Category string

// The categories Triton recognizes.
const (
	Health          Category = "health"
	Metadata        Category = "metadata"
	Inference       Category = "inference"
	SharedMemory    Category = "shared-memory"
	ModelConfig     Category = "model-config"
	ModelRepository Category = "model-repository"
	Statistics      Category = "statistics"
	Trace           Category = "trace"
	Logging         Category = "logging"
)

// Categories lists every category, in Triton's documentation order.
var Categories = []Category{Health, Metadata, Inference, SharedMemory, ModelConfig, ModelRepository, Statistics, Trace, Logging}

// Header is the request header a restricted category requires.
type Header struct{ Key, Value string }

// Rules maps restricted categories to their header; a category not in it
// is open. The zero value restricts nothing.
type Rules map[Category]Header

// Add parses one flag value, "<category>[,<category>...]:<key>=<value>",
// into r. A category may be in one group only, as with Triton.
func (r Rules) Add(flag, value string) error {
	cats, kv, ok := strings.Cut(value, ":")
	key, val, ok2 := strings.Cut(kv, "=")
	if !ok || !ok2 || cats == "" || strings.TrimSpace(key) == "" {
		return fmt.Errorf("--%s=%q: want <api>[,<api>...]:<key>=<value>", flag, value)
	}
	for _, c := range strings.Split(cats, ",") {
		cat := Category(strings.TrimSpace(c))
		if !slices.Contains(Categories, cat) {
			return fmt.Errorf("--%s=%q: unknown API %q (known: %s)", flag, value, c, joinCategories())
		}
		if _, dup := r[cat]; dup {
			return fmt.Errorf("--%s=%q: API %q is already in another restricted group", flag, value, cat)
		}
		r[cat] = Header{Key: strings.TrimSpace(key), Value: val}
	}
	return nil
}

func joinCategories() string {
	s := make([]string, len(Categories))
	for i, c := range Categories {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// Check returns nil when category c is open or get(key) carries its value,
// else a backend.Forbidden error with Triton's text: what says "API" (HTTP)
// or "protocol" (gRPC), and prefix is prepended to the key the client must
// send ("triton-grpc-protocol-" for gRPC metadata, "" for HTTP headers).
func (r Rules) Check(c Category, what, prefix string, get func(key string) []string) error {
	h, restricted := r[c]
	if !restricted {
		return nil
	}
	if slices.Contains(get(prefix+h.Key), h.Value) {
		return nil
	}
	return backend.Errorf(backend.Forbidden, "This %s is restricted, expecting header '%s%s'", what, prefix, h.Key)
}
