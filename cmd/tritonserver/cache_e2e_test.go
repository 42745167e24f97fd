package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// counterModel answers every request with how many times execute ran.
const counterModel = `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        self.n = 0
    def execute(self, requests):
        self.n += 1
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", np.array([self.n], dtype=np.float32))]) for _ in requests]
`

// busyModel marks itself running in the directory of its "dir" parameter
// for a while and answers how many executions (of any instance) it saw
// running at once, itself included.
const busyModel = `import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        self.dir = json.loads(args["model_config"])["parameters"]["dir"]["string_value"]
        self.me = os.path.join(self.dir, "%d-%s" % (os.getpid(), args["model_instance_name"]))
    def execute(self, requests):
        open(self.me, "w").close()
        seen = 0
        for _ in range(20):
            seen = max(seen, len(os.listdir(self.dir)))
            time.sleep(0.01)
        os.remove(self.me)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", np.array([seen], dtype=np.float32))]) for _ in requests]
`

func postFloat(t *testing.T, base, model string, x float32) float32 {
	t.Helper()
	body := fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[1],"datatype":"FP32","data":[%v]}]}`, x)
	resp, err := http.Post(base+"/v2/models/"+model+"/infer", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Outputs []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 {
		t.Fatalf("%s: %d %s %v", model, resp.StatusCode, b, err)
	}
	return out.Outputs[0].Data[0]
}

// TestPythonResponseCacheAndRateLimit runs the real program with
// --cache-config and --rate-limit over python models: a repeated request
// to a model enabling response_cache is answered without executing it
// (its execution counter does not move), and two instances that each need
// the one copy of a resource never execute at the same time.
func TestPythonResponseCacheAndRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "counter", floatConfig+"response_cache { enable: true }\n", "1")
	if err := os.WriteFile(filepath.Join(root, "counter", "1", "model.py"), []byte(counterModel), 0o644); err != nil {
		t.Fatal(err)
	}
	marks := t.TempDir()
	writeConfig(t, root, "busy", strings.Replace(floatConfig, "count: 1 }", `count: 2 rate_limiter { resources [{ name: "CPU_SLOT" count: 1 }] } }`, 1)+
		fmt.Sprintf("parameters { key: \"dir\" value { string_value: %q } }\n", marks), "1")
	if err := os.WriteFile(filepath.Join(root, "busy", "1", "model.py"), []byte(busyModel), 0o644); err != nil {
		t.Fatal(err)
	}
	base, metricsURL, _, logs := startPythonServer(t, false, "busy", "--model-repository", root,
		"--cache-config", "local,size=1048576", "--rate-limit=execution_count")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/v2/models/counter/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter never ready:\n%s", logs.String())
		}
	}
	if n := postFloat(t, base, "counter", 1); n != 1 {
		t.Fatalf("first request: execution %v", n)
	}
	for i := 0; i < 3; i++ {
		if n := postFloat(t, base, "counter", 1); n != 1 {
			t.Fatalf("repeated request ran the model (execution %v):\n%s", n, logs.String())
		}
	}
	if n := postFloat(t, base, "counter", 2); n != 2 {
		t.Fatalf("a new input: execution %v, want 2", n)
	}
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`nv_cache_num_hits_per_model{model="counter",version="1"} 3`, `nv_cache_num_misses_per_model{model="counter",version="1"} 2`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, b)
		}
	}

	var wg sync.WaitGroup
	seen := make([]float32, 6)
	for i := range seen {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			seen[i] = postFloat(t, base, "busy", float32(i))
		}(i)
	}
	wg.Wait()
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("request %d saw %v executions at once with one CPU_SLOT (all: %v)", i, n, seen)
		}
	}
}
