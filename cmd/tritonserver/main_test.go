package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/heapfloor"
)

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &out); err == nil || !strings.Contains(out.String(), "-model-repository") {
		t.Errorf("--help: %v %q", err, out.String())
	}
	for _, args := range [][]string{
		{"--model-repository=/x", "--no-such-flag"},
		{"--model-repository=/x", "--allow-http", "maybe"}, // not a boolean: an unexpected argument
		{"--model-repository=/x", "--log-info=sometimes"},
		{"--model-repository=/x", "--log-format=json"},
		{"--model-repository=/x", "--model-namespacing=true"},
		{"--model-repository=/x", "--model-load-thread-count=0"},
		{},
		{"--model-repository=/x", "--model-control-mode=sometimes"},
		{"--model-repository=/x", "--load-model=m"},
		{"--model-repository=/x", "--backend-config=novalue"},
		{"--model-repository=/x", "--http-port=70000"},
		{"--model-repository=/x", "--http-max-input-size=0"},
		{"--model-repository=/x", "--gc-heap-floor-byte-size=-1"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
	c, err := parseFlags([]string{
		"--model-repository=/a", "-model-repository", "/b", "--http-port", "9000", "--allow-grpc=false",
		"--backend-config=python,shm-default-byte-size=1024", "--backend-config=default-max-batch-size=4",
		"--backend-config=python,default-max-batch-size=8", "--exit-timeout-secs=5", "--id=mine", "--strict-model-config=true",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.repositories, ",") != "/a,/b" || c.httpPort != 9000 || c.allowGRPC || !c.allowHTTP || c.exitTimeout != 5*time.Second ||
		c.id != "mine" || !c.strictModelConfig || c.metricsPort != 8002 || c.grpcPort != 8001 || c.httpMaxInputSize != 64<<20 ||
		c.gcHeapFloor != heapfloor.DefaultBytes {
		t.Errorf("parsed: %+v", c)
	}
	py := c.settingsFor("python")
	if py["shm-default-byte-size"] != "1024" || py["default-max-batch-size"] != "8" || c.settingsFor("pytorch")["default-max-batch-size"] != "4" {
		t.Errorf("backend config: %v", c.backendConfig)
	}
	// The command forms of Triton's images and of KServe's runtime: the
	// program's name first, as `docker run IMAGE tritonserver ...` passes it
	// to an image whose entrypoint is this binary.
	for _, args := range [][]string{
		{"tritonserver", "--model-repository=/m"},
		{"/opt/tritonserver/bin/tritonserver", "--model-repository=/m"},
		{"tritonserver", "--model-store=/m", "--grpc-port=9000", "--http-port=8080", "--allow-grpc=true", "--allow-http=true"},
	} {
		c, err := parseFlags(args, io.Discard)
		if err != nil || strings.Join(c.repositories, ",") != "/m" {
			t.Errorf("%v: %v", args, err)
		}
	}
	if c, err := parseFlags([]string{"tritonserver", "--model-store=/m", "--grpc-port=9000", "--http-port=8080"}, io.Discard); err != nil || c.grpcPort != 9000 || c.httpPort != 8080 {
		t.Errorf("KServe's ports: %+v %v", c, err)
	}
	// Only a leading name is dropped; anywhere else it is an argument.
	if _, err := parseFlags([]string{"--model-repository=/m", "tritonserver"}, io.Discard); err == nil {
		t.Error("a trailing tritonserver was accepted")
	}
	if code := run(context.Background(), []string{"--bogus"}, io.Discard, io.Discard); code == 0 {
		t.Error("unknown flag must exit non-zero")
	}
}

// syncBuffer collects the server log while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var startedRE = regexp.MustCompile(`Started (HTTPService|GRPCInferenceService|Metrics Service) at ([0-9a-f.:\[\]]+)`)

// waitStarted waits until the log holds want "Started SERVICE at ADDR"
// lines and returns the addresses by service name. done, when not nil,
// receives the program's exit status: a server that ends first fails the
// test at once instead of at the deadline.
func waitStarted(t *testing.T, logs *syncBuffer, want int, done <-chan int) map[string]string {
	t.Helper()
	addrs := map[string]string{}
	// Generous: in CI the two cores run other packages' tests meanwhile.
	for deadline := time.Now().Add(120 * time.Second); len(addrs) < want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("server did not start:\n%s", logs.String())
		}
		select {
		case code := <-done:
			t.Fatalf("server exited %d:\n%s", code, logs.String())
		default:
		}
		for _, m := range startedRE.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
	}
	return addrs
}

// waitModelsReady polls each model's ready endpoint on the HTTP base URL
// until it answers 200.
func waitModelsReady(t *testing.T, base string, logs *syncBuffer, models ...string) {
	t.Helper()
	for _, m := range models {
		for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if resp, err := http.Get(base + "/v2/models/" + m + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("model %s never ready:\n%s", m, logs.String())
			}
		}
	}
}

// TestServeWithFailedModel runs the real program: a pytorch model that
// cannot load (its model.pt is not TorchScript) stops a default server,
// and with --exit-on-error=false the server runs, reports the failure and
// shuts down cleanly on cancellation.
func TestServeWithFailedModel(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "broken")
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `platform: "pytorch_libtorch"
max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [2] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }]`
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "model.pt"), []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--model-repository", root, "--http-address=127.0.0.1", "--http-port=0", "--metrics-address=127.0.0.1", "--metrics-port=0", "--allow-grpc=false"}
	var log1 syncBuffer
	if code := run(context.Background(), common, io.Discard, &log1); code != 1 {
		t.Fatalf("exit-on-error: exit %d, log:\n%s", code, log1.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, append(common, "--exit-on-error=false"), io.Discard, &logs) }()
	addrs := waitStarted(t, &logs, 2, done)
	base := "http://" + addrs["HTTPService"]
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(base + "/v2/health/live"); code != 200 {
		t.Errorf("live: %d", code)
	}
	if code, _ := get(base + "/v2/health/ready"); code != 400 {
		t.Errorf("ready with a failed model under strict readiness: %d", code)
	}
	resp, err := http.Post(base+"/v2/repository/index", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var idx []map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&idx)
	resp.Body.Close()
	if len(idx) != 1 || idx[0]["name"] != "broken" || idx[0]["state"] != "UNAVAILABLE" || idx[0]["reason"] == "" {
		t.Errorf("index: %v", idx)
	}
	if code, body := get("http://" + addrs["Metrics Service"] + "/metrics"); code != 200 || !strings.Contains(body, "nv_cpu_memory_total_bytes") {
		t.Errorf("metrics: %d %.200s", code, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("shutdown exit %d:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not shut down")
	}
}

func TestFlagsCacheConfig(t *testing.T) {
	for args, want := range map[string]int64{
		"":                                  0,
		"--cache-config=local,size=1048576": 1048576,
		"--response-cache-byte-size=4096":   4096,
		"--cache-config=local,size=0":       0,
	} {
		a := []string{"--model-repository=/m", "--cache-directory=/opt/tritonserver/caches"}
		if args != "" {
			a = append(a, args)
		}
		c, err := parseFlags(a, io.Discard)
		if err != nil || c.cacheSize != want {
			t.Errorf("%s: size %v, %v; want %d", args, c, err, want)
		}
	}
	// Triton's two-argument spelling.
	c, err := parseFlags([]string{"--model-repository=/m", "--cache-config", "local,size=2048"}, io.Discard)
	if err != nil || c.cacheSize != 2048 {
		t.Errorf("--cache-config local,size=2048: %v", err)
	}
}

func TestFlagsRateLimit(t *testing.T) {
	c, err := parseFlags([]string{"--model-repository=/m", "--rate-limit", "execution_count", "--rate-limit-resource=R1:10", "--rate-limit-resource=R2:5:0"}, io.Discard)
	if err != nil || c.rateLimit != "execution_count" || len(c.rateResources) != 2 {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := parseFlags([]string{"--model-repository=/m"}, io.Discard); err != nil || c.rateLimit != "off" {
		t.Fatalf("default --rate-limit: %v", err)
	}
	_, err = parseFlags([]string{"--model-repository=/m", "--rate-limit=execution_count", "--rate-limit-resource=R1"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "<resource_name>:<count>[:<device>]") {
		t.Fatalf("a resource without a count: %v", err)
	}
}

// TestFlagsHostPolicy: --host-policy=<policy>,cpu-cores=<list> takes the
// kernel's CPU list syntax (in Triton's two-argument spelling too), and
// numa-node one node; one policy's settings add up over several flags, as
// on Triton. The setting this server cannot apply, and malformed values,
// are refused naming the policy and what is wrong.
func TestFlagsHostPolicy(t *testing.T) {
	c, err := parseFlags([]string{"--model-repository=/m", "--host-policy=cpu,cpu-cores=3,0-1,1", "--host-policy", "stubs,cpu-cores=2",
		"--host-policy=numa1,numa-node=1", "--host-policy=numa1,cpu-cores=4-5", "--host-policy=cpu,numa-node=0",
		// Triton's own example (docs/user_guide/optimization.md, "Host Policy").
		"--host-policy=gpu_0,numa-node=0", "--host-policy=gpu_0,cpu-cores=0-15"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]backend.HostPolicy{
		"cpu":   {CPUs: []int{0, 1, 3}, NUMANodes: []int{0}},
		"stubs": {CPUs: []int{2}},
		"numa1": {CPUs: []int{4, 5}, NUMANodes: []int{1}},
		"gpu_0": {CPUs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, NUMANodes: []int{0}},
	} {
		got := c.hostPolicies[name]
		if !slices.Equal(got.CPUs, want.CPUs) || !slices.Equal(got.NUMANodes, want.NUMANodes) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	for arg, want := range map[string]string{
		"cpu,numa-node=":                       "host policy 'cpu': numa-node: '' is not a NUMA node number from 0 to 1023",
		"cpu,numa-node=-1":                     "'-1' is not a NUMA node number",
		"cpu,numa-node=0-1":                    "'0-1' is not a NUMA node number",
		"cpu,numa-node=1024":                   "'1024' is not a NUMA node number from 0 to 1023",
		"cpu,pinned-memory-pool-byte-size=100": "host policy 'cpu': pinned-memory-pool-byte-size is not supported",
		"cpu,cores=1":                          "host policy 'cpu': unknown setting 'cores'",
		"cpu,cpu-cores=":                       "host policy 'cpu': cpu-cores: empty CPU list",
		"cpu,cpu-cores=a":                      "'a' in \"a\" is not a CPU number from 0 to 1023",
		"cpu,cpu-cores=0,-1":                   "'-1' in \"0,-1\" is not a CPU number",
		"cpu,cpu-cores=3-1":                    "'3-1' in \"3-1\" is not a range of CPUs from low to high",
		"cpu,cpu-cores=1024":                   "'1024' in \"1024\" is not a CPU number from 0 to 1023",
		"cpu-cores=1":                          "want <policy>,<setting>=<value>",
	} {
		_, err := parseFlags([]string{"--model-repository=/m", "--host-policy=" + arg}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--host-policy=%s: %v, want an error with %q", arg, err, want)
		}
	}
}

// Triton's <boolean> flags take on/off and a separate value too.
func TestFlagsKeepalivePermitSpellings(t *testing.T) {
	for args, want := range map[string]bool{
		"":                                      false,
		"--grpc-keepalive-permit-without-calls": true,
		"--grpc-keepalive-permit-without-calls=on":   true,
		"--grpc-keepalive-permit-without-calls off":  false,
		"--grpc-keepalive-permit-without-calls true": true,
		"--grpc-keepalive-permit-without-calls=0":    false,
	} {
		a := append([]string{"--model-repository=/m"}, strings.Fields(args)...)
		c, err := parseFlags(a, io.Discard)
		if err != nil || c.grpcLimits.KeepalivePermitWithoutCalls != want {
			t.Errorf("%q: %v, permit %v; want %v", args, err, c != nil && c.grpcLimits.KeepalivePermitWithoutCalls, want)
		}
	}
	if _, err := parseFlags([]string{"--model-repository=/m", "--grpc-keepalive-permit-without-calls=maybe"}, io.Discard); err == nil {
		t.Error("--grpc-keepalive-permit-without-calls=maybe accepted")
	}
}
