package fake

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestLinearInstance(t *testing.T) {
	spec := &backend.ModelSpec{
		Name: "m", MaxBatchSize: 4,
		Inputs:  []backend.TensorSpec{{Name: "X", DataType: backend.FP32, Dims: []int64{2}}},
		Outputs: []backend.TensorSpec{{Name: "Y", DataType: backend.FP32, Dims: []int64{3}}},
	}
	be := New()
	inst, err := be.NewInstance(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 2, -1, 0.5}
	data := make([]byte, 16)
	for i, v := range x {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	fail := make([]byte, 8)
	binary.LittleEndian.PutUint32(fail, math.Float32bits(FailValue))
	resps, err := inst.Execute(context.Background(), []*backend.Request{
		{Inputs: []backend.Tensor{{Name: "X", DataType: backend.FP32, Shape: []int64{2, 2}, Data: data}}},
		{Inputs: []backend.Tensor{{Name: "X", DataType: backend.FP32, Shape: []int64{1, 2}, Data: fail}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := resps[0].Outputs[0]
	if out.Name != "Y" || out.Shape[0] != 2 || out.Shape[1] != 3 {
		t.Fatalf("output %+v", out)
	}
	for r := 0; r < 2; r++ {
		for j := 0; j < 3; j++ {
			want := Bias(j) + x[2*r]*Weight(0, j) + x[2*r+1]*Weight(1, j)
			got := math.Float32frombits(binary.LittleEndian.Uint32(out.Data[4*(3*r+j):]))
			if got != want {
				t.Errorf("y[%d][%d] = %v, want %v", r, j, got, want)
			}
		}
	}
	if resps[1].Err == nil {
		t.Error("the request starting with FailValue must fail alone")
	}
	if b := be.Batches("m"); len(b) != 1 || b[0] != 3 {
		t.Errorf("batches %v, want [3]", b)
	}
}

func TestConfiguredFailures(t *testing.T) {
	spec := &backend.ModelSpec{Name: "m", Parameters: map[string]string{"fake_fail": "load"},
		Inputs:  []backend.TensorSpec{{Name: "X", DataType: backend.FP32, Dims: []int64{2}}},
		Outputs: []backend.TensorSpec{{Name: "Y", DataType: backend.FP32, Dims: []int64{3}}}}
	if _, err := New().NewInstance(context.Background(), spec, 0); err == nil {
		t.Error("fake_fail=load must fail NewInstance")
	}
	spec.Parameters = map[string]string{"fake_mode": "other"}
	if _, err := New().NewInstance(context.Background(), spec, 0); err == nil {
		t.Error("unknown fake_mode must fail")
	}
}
