package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestSequenceConfigRefusals loads sequence_batching configs that Triton
// would refuse and checks each load fails naming what is wrong.
func TestSequenceConfigRefusals(t *testing.T) {
	ctl := func(s string) string { return linearCfg + "sequence_batching { control_input [" + s + "] }" }
	cases := map[string]struct{ cfg, want string }{
		"twokinds": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }, { name: "B" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }`),
			"sequence_batching specifies multiple CONTROL_SEQUENCE_START tensors"},
		"novalues": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_READY }] }`), "must give exactly one of int32_false_true"},
		"three":    {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1, 2] }] }`), "false/true values must be exactly 2, got 3"},
		"corrtype": {ctl(`{ name: "A" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }`), "expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, or TYPE_STRING"},
		"isinput":  {ctl(`{ name: "INPUT__0" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }`), "control input 'INPUT__0' is also a model input"},
		"prefer":   {linearCfg + "sequence_batching { oldest { preferred_batch_size: [64] } }", "preferred_batch_size 64 must be between 1 and max_batch_size"},
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
	for _, e := range m.Index(false) {
		if c, ok := cases[e.Name]; ok {
			if e.State != Unavailable || !strings.Contains(e.Reason, c.want) {
				t.Errorf("%s: %s %q, want UNAVAILABLE with %q", e.Name, e.State, e.Reason, c.want)
			}
			delete(cases, e.Name)
		}
	}
	if len(cases) != 0 {
		t.Errorf("not in the index: %v", cases)
	}
}
