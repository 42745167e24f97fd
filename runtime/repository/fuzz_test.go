package repository

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// FuzzLoadConfig loads arbitrary config.pbtxt text as a model with the fake
// backend: loading must succeed or fail with a reason, never panic or hang.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		linearCfg,
		linearCfg + "dynamic_batching { preferred_batch_size: [2, 8] default_queue_policy { max_queue_size: 2 } }",
		linearCfg + "instance_group [{ count: 3 }]\nversion_policy { all {} }",
		linearCfg + `model_warmup [{ batch_size: 2 inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] random_data: true } } }]`,
		linearCfg + "optimization { cuda { graphs: true } }",
		strings.Replace(linearCfg, "max_batch_size: 8", "max_batch_size: 2147483647", 1),
		`backend: "fake" input [{ name: "a" data_type: TYPE_STRING dims: [-1] }] output [{ name: "a" data_type: TYPE_STRING dims: [-1] }] parameters { key: "fake_mode" value { string_value: "identity" } }`,
		"name: \"m\"\ninput [{",
		ensembleCfg("TYPE_FP32", "TYPE_FP32", step("x", "IN", "A"), step("x", "A", "B"), step("x", "B", "OUT")),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cfg string) {
		root := t.TempDir()
		dir := filepath.Join(root, "m")
		for _, d := range []string{"1", "2", "warmup"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictModelConfig: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = m.Load(ctx, "m")
		idx := m.Index(false)
		if err != nil {
			found := false
			for _, e := range idx {
				found = found || (e.State == Unavailable && e.Reason != "")
			}
			if !found {
				t.Fatalf("load failed (%v) but the index shows no reason: %+v", err, idx)
			}
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
