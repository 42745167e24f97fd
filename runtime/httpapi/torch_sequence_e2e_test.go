//go:build cgo && libtorch

package httpapi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
)

// accumulatorScript writes a TorchScript module that keeps nothing: the
// sequence batcher feeds it the START control and the implicit state, by
// forward()'s argument names, and keeps its second output as the state.
const accumulatorScript = `import sys, torch
class Acc(torch.nn.Module):
    def forward(self, IN: torch.Tensor, START: torch.Tensor, INPUT_STATE: torch.Tensor):
        s = IN + INPUT_STATE * (1 - START)
        return s, s
torch.jit.script(Acc()).save(sys.argv[1])
`

const accumulatorConfig = `platform: "pytorch_libtorch"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 2000 }
  control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }]
  state [{ input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [1] }]
}
`

// TestTorchSequenceControlsAndState serves a TorchScript accumulator under
// the sequence batcher with the real libtorch backend: the START control
// and the implicit state reach forward() as arguments, the state output is
// carried between requests, and interleaved sequences batched together
// each get their own running sum.
func TestTorchSequenceControlsAndState(t *testing.T) {
	py, err := torchtest.Python(t.Context())
	if err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "acc")
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(accumulatorConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "acc.py")
	if err := os.WriteFile(script, []byte(accumulatorScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, script, filepath.Join(dir, "1", "model.pt")).CombinedOutput(); err != nil {
		t.Fatalf("scripting the model: %v\n%s", err, out)
	}
	e := torchEnv(t, root, false)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for c := 0; c < 6; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			sum := 0
			for i := 0; i < 5; i++ {
				v := c*10 + i
				sum += v
				code, body, err := e.seqInfer("acc", fmt.Sprint(100+c), i == 0, i == 4, v)
				if err != nil || code != 200 {
					errs <- fmt.Errorf("client %d step %d: %d %s %w", c, i, code, body, err)
					return
				}
				if got, err := outOf(body); err != nil || got != sum {
					errs <- fmt.Errorf("client %d step %d: got %d (%w), want %d", c, i, got, err, sum)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
