package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	inference "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// stateModel keeps nothing between requests: OUTPUT and OUTPUT_STATE are
// INPUT plus INPUT_STATE, the state the server carries for the sequence.
const stateModel = `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            s = pb_utils.get_input_tensor_by_name(r, "INPUT_STATE").as_numpy()
            total = (x + s).astype(np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("OUTPUT_STATE", total)]))
        return out
`

const stateConfig = `backend: "python"
max_batch_size: 4
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [1] }%s]
instance_group [{ kind: KIND_CPU count: 1 }]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 1000 }
  state [{
    input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [-1]
    initial_state { data_type: TYPE_INT32 dims: [1] %s name: "initial" }
  }]
}
`

// seqStep is one request of a sequence and what its client reads back.
type seqStep struct {
	id         any // uint64 or string correlation id
	start, end bool
	v          int32
	outputs    []string // requested outputs; nil for all
}

func inferSeqHTTP(base, model string, s seqStep) (map[string]int32, error) {
	req := map[string]any{
		"parameters": map[string]any{"sequence_id": s.id, "sequence_start": s.start, "sequence_end": s.end},
		"inputs":     []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{s.v}}},
	}
	if s.outputs != nil {
		var outs []any
		for _, n := range s.outputs {
			outs = append(outs, map[string]any{"name": n})
		}
		req["outputs"] = outs
	}
	b, err := postInfer(base, model, req)
	if err != nil {
		return nil, err
	}
	var out struct {
		Outputs []struct {
			Name string  `json:"name"`
			Data []int32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	got := map[string]int32{}
	for _, o := range out.Outputs {
		if len(o.Data) != 1 {
			return nil, fmt.Errorf("output %s: %v", o.Name, o.Data)
		}
		got[o.Name] = o.Data[0]
	}
	return got, nil
}

func inferSeqGRPC(client inference.GRPCInferenceServiceClient, model string, s seqStep) (map[string]int32, error) {
	b := func(v bool) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
	}
	id := &inference.InferParameter{}
	switch v := s.id.(type) {
	case uint64:
		// As tritonclient sends it: Triton takes an int64_param or a
		// string_param for sequence_id, and refuses a uint64_param.
		id.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: int64(v)}
	case string:
		id.ParameterChoice = &inference.InferParameter_StringParam{StringParam: v}
	}
	req := &inference.ModelInferRequest{
		ModelName:  model,
		Parameters: map[string]*inference.InferParameter{"sequence_id": id, "sequence_start": b(s.start), "sequence_end": b(s.end)},
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}, Contents: &inference.InferTensorContents{IntContents: []int32{s.v}}}},
	}
	for _, n := range s.outputs {
		req.Outputs = append(req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := client.ModelInfer(ctx, req)
	if err != nil {
		return nil, err
	}
	got := map[string]int32{}
	for i, o := range resp.Outputs {
		if i >= len(resp.RawOutputContents) || len(resp.RawOutputContents[i]) != 4 {
			return nil, fmt.Errorf("output %s: unexpected contents", o.Name)
		}
		got[o.Name] = int32(binary.LittleEndian.Uint32(resp.RawOutputContents[i]))
	}
	return got, nil
}

// TestPythonImplicitState runs the real program over a python model that
// accumulates through implicit state: sequences interleaved from many
// clients over HTTP and gRPC (uint64 and string correlation ids) each get
// their own running sum, batched by the oldest strategy; the state output
// stays hidden unless the model declares it and the client asks; the
// initial state comes from zero_data or initial_state/<data_file>.
func TestPythonImplicitState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "acc", fmt.Sprintf(stateConfig, "", "zero_data: true"), "1")
	writeConfig(t, root, "acc_debug", fmt.Sprintf(stateConfig, `, { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [-1] }`, `data_file: "start"`), "1")
	for _, m := range []string{"acc", "acc_debug"} {
		if err := os.WriteFile(filepath.Join(root, m, "1", "model.py"), []byte(stateModel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "acc_debug", "initial_state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "acc_debug", "initial_state", "start"), binary.LittleEndian.AppendUint32(nil, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, grpcAddr, logs := startPythonServer(t, true, "acc", "--model-repository", root)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)

	const clients, steps = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var id any = uint64(100 + c)
			if c%4 >= 2 {
				id = fmt.Sprintf("seq-%d", c)
			}
			sum := int32(0)
			for i := 0; i < steps; i++ {
				s := seqStep{id: id, start: i == 0, end: i == steps-1, v: int32(c*10 + i)}
				sum += s.v
				var got map[string]int32
				var err error
				if c%2 == 0 {
					got, err = inferSeqHTTP(base, "acc", s)
				} else {
					got, err = inferSeqGRPC(client, "acc", s)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d step %d: %w", c, i, err)
					return
				}
				if len(got) != 1 || got["OUTPUT"] != sum {
					errs <- fmt.Errorf("client %d step %d: got %v, want OUTPUT %d alone", c, i, got, sum)
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
	if t.Failed() {
		t.Fatalf("server log:\n%s", logs.String())
	}

	// A declared state output is returned when asked for (by name, or all
	// outputs), starting from the data_file's 1000.
	for i, s := range []seqStep{
		{id: uint64(7), start: true, v: 1},
		{id: uint64(7), v: 2, outputs: []string{"OUTPUT_STATE"}},
		{id: uint64(7), v: 3, outputs: []string{"OUTPUT"}},
		{id: uint64(7), end: true, v: 4, outputs: []string{"OUTPUT_STATE"}},
	} {
		want := map[int]map[string]int32{
			0: {"OUTPUT": 1001, "OUTPUT_STATE": 1001}, 1: {"OUTPUT_STATE": 1003}, 2: {"OUTPUT": 1006}, 3: {"OUTPUT_STATE": 1010},
		}[i]
		for _, proto := range []string{"http", "grpc"} {
			s := s
			s.id = fmt.Sprintf("%s-%v", proto, s.id)
			var got map[string]int32
			var err error
			if proto == "http" {
				got, err = inferSeqHTTP(base, "acc_debug", s)
			} else {
				got, err = inferSeqGRPC(client, "acc_debug", s)
			}
			if err != nil {
				t.Fatalf("%s step %d: %v", proto, i, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s step %d: got %v, want %v", proto, i, got, want)
			}
		}
	}
}

// echoFloat answers its input.
const echoFloat = `import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())]) for r in requests]
`

// unloaderModel unloads the ensemble "ens" with its dependents from
// execute, through the python model loading API.
const unloaderModel = `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        pb_utils.unload_model("ens", unload_dependents=True)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", np.array([1], dtype=np.float32))]) for _ in requests]
`

// TestPythonUnloadModelWithDependents: in explicit mode a python model's
// pb_utils.unload_model(..., unload_dependents=True) unloads an ensemble
// and its composing model.
func TestPythonUnloadModelWithDependents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	for name, src := range map[string]string{"echo": echoFloat, "unloader": unloaderModel} {
		writeConfig(t, root, name, floatConfig, "1")
		if err := os.WriteFile(filepath.Join(root, name, "1", "model.py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(t, root, "ens", `platform: "ensemble"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }]
ensemble_scheduling { step [{ model_name: "echo" model_version: -1 input_map { key: "INPUT__0" value: "IN" } output_map { key: "OUTPUT__0" value: "OUT" } }] }
`, "1")
	// Loading the ensemble loads echo with it.
	base, _, _, logs := startPythonServer(t, false, "unloader", "--model-repository", root,
		"--model-control-mode=explicit", "--load-model=ens", "--load-model=unloader")
	ready := func(m string) bool {
		resp, err := http.Get(base + "/v2/models/" + m + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !ready("ens") || !ready("echo") {
		t.Fatalf("ens and echo should be loaded:\n%s", logs.String())
	}
	if n := postFloat(t, base, "unloader", 0); n != 1 {
		t.Fatalf("unloader answered %v", n)
	}
	if ready("ens") || ready("echo") {
		t.Fatalf("ens or echo still ready after unload_model(unload_dependents=True):\n%s", logs.String())
	}
}
