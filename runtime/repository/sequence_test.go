package repository

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestSequenceConfigRefusals loads sequence_batching configs that Triton
// would refuse and checks each load fails naming what is wrong.
func TestSequenceConfigRefusals(t *testing.T) {
	ctl := func(s string) string { return linearCfg + "sequence_batching { control_input [" + s + "] }" }
	cases := map[string]refusal{
		"twokinds": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }, { name: "B" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }`),
			"sequence_batching specifies multiple CONTROL_SEQUENCE_START tensors"},
		"novalues": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_READY }] }`), "must give exactly one of int32_false_true"},
		"three":    {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1, 2] }] }`), "false/true values must be exactly 2, got 3"},
		"corrtype": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }`), "expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, or TYPE_STRING"},
		"isinput":  {ctl(`{ name: "INPUT__0" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }`), "control input 'INPUT__0' is also a model input"},
		"prefer":   {linearCfg + "sequence_batching { oldest { preferred_batch_size: [64] } }", "preferred_batch_size 64 must be between 1 and max_batch_size"},
		// scheduling_choice is a oneof: no queue policy (DELAY or other)
		// reaches the sequence batcher.
		"bothsched": {linearCfg + "dynamic_batching { default_queue_policy { default_timeout_microseconds: 1 timeout_action: DELAY } } sequence_batching { }", "oneof inference.ModelConfig.scheduling_choice is already set"},
	}
	root := t.TempDir()
	for name, c := range cases {
		writeModel(t, root, name, c.cfg, []string{"1"})
	}
	writeModel(t, root, "ok", ctl(`{ name: "S" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] }] }, { name: "C" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }`), []string{"1"})
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	if _, err := m.Get("ok", -1); err != nil {
		t.Fatalf("a valid sequence model should load: %v", err)
	}
	wantRefused(t, m, cases)
}

const stateCfg = `
backend: "fake"
max_batch_size: 2
parameters { key: "fake_mode" value { string_value: "statesum" } }
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
`

func stateModel(state string) string {
	return stateCfg + `sequence_batching { max_sequence_idle_microseconds: 60000000 state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [-1] ` + state + ` }] }`
}

// TestSequenceStateConfig loads implicit-state models: a data_file initial
// state is read from the model's initial_state directory and reaches the
// START request; bad state configs are refused naming the state.
func TestSequenceStateConfig(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "file", stateModel(`initial_state { data_type: TYPE_INT32 dims: [1] data_file: "seven" name: "init" }`), []string{"1"})
	if err := os.MkdirAll(filepath.Join(root, "file", "initial_state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file", "initial_state", "seven"), binary.LittleEndian.AppendUint32(nil, 7), 0o644); err != nil {
		t.Fatal(err)
	}
	writeModel(t, root, "zero", stateModel(`initial_state { data_type: TYPE_INT32 dims: [1] zero_data: true name: "init" }`), []string{"1"})
	cases := map[string]refusal{
		"isinput":   {strings.Replace(stateModel(""), `"STATE_IN"`, `"IN"`, 1), "sequence_batching state 'IN' is also a model input"},
		"noout":     {strings.Replace(stateModel(""), `output_name: "STATE_OUT"`, "", 1), "state[0] must give both input_name and output_name"},
		"badtype":   {stateModel(`initial_state { data_type: TYPE_FP32 dims: [1] zero_data: true name: "i" }`), "initial_state 'i' has data_type FP32, the state is INT32"},
		"vardims":   {stateModel(`initial_state { data_type: TYPE_INT32 dims: [-1] zero_data: true name: "i" }`), "initial_state 'i' dims [-1] must be fixed"},
		"nofile":    {stateModel(`initial_state { data_type: TYPE_INT32 dims: [1] data_file: "missing" name: "i" }`), "sequence_batching state 'STATE_IN'"},
		"escape":    {stateModel(`initial_state { data_type: TYPE_INT32 dims: [1] data_file: "../config.pbtxt" name: "i" }`), "must name a file inside the model's initial_state directory"},
		"declared":  {strings.Replace(stateModel(""), `output [`, `output [{ name: "STATE_OUT" data_type: TYPE_FP32 dims: [1] }, `, 1), "output 'STATE_OUT' is declared as FP32 but the state is INT32"},
		"decoupled": {stateModel("") + " model_transaction_policy { decoupled: true }", "implicit state is not supported for models with the decoupled transaction policy"},
	}
	for name, c := range cases {
		writeModel(t, root, name, c.cfg, []string{"1"})
	}
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	wantRefused(t, m, cases)
	for model, initial := range map[string]int32{"file": 7, "zero": 0} {
		mod, err := m.Get(model, -1)
		if err != nil {
			t.Fatalf("%s should load: %v", model, err)
		}
		sum := initial
		for i, v := range []int32{3, 4, 5} {
			sum += v
			req := &backend.Request{
				Sequence: backend.Sequence{ID: 9, Start: i == 0, End: i == 2},
				Inputs:   []backend.Tensor{{Name: "IN", DataType: backend.Int32, Shape: []int64{1, 1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(v))}},
			}
			resp, err := mod.Scheduler.Infer(context.Background(), req)
			if err != nil || resp.Err != nil {
				t.Fatalf("%s step %d: %v %v", model, i, err, resp)
			}
			if got := int32(binary.LittleEndian.Uint32(resp.Outputs[0].Data)); got != sum || len(resp.Outputs) != 1 {
				t.Fatalf("%s step %d: got %v, want OUT %d alone", model, i, resp.Outputs, sum)
			}
		}
	}
}

// TestSequenceWarmup: a sequence model's model_warmup names its control and
// implicit state inputs, as Triton's do (warmup requests reach the
// instances without the sequence batcher, which adds them to real
// requests), and they reach the backend; a sample without the state the
// model reads fails its warmup and the load, and a control input given
// another data type than its control is refused naming it.
func TestSequenceWarmup(t *testing.T) {
	withWarmup := func(inputs string) string {
		cfg := strings.Replace(stateModel(""), "state [", `control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }] state [`, 1)
		return cfg + `
model_warmup [{ name: "seq" batch_size: 2 count: 2 inputs [` + inputs + `] }]`
	}
	in := `{ key: "IN" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }`
	start := `{ key: "START" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }`
	state := `{ key: "STATE_IN" value { data_type: TYPE_INT32 dims: [3] random_data: true } }`
	root := t.TempDir()
	writeModel(t, root, "warm", withWarmup(in+", "+start+", "+state), []string{"1"})
	cases := map[string]refusal{
		"nostate": {withWarmup(in + ", " + start), "warmup \"seq\" on instance 0 of nostate: fake statesum: no INT32 input STATE_IN"},
		"ctltype": {withWarmup(in + ", " + strings.Replace(start, "TYPE_INT32", "TYPE_FP32", 1) + ", " + state), "model_warmup[0] input 'START' has data_type FP32, the model declares INT32"},
		"unknown": {withWarmup(in + ", " + state + `, { key: "END" value { data_type: TYPE_INT32 dims: [1] zero_data: true } }`), "model_warmup[0] names unknown input 'END'"},
		"vardims": {withWarmup(in + ", " + strings.Replace(state, "[3]", "[-1]", 1)), "model_warmup[0] input 'STATE_IN' has a variable dimension"},
	}
	for name, c := range cases {
		writeModel(t, root, name, c.cfg, []string{"1"})
	}
	be := fake.New()
	m := newManager(t, be, true, root)
	_ = m.LoadAll(context.Background())
	wantRefused(t, m, cases)
	mod, err := m.Get("warm", -1)
	if err != nil {
		t.Fatalf("a sequence model whose warmup names its control and state inputs should load: %v", err)
	}
	if got := be.Batches("warm"); !slices.Equal(got, []int{2, 2}) {
		t.Errorf("warmup executions %v, want two of batch 2", got)
	}
	req := &backend.Request{
		Sequence: backend.Sequence{ID: 3, Start: true},
		Inputs:   []backend.Tensor{{Name: "IN", DataType: backend.Int32, Shape: []int64{1, 1}, Data: binary.LittleEndian.AppendUint32(nil, 5)}},
	}
	resp, err := mod.Scheduler.Infer(context.Background(), req)
	if err != nil || resp.Err != nil {
		t.Fatalf("infer after warmup: %v %v", err, resp)
	}
	if got := int32(binary.LittleEndian.Uint32(resp.Outputs[0].Data)); got != 5 {
		t.Errorf("the first request of a sequence got %d, want 5: warmup must leave no state behind", got)
	}
}
