package repository

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestSizeErrorsStateTheNumbers is part of issue 17's case 10: a [1,10]
// FP32 input without data was answered "expected 4 bytes". The expected
// size is the whole shape's (in Triton's words since issue 20), and a
// shape whose size overflows says so.
func TestSizeErrorsStateTheNumbers(t *testing.T) {
	cfg := `backend: "fake"
max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }]
parameters { key: "fake_mode" value { string_value: "identity" } }`
	root := t.TempDir()
	writeModel(t, root, "m", cfg, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	mod := mustGet(t, m, "m")
	for _, c := range []struct {
		shape []int64
		data  int
		want  string
	}{
		{[]int64{1, 10}, 0, "input byte size mismatch for input 'INPUT__0' for model 'm'. Expected 40, got 0"},
		{[]int64{2, 3}, 4, "input byte size mismatch for input 'INPUT__0' for model 'm'. Expected 24, got 4"},
		{[]int64{1, math.MaxInt64 / 2}, 8, "causes total element count to exceed maximum size of"},
	} {
		req := &backend.Request{Inputs: []backend.Tensor{{Name: "INPUT__0", DataType: backend.FP32, Shape: c.shape, Data: make([]byte, c.data)}}}
		if err := mod.Validate(req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shape %v with %d bytes: %v, want %q", c.shape, c.data, err, c.want)
		}
	}
}
