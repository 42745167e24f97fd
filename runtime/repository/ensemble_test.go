package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func ensembleCfg(in, out string, steps ...string) string {
	return `platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: ` + in + ` dims: [4] }]
output [{ name: "OUT" data_type: ` + out + ` dims: [3] }]
ensemble_scheduling { step [` + strings.Join(steps, ", ") + `] }
`
}

func step(model, in, out string) string {
	return `{ model_name: "` + model + `" model_version: -1 input_map { key: "INPUT__0" value: "` + in + `" } output_map { key: "OUTPUT__0" value: "` + out + `" } }`
}

// TestEnsembleLoadRefusals: ensembles with a missing model, a type
// mismatch, a data-flow cycle, a cycle of ensembles, an unproduced output
// or a composing model with a smaller batch fail to load, each naming what
// is wrong; a valid one (listed before its model, so LoadAll must order
// them) loads.
func TestEnsembleLoadRefusals(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "lin", linearCfg, []string{"1"})
	writeModel(t, root, "small", strings.Replace(linearCfg, "max_batch_size: 8", "max_batch_size: 2", 1), []string{"1"})
	cases := map[string]struct{ cfg, want string }{
		"aok":      {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "IN", "OUT")), ""},
		"missing":  {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("nosuch", "IN", "OUT")), "ensemble 'missing' depends on 'nosuch' which is not available"},
		"types":    {ensembleCfg("TYPE_INT32", "TYPE_FP32", step("lin", "IN", "OUT")), "input 'INPUT__0' of step 'lin' is FP32 but ensemble tensor 'IN' is INT32"},
		"outtype":  {ensembleCfg("TYPE_FP32", "TYPE_INT64", step("lin", "IN", "OUT")), "ensemble output 'OUT' is INT64 but step 'lin' produces FP32"},
		"flowloop": {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "B", "A"), step("lin", "A", "B"), step("lin", "IN", "OUT")), "the steps form a cycle"},
		"unmade":   {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "IN", "X")), "ensemble output 'OUT' is not produced by any step"},
		"nosource": {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("lin", "Q", "OUT")), "reads ensemble tensor 'Q', which is neither an ensemble input nor any step's output"},
		"batch":    {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("small", "IN", "OUT")), "ensemble 'batch' allows maximum batch size 8, but it contains model 'small' which only allows maximum batch size to be 2"},
		"cyc1":     {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("cyc2", "IN", "OUT")), "ensemble 'cyc1' contains a cycle of ensembles: cyc1 -> cyc2 -> cyc1"},
		"cyc2":     {ensembleCfg("TYPE_FP32", "TYPE_FP32", step("cyc1", "IN", "OUT")), "ensemble 'cyc2' contains a cycle of ensembles: cyc2 -> cyc1 -> cyc2"},
	}
	for name, c := range cases {
		writeModel(t, root, name, c.cfg, []string{"1"})
	}
	m := newManager(t, fake.New(), true, root)
	_ = m.LoadAll(context.Background())
	if _, err := m.Get("aok", -1); err != nil {
		t.Fatalf("a valid ensemble should load after its model: %v", err)
	}
	delete(cases, "aok")
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
