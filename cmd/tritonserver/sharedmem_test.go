package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// shmWriterEnv makes the test binary the second process of the shared
// memory tests: it creates the POSIX shared memory object named by the
// variable and writes the little-endian FP32 values after it, as
// tritonclient's utils.shared_memory does (shm_open, ftruncate, mmap).
const shmWriterEnv = "TRITONBUILD_TEST_SHM_WRITER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(shmWriterEnv); spec != "" {
		if err := writeShm(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeBinary()
	os.Exit(code)
}

// writeShm handles "KEY SIZE V1 V2 ...".
func writeShm(spec string) error {
	f := strings.Fields(spec)
	size, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	fd, err := unix.Open("/dev/shm/"+strings.TrimPrefix(f[0], "/"), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	for i, s := range f[2:] {
		v, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(mem[4*i:], math.Float32bits(float32(v)))
	}
	return nil
}

// shmObject has a second process create the object key holding x.
func shmObject(t *testing.T, key string, size int, x []float32) {
	t.Helper()
	spec := []string{key, strconv.Itoa(size)}
	for _, v := range x {
		spec = append(spec, strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", key)) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shmWriterEnv+"="+strings.Join(spec, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shared memory writer: %v\n%s", err, out)
	}
}

func readShmFloats(t *testing.T, key string, offset, n int) []float32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/dev/shm", key))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[offset+4*i:]))
	}
	return out
}

// TestSystemSharedMemory follows the extension document on the running
// program: another process creates and fills regions, the client
// registers them, infers with inputs and outputs in them over HTTP and
// gRPC, reads the status, and unregisters.
func TestSystemSharedMemory(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm on this machine")
	}
	root := t.TempDir()
	writeFakeModel(t, root, "a") // max_batch_size 4, INPUT__0 [4] -> OUTPUT__0 [3]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--allow-client-shm=true")
	base := "http://" + s.addrs["HTTPService"]
	tag := strconv.Itoa(os.Getpid())
	x := []float32{1, 2, 3, 4, -1, 0.5, 0.25, 8}
	want := fake.Linear(x, 4, 3)
	inKey, outKey := "/tb_in_"+tag, "/tb_out_"+tag
	shmObject(t, inKey, 4096, x)
	shmObject(t, outKey, 4096, nil)

	for _, reg := range []string{
		`POST /v2/systemsharedmemory/region/input_data/register {"key":"` + inKey + `","offset":0,"byte_size":32}`,
		`POST /v2/systemsharedmemory/region/output_data/register {"key":"` + outKey + `","offset":0,"byte_size":128}`,
	} {
		f := strings.SplitN(reg, " ", 3)
		if code, body := post(t, base+f[1], f[2]); code != 200 {
			t.Fatalf("%s: %d %s", f[1], code, body)
		}
	}
	if code, body := post(t, base+"/v2/systemsharedmemory/region/input_data/register", `{"key":"`+inKey+`","byte_size":32}`); code != 400 || !strings.Contains(body, "already in manager") {
		t.Errorf("second registration: %d %s", code, body)
	}
	req := `{"inputs":[{"name":"INPUT__0","shape":[2,4],"datatype":"FP32","parameters":{"shared_memory_region":"input_data","shared_memory_byte_size":32}}],
	"outputs":[{"name":"OUTPUT__0","parameters":{"shared_memory_region":"output_data","shared_memory_offset":16,"shared_memory_byte_size":24}}]}`
	code, body := post(t, base+"/v2/models/a/infer", req)
	if code != 200 || strings.Contains(body, `"data"`) || !strings.Contains(body, `"parameters":{"shared_memory_region":"output_data","shared_memory_offset":16,"shared_memory_byte_size":24}`) {
		t.Fatalf("HTTP infer through shared memory: %d %s", code, body)
	}
	if got := readShmFloats(t, outKey, 16, 6); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HTTP output in shared memory: %v, want %v", got, want)
	}
	small := strings.Replace(req, `"shared_memory_byte_size":24`, `"shared_memory_byte_size":20`, 1)
	if code, body := post(t, base+"/v2/models/a/infer", small); code != 400 || !strings.Contains(body, "should be at least 24 bytes to hold the results") {
		t.Errorf("output region too small: %d %s", code, body)
	}

	// gRPC: the same regions, output at another offset.
	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	str := func(v string) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
	}
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	resp, err := client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "a",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{2, 4},
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("input_data"), "shared_memory_byte_size": i64(32)}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__0",
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("output_data"), "shared_memory_offset": i64(64), "shared_memory_byte_size": i64(24)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readShmFloats(t, outKey, 64, 6); fmt.Sprint(got) != fmt.Sprint(want) || len(resp.GetRawOutputContents()[0]) != 0 ||
		resp.GetOutputs()[0].GetParameters()["shared_memory_byte_size"].GetInt64Param() != 24 {
		t.Errorf("gRPC output in shared memory: %v (want %v), response %v", got, want, resp)
	}
	st, err := client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.GetRegions()) != 2 || st.GetRegions()["input_data"].GetKey() != inKey || st.GetRegions()["output_data"].GetByteSize() != 128 {
		t.Errorf("gRPC status: %v %v", st, err)
	}
	resp2, err := http.Get(base + "/v2/systemsharedmemory/region/input_data/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	var hs []map[string]any
	if json.Unmarshal(b, &hs) != nil || len(hs) != 1 || hs[0]["name"] != "input_data" || hs[0]["key"] != inKey || hs[0]["byte_size"] != float64(32) {
		t.Errorf("HTTP region status: %s", b)
	}
	if _, err := client.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "input_data"}); err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, base+"/v2/models/a/infer", req); code != 404 || !strings.Contains(body, "Unable to find shared memory region: 'input_data'") {
		t.Errorf("infer after unregister: %d %s", code, body)
	}
	if code, _ := post(t, base+"/v2/systemsharedmemory/unregister", ""); code != 200 {
		t.Errorf("unregister all: %d", code)
	}
	if code, body := post(t, base+"/v2/cudasharedmemory/region/gpu0/register", `{"raw_handle":{"b64":"AAAA"},"device_id":0,"byte_size":16}`); code != 400 || !strings.Contains(body, "not supported on this server") {
		t.Errorf("CUDA register: %d %s", code, body)
	}
	if _, err := client.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{Name: "gpu0"}); err == nil || !strings.Contains(err.Error(), "GPUs not supported") {
		t.Errorf("gRPC CUDA register: %v", err)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}

// TestSharedMemoryNeedsAllowFlag: without --allow-client-shm (Triton's
// default) a registration is refused, saying how to allow it.
func TestSharedMemoryNeedsAllowFlag(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root)
	base := "http://" + s.addrs["HTTPService"]
	if code, body := post(t, base+"/v2/systemsharedmemory/region/r/register", `{"key":"/k","byte_size":4}`); code != 503 || !strings.Contains(body, "--allow-client-shm=true") {
		t.Errorf("register without the flag: %d %s", code, body)
	}
	cancel()
	<-s.done
}
