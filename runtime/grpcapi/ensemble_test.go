package grpcapi

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestEnsembleChainsTwoModels serves frontendtest.Chain over gRPC: the
// outputs are the two models applied in turn, each step runs on (and is
// counted by) its own model, and a failing step is reported with the
// ensemble's name.
func TestEnsembleChainsTwoModels(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "stage2": frontendtest.Stage2, "chain": frontendtest.Chain})
	ctx := context.Background()
	x := rows(3, 1)
	mid := fake.Linear(x, 4, 3)
	want := map[string][]byte{"MID": frontendtest.F32Bytes(mid), "OUT": frontendtest.F32Bytes(fake.Linear(mid, 3, 2))}
	r := linearRequest("e1", x, true)
	r.ModelName, r.Inputs[0].Name = "chain", "IN"
	resp, err := e.client.ModelInfer(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetOutputs()) != 2 {
		t.Fatalf("outputs: %v", resp.GetOutputs())
	}
	for i, o := range resp.GetOutputs() {
		if !bytes.Equal(resp.GetRawOutputContents()[i], want[o.GetName()]) {
			t.Errorf("output %s differs from the two models applied in turn", o.GetName())
		}
		if o.GetName() == "OUT" && (len(o.GetShape()) != 2 || o.GetShape()[0] != 3 || o.GetShape()[1] != 2) {
			t.Errorf("OUT shape %v, want [3 2]", o.GetShape())
		}
	}
	st, err := e.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "stage2"})
	if err != nil {
		t.Fatal(err)
	}
	if n := st.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount(); n != 1 {
		t.Errorf("stage2 counted %d successful requests, want the ensemble's 1", n)
	}
	// A step's error names the ensemble.
	bad := rows(1, fake.FailValue)
	bad[0] = fake.FailValue
	r = linearRequest("e2", bad, true)
	r.ModelName, r.Inputs[0].Name = "chain", "IN"
	_, err = e.client.ModelInfer(ctx, r)
	wantCode(t, err, codes.Internal)
	if !strings.Contains(err.Error(), "in ensemble 'chain', ") {
		t.Errorf("step error: %v", err)
	}
}

// TestUnloadDependents: RepositoryModelUnload's unload_dependents (a bool
// parameter) unloads an ensemble's composing models with it.
func TestUnloadDependents(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "stage2": frontendtest.Stage2, "chain": frontendtest.Chain})
	// Another type is refused, as Triton does, and unloads nothing.
	_, err := e.client.RepositoryModelUnload(context.Background(), &pb.RepositoryModelUnloadRequest{ModelName: "chain",
		Parameters: map[string]*pb.ModelRepositoryParameter{"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: "true"}}}})
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "invalid value type for 'unload_dependents' parameter, expected bool_param.") {
		t.Fatalf("unload_dependents as a string: %v", err)
	}
	if _, err := e.mgr.Get("chain", -1); err != nil {
		t.Fatalf("a refused unload unloaded chain: %v", err)
	}
	_, err = e.client.RepositoryModelUnload(context.Background(), &pb.RepositoryModelUnloadRequest{ModelName: "chain",
		Parameters: map[string]*pb.ModelRepositoryParameter{"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_BoolParam{BoolParam: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"chain", "linear", "stage2"} {
		if _, err := e.mgr.Get(m, -1); err == nil {
			t.Errorf("%s still loaded after unloading chain with its dependents", m)
		}
	}
}
