//go:build cgo && libtorch

package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// preModel is a python preprocessing step: it scales its input by 2.
const preModel = `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", (pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy() * 2).astype(np.float32))]) for r in requests]
`

const pipelineConfig = `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [10] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [5] }]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1 input_map { key: "INPUT" value: "IN" } output_map { key: "OUTPUT" value: "SCALED" } },
  { model_name: "simple_linear" model_version: -1 input_map { key: "INPUT__0" value: "SCALED" } output_map { key: "OUTPUT__0" value: "OUT" } }
] }
`

// writePytorchLinear writes the report's model, simple_linear, into the
// repository root as a pytorch_libtorch model (config lines extra added),
// its model.pt made by the report's make_model.py with python py; it
// returns model.pt's path.
func writePytorchLinear(t *testing.T, py, root, extra string) string {
	t.Helper()
	writeConfig(t, root, "simple_linear", `platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [10] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [5] }]
`+extra, "1")
	modelPT := filepath.Join(root, "simple_linear", "1", "model.pt")
	if out, err := exec.Command(py, "../../runtime/python/testdata/make_model.py", modelPT).CombinedOutput(); err != nil {
		t.Fatalf("make_model.py: %v %s", err, out)
	}
	return modelPT
}

// TestEnsemblePythonThenPyTorch runs the real program over an ensemble of
// a python preprocessing model and the report's pytorch model: over HTTP
// and gRPC the ensemble answers torch's own forward of the preprocessed
// rows, and each model's statistics count its requests (the ensemble's
// two, and the two its steps made of each composing model).
func TestEnsemblePythonThenPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	py := "/usr/bin/python3"
	testenv.NeedPython(t, py, "torch", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "pre", `backend: "python"
max_batch_size: 8
input [{ name: "INPUT" data_type: TYPE_FP32 dims: [10] }]
output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [10] }]
instance_group [{ kind: KIND_CPU count: 1 }]
`, "1")
	if err := os.WriteFile(filepath.Join(root, "pre", "1", "model.py"), []byte(preModel), 0o644); err != nil {
		t.Fatal(err)
	}
	modelPT := writePytorchLinear(t, py, root, "")
	writeConfig(t, root, "pipeline", pipelineConfig, "1")
	base, _, grpcAddr, logs := startPythonServer(t, true, "pipeline", "--model-repository", root)

	rows := [][]float32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0.5, -1, 2, -3, 4, -5, 6, -7, 8, -9}}
	scaled := make([][]float32, len(rows))
	var flat []float32
	for i, r := range rows {
		for _, v := range r {
			scaled[i] = append(scaled[i], 2*v)
		}
		flat = append(flat, r...)
	}
	want := torchForward(t, modelPT, scaled)
	check := func(proto string, got []float32) {
		t.Helper()
		if len(got) != 10 {
			t.Fatalf("%s: %d values, want 10", proto, len(got))
		}
		for i, w := range want {
			for j, v := range w {
				if math.Abs(float64(got[i*5+j])-v) > 1e-5 {
					t.Fatalf("%s: row %d = %v, want torch's %v\n%s", proto, i, got[i*5:i*5+5], w, logs.String())
				}
			}
		}
	}

	body, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": "IN", "datatype": "FP32", "shape": []int{2, 10}, "data": flat}}})
	resp, err := http.Post(base+"/v2/models/pipeline/infer", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Outputs []struct {
			Name  string    `json:"name"`
			Shape []int     `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Outputs) != 1 || out.Outputs[0].Name != "OUT" {
		t.Fatalf("HTTP: %d %s %v", resp.StatusCode, b, err)
	}
	check("HTTP", out.Outputs[0].Data)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var raw []byte
	for _, v := range flat {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gr, err := inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inference.ModelInferRequest{
		ModelName:        "pipeline",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{2, 10}}},
		RawInputContents: [][]byte{raw},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(gr.RawOutputContents) != 1 || len(gr.RawOutputContents[0]) != 40 {
		t.Fatalf("gRPC: unexpected response %v", gr)
	}
	var got []float32
	for i := 0; i < 10; i++ {
		got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(gr.RawOutputContents[0][4*i:])))
	}
	check("gRPC", got)

	// Each model counted two requests of two rows: the ensemble's own, and
	// the steps' requests to pre and simple_linear.
	for _, m := range []string{"pipeline", "pre", "simple_linear"} {
		resp, err := http.Get(base + "/v2/models/" + m + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st struct {
			ModelStats []struct {
				InferenceCount int `json:"inference_count"`
				InferenceStats struct {
					Success struct {
						Count int `json:"count"`
					} `json:"success"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		if err := json.Unmarshal(b, &st); err != nil || len(st.ModelStats) != 1 {
			t.Fatalf("%s stats: %s %v", m, b, err)
		}
		if s := st.ModelStats[0]; s.InferenceStats.Success.Count != 2 || s.InferenceCount != 4 {
			t.Errorf("%s: %d successes and inference_count %d, want 2 and 4 (two requests of two rows): %s", m, s.InferenceStats.Success.Count, s.InferenceCount, b)
		}
	}
}
