package repository

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// plainBackend hides the fake backend's decoupled support, as the
// pytorch backend has none.
type plainBackend struct{ backend.Backend }

const repeatCfg = `
backend: "fake"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
parameters { key: "fake_mode" value { string_value: "repeat" } }
`

func TestDecoupledLoadsOnlyOnBackendsThatSupportIt(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "repeat", repeatCfg, []string{"1"})
	writeModel(t, root, "plain", strings.Replace(repeatCfg, `backend: "fake"`, `backend: "plain"`, 1), []string{"1"})
	m, err := New(Options{Repositories: []string{root}, StrictModelConfig: true,
		Backends: map[string]backend.Backend{"fake": fake.New(), "plain": plainBackend{fake.New()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	_ = m.LoadAll(context.Background())
	mod, err := m.Get("repeat", -1)
	if err != nil || !mod.Decoupled() {
		t.Fatalf("decoupled model on the fake backend: %v", err)
	}
	if _, reason, _ := m.Versions("plain"); !strings.Contains(reason, "backend 'plain' does not support models with decoupled transaction policy") {
		t.Errorf("decoupled model on a backend without support: reason %q", reason)
	}
	// InferStream validates first: a wrong input fails before it runs.
	_, err = m.InferStream(context.Background(), mod, -1, &backend.Request{}, time.Now(), func(*backend.Response, bool) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "expected 1 inputs") {
		t.Errorf("InferStream of an invalid request: %v", err)
	}
}
