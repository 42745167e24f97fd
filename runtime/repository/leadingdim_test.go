package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// A max_batch_size 0 model declaring dims [10] gets the report's [2,10]
// request through by default; with StrictInputShapes it is refused with
// Triton's message. Other shape errors are refused either way.
func TestLeadingDimensionOnUnbatchedModel(t *testing.T) {
	cfg := `backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 10 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 5 ] }]`
	req := func(shape ...int64) *backend.Request {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		return &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: shape, Data: make([]byte, 4*n)}}}
	}
	for _, strict := range []bool{false, true} {
		root := t.TempDir()
		writeModel(t, root, "m", cfg, []string{"1"}, "model.pt")
		m, err := New(Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": fake.New()}, StrictInputShapes: strict})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.LoadAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		mod := mustGet(t, m, "m")
		if err := mod.Validate(req(10)); err != nil {
			t.Errorf("strict=%v: [10] refused: %v", strict, err)
		}
		err = mod.Validate(req(2, 10))
		switch {
		case strict && (err == nil || !strings.Contains(err.Error(), "Expected [10], got [2,10]")):
			t.Errorf("strict: [2,10] got %v, want Triton's shape error", err)
		case !strict && err != nil:
			t.Errorf("default: [2,10] refused: %v", err)
		}
		for _, bad := range [][]int64{{2, 9}, {2, 2, 10}, {0, 10}} {
			if err := mod.Validate(req(bad...)); err == nil {
				t.Errorf("strict=%v: shape %v accepted", strict, bad)
			}
		}
		m.Close(context.Background())
	}
}
