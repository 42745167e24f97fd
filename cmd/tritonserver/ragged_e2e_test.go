package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// raggedConfig is the ragged-batching guide's model: a ragged INPUT with
// its accumulated element counts as INDEX, plus the max element count as a
// shape. The batcher waits (up to a minute) until three requests are queued.
const raggedConfig = `
backend: "python"
max_batch_size: 8
input [{ name: "INPUT" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [6] }]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_FP32 source_input: "INPUT" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAX" data_type: TYPE_INT32 source_input: "INPUT" }
]
dynamic_batching { preferred_batch_size: [3] max_queue_delay_microseconds: 60000000 }
instance_group [{ kind: KIND_CPU count: 1 }]
`

// raggedModel does what a model written for a ragged batch does: it
// concatenates the batch's INPUT elements and its INDEX pieces (each
// request carries its own), and reads each request's segment through
// INDEX. Each answer is [requests in the batch, the request's element
// count from INDEX, its INDEX value, elements in the batch, the first
// dimension of its MAX piece, the sum of its segment].
const raggedModel = `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        flat = np.concatenate([pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy().reshape(-1) for r in requests])
        index = np.concatenate([pb_utils.get_input_tensor_by_name(r, "INDEX").as_numpy() for r in requests])
        out = []
        for i, r in enumerate(requests):
            start = 0 if i == 0 else int(index[i - 1])
            end = int(index[i])
            most = pb_utils.get_input_tensor_by_name(r, "MAX").as_numpy().shape[0]
            row = [len(requests), end - start, end, flat.shape[0], most, float(flat[start:end].sum())]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([row], dtype=np.float32))]))
        return out
`

// TestPythonRaggedBatchWithBatchInputs: three requests of shapes [1,3],
// [1,4] and [1,5] to a model whose input allows ragged batches run as one
// batch, and the model receives Triton's batch inputs: INDEX pieces whose
// concatenation is the accumulated counts [3, 7, 12] (in arrival order),
// and a MAX piece of shape [5] for the first request and [0] for the
// others.
func TestPythonRaggedBatchWithBatchInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "ragged", raggedConfig, "1")
	if err := os.WriteFile(filepath.Join(root, "ragged", "1", "model.py"), []byte(raggedModel), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, _, _ := startPythonServer(t, false, "ragged", "--model-repository", root)

	sizes := []int{3, 4, 5}
	rows := make([][]float32, len(sizes))
	var wg sync.WaitGroup
	errs := make(chan error, len(sizes))
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := make([]string, n)
			for k := range data {
				data[k] = fmt.Sprint(10*n + k)
			}
			body := fmt.Sprintf(`{"inputs":[{"name":"INPUT","shape":[1,%d],"datatype":"FP32","data":[%s]}]}`, n, strings.Join(data, ","))
			resp, err := http.Post(base+"/v2/models/ragged/infer", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var out struct {
				Outputs []struct {
					Shape []int64   `json:"shape"`
					Data  []float32 `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 6 {
				errs <- fmt.Errorf("request of %d elements: %d %s %w", n, resp.StatusCode, b, err)
				return
			}
			rows[i] = out.Outputs[0].Data
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ends []float32
	firsts := 0
	for i, n := range sizes {
		r := rows[i]
		var sum float32
		for k := range n {
			sum += float32(10*n + k)
		}
		if r[0] != 3 || r[1] != float32(n) || r[3] != 12 || r[5] != sum {
			t.Errorf("request of %d elements: [batch, count, index, total, max, sum] = %v, want [3 %d _ 12 _ %v]", n, r, n, sum)
		}
		switch r[4] {
		case 5:
			firsts++
			if r[2] != float32(n) {
				t.Errorf("the batch's first request (%d elements) has INDEX %v", n, r[2])
			}
		case 0:
		default:
			t.Errorf("request of %d elements: MAX piece of shape [%v], want [5] or [0]", n, r[4])
		}
		ends = append(ends, r[2])
	}
	slices.Sort(ends)
	if firsts != 1 || ends[2] != 12 {
		t.Errorf("MAX given to %d requests, INDEX values %v (want one, ending in 12)", firsts, ends)
	}
}
