package repository

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

const raggedCfg = `backend: "fake"
max_batch_size: 8
input [
  { name: "INPUT" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true },
  { name: "OPT" data_type: TYPE_FP32 dims: [1] optional: true }
]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [-1] },
  { name: "NAMES" data_type: TYPE_STRING dims: [1] }
]
`

// TestBatchIOInSpec: allow_ragged_batch, batch_input and batch_output load
// and reach the backend's spec as the config gives them.
func TestBatchIOInSpec(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", raggedCfg+`
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_FP32 source_input: "INPUT" },
  { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: ["S1", "S2"] data_type: TYPE_INT32 source_input: "INPUT" }
]
batch_output [{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "INPUT" }]
dynamic_batching {}
`+identityParam, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	mod := mustGet(t, m, "m")
	s := mod.Spec
	if !s.Inputs[0].Ragged || s.Inputs[1].Ragged {
		t.Errorf("ragged flags %v %v, want true false", s.Inputs[0].Ragged, s.Inputs[1].Ragged)
	}
	want := []backend.BatchInput{
		{Kind: backend.BatchAccumulatedElementCount, Targets: []string{"INDEX"}, DataType: backend.FP32, Source: "INPUT"},
		{Kind: backend.BatchItemShapeFlatten, Targets: []string{"S1", "S2"}, DataType: backend.Int32, Source: "INPUT"},
	}
	if len(s.BatchInputs) != len(want) {
		t.Fatalf("batch inputs %+v, want %+v", s.BatchInputs, want)
	}
	for i, w := range want {
		g := s.BatchInputs[i]
		if g.Kind != w.Kind || g.DataType != w.DataType || g.Source != w.Source || !slices.Equal(g.Targets, w.Targets) {
			t.Errorf("batch input %d: %+v, want %+v", i, g, w)
		}
	}
	if len(s.BatchOutputs) != 1 || s.BatchOutputs[0].Source != "INPUT" || !slices.Equal(s.BatchOutputs[0].Targets, []string{"OUT"}) {
		t.Errorf("batch outputs %+v", s.BatchOutputs)
	}
	// The served config keeps the fields.
	if cfg := string(mod.ConfigJSON); !strings.Contains(cfg, `"batch_input"`) || !strings.Contains(cfg, `"allow_ragged_batch":true`) {
		t.Errorf("served config lacks the batch fields: %s", cfg)
	}
}

// TestBatchIORefusals: Triton's ValidateBatchIO texts, and what a batch
// input here cannot be computed from.
func TestBatchIORefusals(t *testing.T) {
	cases := []struct{ field, want string }{
		{`batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: ["INPUT", "OPT"] }]`, "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2"},
		{`batch_input [{ kind: BATCH_ITEM_SHAPE target_name: "N" data_type: TYPE_INT64 source_input: "INPUT" }]`, "batch input data type must be TYPE_INT32 or TYPE_FP32"},
		{`batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "NOPE" }]`, "unknown source input name 'NOPE'"},
		{`batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "OPT" }]`, "source input 'OPT' is optional"},
		{`batch_input [{ kind: BATCH_ELEMENT_COUNT data_type: TYPE_INT32 source_input: "INPUT" }]`, "names no target_name"},
		{`batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "INPUT" data_type: TYPE_INT32 source_input: "INPUT" }]`, "batch input target 'INPUT' is also an input of the model"},
		{`batch_output [{ target_name: "OUT" source_input: ["INPUT", "INPUT"] }]`, "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 2"},
		{`batch_output [{ target_name: "NOPE" source_input: "INPUT" }]`, "unknown target output name 'NOPE'"},
		{`batch_output [{ target_name: ["OUT", "OUT"] source_input: "INPUT" }]`, "target output name 'OUT' can only be specified once"},
		{`batch_output [{ target_name: "NAMES" source_input: "INPUT" }]`, "batch output target 'NAMES' has data type BYTES"},
	}
	root := t.TempDir()
	for i, c := range cases {
		writeModel(t, root, "m"+strconv.Itoa(i), raggedCfg+c.field+"\n", []string{"1"})
	}
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	idx := m.Index(false)
	for i, c := range cases {
		found := false
		for _, e := range idx {
			if e.Name == "m"+strconv.Itoa(i) && e.State == Unavailable && strings.Contains(e.Reason, c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: not refused with %q: %+v", c.field, c.want, idx)
		}
	}
}

// TestEqualShapeInputs: the dynamic batcher keeps apart requests whose
// shapes differ in an input with a variable dimension, unless that input
// allows ragged batches (Triton's rule for forming a batch).
func TestEqualShapeInputs(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "m", `backend: "fake"
max_batch_size: 8
input [
  { name: "RAGGED" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true },
  { name: "VAR" data_type: TYPE_FP32 dims: [2, -1] },
  { name: "FIXED" data_type: TYPE_FP32 dims: [3] }
]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]
dynamic_batching {}
`+identityParam, []string{"1"})
	m := newManager(t, fake.New(), true, root)
	if err := m.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, m, "m").Scheduler.Config().EqualShapes; !slices.Equal(got, []string{"VAR"}) {
		t.Errorf("equal-shape inputs %v, want [VAR]", got)
	}
}
