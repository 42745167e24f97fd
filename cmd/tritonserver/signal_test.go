package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// sleepModel is a python-backend model that takes 400 ms per execution and
// doubles its input.
const sleepModel = `
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.4)
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT__0", x * 2)]))
        return out
`

const sleepConfig = `
backend: "python"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [1, 4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1, 4] }]
instance_group [{ kind: KIND_CPU count: 2 }]
`

// TestSIGTERMDrainsInFlight runs the built tritonserver binary with a
// python model, sends SIGTERM while HTTP and GRPC requests are queued and
// executing, and checks that every request is answered and the process
// exits with status 0.
func TestSIGTERMDrainsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts python stubs")
	}
	testenv.NeedPython(t, "/usr/bin/python3", "numpy")
	root := t.TempDir()
	writeConfig(t, root, "sleepy", sleepConfig, "1")
	if err := os.WriteFile(filepath.Join(root, "sleepy", "1", "model.py"), []byte(sleepModel), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startBinary(t, 0, "--model-repository", root)
	a := srv.addrs

	conn, err := grpc.NewClient(a["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	const perProtocol = 3 // 6 requests, 2 instances, 400 ms each: 1.2 s of work
	errs := make(chan error, 2*perProtocol)
	var wg sync.WaitGroup
	for i := 0; i < perProtocol; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			resp, err := client.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "sleepy",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 4}}},
				RawInputContents: [][]byte{rowBytes()}})
			if err == nil && len(resp.GetRawOutputContents()) != 1 {
				err = fmt.Errorf("GRPC response without output: %v", resp)
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			hdr := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
			req, _ := http.NewRequest("POST", "http://"+a["HTTPService"]+"/v2/models/sleepy/infer", bytes.NewReader(append([]byte(hdr), rowBytes()...)))
			req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(len(hdr)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
			}
			errs <- err
		}()
	}
	s := &testServer{addrs: a}
	for deadline := time.Now().Add(20 * time.Second); pendingGaugeOf(t, s, "sleepy") != 2*perProtocol-2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("requests never all reached the server")
		}
	}
	srv.signal(t, syscall.SIGTERM)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("request in flight at SIGTERM failed: %v", err)
		}
	}
	if code := srv.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
