package python

import (
	"encoding/binary"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// TestBF16ThroughDLPack: a BF16 input reaches model.py, which reads it as
// a torch bfloat16 tensor through to_dlpack (as_numpy refuses it, as in
// Triton) and answers a BF16 output made with Tensor.from_dlpack; the
// bits arrive unchanged both ways.
func TestBF16ThroughDLPack(t *testing.T) {
	requireTorch(t)
	b, _ := newTestBackend(t, Options{})
	spec := probeSpec(t, 8)
	spec.Inputs = []backend.TensorSpec{{Name: "X", DataType: backend.BF16, Dims: []int64{-1}}}
	spec.Outputs = []backend.TensorSpec{{Name: "Y", DataType: backend.BF16, Dims: []int64{-1}}}
	writeFile(t, spec.VersionDir+"/model.py", `import torch
from torch.utils import dlpack
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X")
            try:
                x.as_numpy()
                raise RuntimeError("as_numpy accepted a BF16 tensor")
            except pb_utils.TritonModelException:
                pass
            v = dlpack.from_dlpack(x.to_dlpack())
            assert v.dtype == torch.bfloat16, v.dtype
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("Y", dlpack.to_dlpack(v * 2))]))
        return out
`)
	inst := load(t, b, spec, 0)
	in := []uint16{0x3FC0, 0xC000, 0x0000} // 1.5, -2, 0
	data := make([]byte, 0, 2*len(in))
	for _, v := range in {
		data = binary.LittleEndian.AppendUint16(data, v)
	}
	req := &backend.Request{Inputs: []backend.Tensor{{Name: "X", DataType: backend.BF16, Shape: []int64{3}, Data: data}}}
	y := output(t, execute(t, inst, req)[0], "Y")
	want := []uint16{0x4040, 0xC080, 0x0000} // 3, -4, 0
	if y.DataType != backend.BF16 || len(y.Data) != 2*len(want) {
		t.Fatalf("Y: %s %d bytes", y.DataType, len(y.Data))
	}
	for i, w := range want {
		if g := binary.LittleEndian.Uint16(y.Data[2*i:]); g != w {
			t.Errorf("Y[%d] = %#04x, want %#04x", i, g, w)
		}
	}
}
