//go:build cgo && libtorch

package httpapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/internal/torchtest"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

// accumulatorScript writes a TorchScript module that keeps nothing: the
// sequence batcher feeds it the START control (START__1: argument 1, as
// Triton's libtorch backend requires of control inputs) and the implicit
// state (by forward()'s argument name), and keeps its second output as the
// state.
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
  control_input [{ name: "START__1" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }]
  state [{ input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [1] }]
}
model_warmup [{
  name: "sequence sample" batch_size: 2
  inputs { key: "IN" value { data_type: TYPE_INT32 dims: [1] random_data: true } }
  inputs { key: "START__1" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }
  inputs { key: "INPUT_STATE" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }
}]
`

// TestTorchSequenceControlsAndState serves a TorchScript accumulator under
// the sequence batcher with the real libtorch backend: it loads after its
// model_warmup (which gives the control and state inputs, as Triton's
// samples must), the START control and the implicit state reach forward()
// as arguments, the state output is carried between requests, and
// interleaved sequences batched together each get their own running sum.
// A control input named otherwise than <name>__<index> is refused at load
// with Triton's text, and so is a warmup sample without the control.
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

	model, err := os.ReadFile(filepath.Join(dir, "1", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir()
	for name, cfg := range map[string]string{
		"bare":      strings.ReplaceAll(accumulatorConfig, "START__1", "START"),
		"nocontrol": strings.Replace(accumulatorConfig, `inputs { key: "START__1" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }`, "", 1),
	} {
		if err := os.MkdirAll(filepath.Join(bad, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, name, "1", "model.pt"), model, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := repository.New(repository.Options{
		Repositories: []string{bad}, StrictModelConfig: true,
		Backends: map[string]backend.Backend{"pytorch": torch.New(torch.Options{})},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close(context.Background())
	err = mgr.LoadAll(context.Background())
	for _, want := range []string{
		"input 'START' does not follow <name>__<index> naming convention.",
		`load failed for model 'nocontrol': version 1 is at UNAVAILABLE state: warmup "sequence sample" on instance 0 of nocontrol`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loading the refused models: %v, want %q", err, want)
		}
	}
}
