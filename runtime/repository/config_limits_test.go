package repository

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// manyParameters is linearCfg with n parameters, as config.pbtxt text and
// as the load API's JSON override.
func manyParameters(n int) (pbtxt, override string) {
	var t, j strings.Builder
	t.WriteString(linearCfg)
	j.WriteString(`{"backend":"fake","max_batch_size":8,"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}],"output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3]}],"parameters":{`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&t, "parameters { key: \"p%06d\" value { string_value: \"v\" } }\n", n-i)
		if i > 0 {
			j.WriteByte(',')
		}
		fmt.Fprintf(&j, `"p%06d":{"string_value":"v"}`, n-i)
	}
	j.WriteString("}}")
	return t.String(), j.String()
}

// TestManyParametersLoadInLinearTime is issue 17's case 4: rendering a
// config's parameters sorted them by insertion sort (10k entries 5.2 s,
// 40k 123 s, so 100k about 13 minutes). A config of 100k parameters, in
// reverse order, loads from config.pbtxt and through an override in
// seconds; the bound leaves a busy machine a factor of ten.
func TestManyParametersLoadInLinearTime(t *testing.T) {
	pbtxt, override := manyParameters(100_000)
	root := t.TempDir()
	writeModel(t, root, "m", pbtxt, []string{"1"})
	mgr := newManager(t, fake.New(), true, root)
	start := time.Now()
	if err := mgr.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	if err := mgr.LoadModel(context.Background(), "m", []byte(override)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("two loads of a 100k-parameter config took %s", d)
	}
	mod := mustGet(t, mgr, "m")
	if len(mod.Spec.Parameters) != 100_000 || !strings.Contains(string(mod.ConfigJSON), `"p000001":{"string_value":"v"},"p000002"`) {
		t.Errorf("parameters not all there, or not sorted in the rendered config")
	}
}

// TestConfigSizeBounded: config.pbtxt and the override are refused over
// --max-config-size, saying so, and the serving version stays.
func TestConfigSizeBounded(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", linearCfg, []string{"1"})
	pbtxt, override := manyParameters(100)
	writeModel(t, root, "big", pbtxt, []string{"1"})
	m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, MaxConfigSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.Load(context.Background(), "big"); err == nil || !strings.Contains(err.Error(), "config.pbtxt is larger than the maximum of 2048 bytes (--max-config-size)") {
		t.Errorf("oversized config.pbtxt: %v", err)
	}
	if err := m.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	err = m.LoadModel(context.Background(), "m", []byte(override))
	want := fmt.Sprintf("is %d bytes, more than the maximum of 2048 bytes (--max-config-size)", len(override))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("oversized override: %v", err)
	}
	if _, err := m.Get("m", -1); err != nil {
		t.Errorf("the serving version went after a refused override: %v", err)
	}
}
