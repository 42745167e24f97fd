package repository

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

const identityParam = `parameters { key: "fake_mode" value { string_value: "identity" } }
`

// f32 is an FP32 tensor of shape with zero data.
func f32(name string, shape ...int64) backend.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return backend.Tensor{Name: name, DataType: backend.FP32, Shape: shape, Data: make([]byte, 4*n)}
}

// TestReshape: clients send and receive the config's dims, the backend
// sees and produces the reshape (the fake identity model copies its input
// to its output, so the output shows what the backend saw), batch
// dimension and variable dimensions included; the served config keeps the
// reshape; warmup samples reach the backend reshaped.
func TestReshape(t *testing.T) {
	root := t.TempDir()
	// IN dims [4] reshape [2,2]; OUT has no reshape: it shows the backend's input.
	writeModel(t, root, "in_only", `backend: "fake"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 2] } }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [2, 2] }]
model_warmup [{ name: "w" batch_size: 2 inputs { key: "IN" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]
`+identityParam, []string{"1"})
	// Both reshaped, with a variable dimension: [-1,2,3] <-> [-1,6].
	writeModel(t, root, "both", `backend: "fake"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [-1, 2, 3] reshape { shape: [-1, 6] } }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1, 2, 3] reshape { shape: [-1, 6] } }]
`+identityParam, []string{"1"})
	// A one-element input reshaped to a scalar (Triton has no dims: [];
	// the output's -1 lets the backend's shape through).
	writeModel(t, root, "scalar", `backend: "fake"
max_batch_size: 2
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]
`+identityParam, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		in    backend.Tensor
		want  string
	}{
		{"in_only", f32("IN", 3, 4), "[3,2,2]"},
		{"both", f32("IN", 5, 2, 3), "[5,2,3]"},
		{"scalar", f32("IN", 2, 1), "[2]"},
	} {
		mod := mustGet(t, m, c.model)
		_, resp, err := m.Infer(context.Background(), mod, -1, &backend.Request{Inputs: []backend.Tensor{c.in}}, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		if got := FormatShape(resp.Outputs[0].Shape); got != c.want {
			t.Errorf("%s: output shape %s, want %s", c.model, got, c.want)
		}
	}
	// Requests are validated against dims, not the reshape.
	if _, _, err := m.Infer(context.Background(), mustGet(t, m, "in_only"), -1, &backend.Request{Inputs: []backend.Tensor{f32("IN", 1, 2, 2)}}, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "Expected [-1,4], got [1,2,2]") {
		t.Errorf("a request in the reshape's shape: %v", err)
	}
	if js := string(mustGet(t, m, "both").ConfigJSON); !strings.Contains(js, `"reshape":{"shape":[-1,6]}`) {
		t.Errorf("served config lacks the reshape: %s", js)
	}
}

// TestReshapeValidation refuses inputs and outputs, their dims and their
// reshapes, with the texts of Triton's ValidateIOShape: no dims at all
// (Triton has no scalar tensors, with or without batching), a dimension
// of 0, an empty reshape on a model that does not batch, reshapes that do
// not fit the dims. Each text names the tensor.
func TestReshapeValidation(t *testing.T) {
	for _, c := range []struct {
		batch   int
		in, out string
		want    string
	}{
		{0, "dims: [4] reshape { shape: [3] }", "dims: [4]", "model input 'IN' has different size for dims and reshape for m"},
		{0, "dims: [4] reshape { shape: [0, 4] }", "dims: [4]", "model input 'IN' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m"},
		{0, "dims: [2, -1] reshape { shape: [-1] }", "dims: [4]", "model input 'IN' has different size for dims and reshape for m"},
		{0, "dims: [-1, 4] reshape { shape: [-1, 2, -1] }", "dims: [4]", "model input 'IN' has different number of variable-size dimensions for dims and reshape for m"},
		{0, "dims: [4]", "dims: [2] reshape { shape: [3] }", "model output 'OUT' has different size for dims and reshape for m"},
		{0, "dims: []", "dims: [4]", "model input 'IN' must specify 'dims' for m"},
		{4, "dims: []", "dims: [4]", "model input 'IN' must specify 'dims' for m"},
		{4, "dims: [4]", "dims: []", "model output 'OUT' must specify 'dims' for m"},
		{4, "dims: [] reshape { shape: [] }", "dims: [4]", "model input 'IN' must specify 'dims' for m"},
		{0, "dims: [1] reshape { shape: [] }", "dims: [4]", "model input 'IN' cannot have empty reshape for non-batching model as scalar tensors are not supported for m"},
		{0, "dims: [4]", "dims: [1] reshape { shape: [] }", "model output 'OUT' cannot have empty reshape for non-batching model as scalar tensors are not supported for m"},
		{4, "dims: [4, 0]", "dims: [4]", "model input 'IN' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"},
		{0, "dims: [4]", "dims: [-2]", "model output 'OUT' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"},
		{0, "dims: [4]", "dims: [4] data_type: TYPE_INVALID", "model output 'OUT' must specify 'data_type' for m"},
		{0, "dims: [4]", "dims: [4]", ""},
	} {
		out := c.out
		if !strings.Contains(out, "data_type") {
			out += " data_type: TYPE_FP32"
		}
		root := t.TempDir()
		writeModel(t, root, "m", fmt.Sprintf(`backend: "fake"
max_batch_size: %d
input [{ name: "IN" data_type: TYPE_FP32 %s }]
output [{ name: "OUT" %s }]
`, c.batch, c.in, out), []string{"1"})
		m := newManager(t, fake.New(), true, root)
		err := m.LoadAll(context.Background())
		if c.want == "" {
			if err != nil {
				t.Errorf("a valid model is refused: %v", err)
			}
			continue
		}
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("max_batch_size %d, input %s, output %s: %v\nwant ...%s", c.batch, c.in, c.out, err, c.want)
		}
	}
}

// TestBackendFromTheModelFile: a config (or load override) naming neither
// backend nor platform gets the backend of its model file, with the
// platform and default file Triton fills in, shown by the config endpoint.
func TestBackendFromTheModelFile(t *testing.T) {
	root := t.TempDir()
	noBackend := `max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`
	writeModel(t, root, "pt", noBackend, []string{"1"}, "model.pt")
	writeModel(t, root, "bare", noBackend, []string{"1"})
	m := newManager(t, fake.New(), false, root)
	_ = m.LoadAll(context.Background())
	mod := mustGet(t, m, "pt")
	if mod.Backend != "pytorch" || mod.Config.GetPlatform() != "pytorch_libtorch" || mod.Config.GetDefaultModelFilename() != "model.pt" {
		t.Errorf("detected %q, platform %q, file %q", mod.Backend, mod.Config.GetPlatform(), mod.Config.GetDefaultModelFilename())
	}
	_, reason, _ := m.Versions("bare")
	if reason != "model 'bare': bare/config.pbtxt: must specify 'platform' or 'backend' for 'bare'" {
		t.Errorf("no model file: %q", reason)
	}
	// The override: no backend, the version directory decides.
	override := `{"max_batch_size": 2, "input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [4]}], "output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [3]}]}`
	if err := m.LoadModel(context.Background(), "pt", []byte(override)); err != nil {
		t.Fatalf("override without backend: %v", err)
	}
	if mod := mustGet(t, m, "pt"); mod.Backend != "pytorch" || mod.Config.GetMaxBatchSize() != 2 {
		t.Errorf("after the override: %q, max_batch_size %d", mod.Backend, mod.Config.GetMaxBatchSize())
	}
}

// TestFieldsTritonFillsIn: pinned memory settings are accepted (no effect
// on CPU) and shown enabled when not set, preferred_batch_size defaults to
// max_batch_size in the served config, KIND_MODEL is accepted, and
// instance groups this server cannot place get Triton's texts.
func TestFieldsTritonFillsIn(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "pinned", linearCfg+`optimization { input_pinned_memory { enable: false } }
dynamic_batching { }
instance_group [{ kind: KIND_MODEL }]
`, []string{"1"})
	writeModel(t, root, "cpu_gpus", linearCfg+"instance_group [{ kind: KIND_CPU gpus: [0] }]", []string{"1"})
	writeModel(t, root, "auto_gpus", linearCfg+"instance_group [{ name: \"g\" gpus: [1] }]", []string{"1"})
	writeModel(t, root, "nogroup", linearCfg, []string{"1"})
	writeModel(t, root, "groups", linearCfg+"instance_group [{ name: \"a\" }, { count: 2 }, { count: -3 }]", []string{"1"})
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	// Triton's NormalizeInstanceGroup: the group it adds is named after the
	// model; a group given without a name is <model>_<its index>; a count
	// below 1 is the backend's default, 1 here.
	for name, want := range map[string]string{"nogroup": "[nogroup:1]", "groups": "[a:1 groups_1:2 groups_2:1]"} {
		var got []string
		for _, g := range mustGet(t, m, name).Config.GetInstanceGroup() {
			got = append(got, fmt.Sprintf("%s:%d", g.GetName(), g.GetCount()))
		}
		if fmt.Sprint(got) != want {
			t.Errorf("%s: instance groups %v, want %s", name, got, want)
		}
	}
	cfg := mustGet(t, m, "pinned").Config
	if cfg.GetOptimization().GetInputPinnedMemory().GetEnable() || !cfg.GetOptimization().GetOutputPinnedMemory().GetEnable() {
		t.Errorf("pinned memory: %v", cfg.GetOptimization())
	}
	if got := cfg.GetDynamicBatching().GetPreferredBatchSize(); len(got) != 1 || got[0] != 8 {
		t.Errorf("preferred_batch_size %v, want [8]", got)
	}
	if k := cfg.GetInstanceGroup()[0].GetKind(); k != modelconfig.ModelInstanceGroup_KIND_MODEL {
		t.Errorf("kind %v", k)
	}
	for name, want := range map[string]string{
		"cpu_gpus":  "instance group cpu_gpus_0 of model cpu_gpus has kind KIND_CPU but specifies one or more GPUs",
		"auto_gpus": "instance group g of model auto_gpus has kind KIND_CPU but specifies one or more GPUs",
	} {
		if _, reason, _ := m.Versions(name); !strings.HasSuffix(reason, want) {
			t.Errorf("%s: %q\nwant ...%s", name, reason, want)
		}
	}
}

// TestQueuePolicyConfig: queue policies and priority levels reach the
// scheduler, and wrong ones are refused with Triton's texts.
func TestQueuePolicyConfig(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "p", linearCfg+`dynamic_batching {
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { max_queue_size: 4 default_timeout_microseconds: 1000 timeout_action: DELAY allow_timeout_override: true }
  priority_queue_policy { key: 1 value { max_queue_size: 9 } }
}`, []string{"1"})
	bad := map[string]string{
		"level":    "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
		"policy":   "dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 5 value { } } }",
		"ordering": "dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
		"delay":    "dynamic_batching { preserve_ordering: true default_queue_policy { default_timeout_microseconds: 5 timeout_action: DELAY } }",
		"size":     "dynamic_batching { preferred_batch_size: [ 16 ] }",
	}
	for name, db := range bad {
		writeModel(t, root, name, linearCfg+db, []string{"1"})
	}
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	d := mustGet(t, m, "p").Scheduler.Config().Dynamic
	if len(d.Levels) != 3 || d.DefaultLevel != 2 || d.Levels[0].MaxQueueSize != 9 || d.Levels[1].MaxQueueSize != 4 ||
		!d.Levels[2].Delay || !d.Levels[2].AllowOverride || d.Levels[2].Timeout != time.Millisecond || d.Levels[0].Delay {
		t.Errorf("levels %+v, default %d", d.Levels, d.DefaultLevel)
	}
	for name, want := range map[string]string{
		"level":    "default priority level must be in range [1, 2] for level",
		"policy":   "priority queue policy must have priority level in range [1, 2] for policy",
		"ordering": "Only one priority level is allowed when 'preserve_ordering' is true for ordering",
		"delay":    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for delay",
		"size":     "dynamic batching preferred size must be <= max batch size for size",
	} {
		if _, reason, _ := m.Versions(name); !strings.HasSuffix(reason, want) {
			t.Errorf("%s: %q\nwant ...%s", name, reason, want)
		}
	}
}
