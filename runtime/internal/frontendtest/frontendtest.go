// Package frontendtest holds the fixtures the HTTP and gRPC frontends'
// tests share, so that both are tested against the same models: configs
// for the fake backend (and the report's simple_linear for the libtorch
// end-to-end tests), a repository served by the fake backend, and the
// readiness table both frontends must answer alike (Readiness).
package frontendtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/health"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

// Model configurations for the fake backend (see runtime/fake).
const (
	// Linear computes fake.Linear on rows of 4 FP32 values, giving rows of
	// 3, in batches of up to 8; every version directory is served.
	Linear = `
backend: "fake"
max_batch_size: 8
version_policy { all {} }
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
`
	// Ident copies each input to the output of the same position, for
	// data types other than FP32; S, I and B are required, D, U and L
	// optional (an absent input has no output).
	Ident = `
backend: "fake"
max_batch_size: 0
input [
  { name: "S" data_type: TYPE_STRING dims: [-1] },
  { name: "I" data_type: TYPE_INT32 dims: [2, 2] },
  { name: "B" data_type: TYPE_BOOL dims: [2] },
  { name: "D" data_type: TYPE_FP64 dims: [1] optional: true },
  { name: "U" data_type: TYPE_UINT8 dims: [3] optional: true },
  { name: "L" data_type: TYPE_INT64 dims: [1] optional: true }
]
output [
  { name: "S_OUT" data_type: TYPE_STRING dims: [-1] },
  { name: "I_OUT" data_type: TYPE_INT32 dims: [2, 2] },
  { name: "B_OUT" data_type: TYPE_BOOL dims: [2] },
  { name: "D_OUT" data_type: TYPE_FP64 dims: [1] },
  { name: "U_OUT" data_type: TYPE_UINT8 dims: [3] },
  { name: "L_OUT" data_type: TYPE_INT64 dims: [1] }
]
parameters { key: "fake_mode" value { string_value: "identity" } }
`
	// Echo copies one BYTES input of any length to its output, so that a
	// small request can ask for a large response (issue 17's case 1).
	Echo = `
backend: "fake"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_STRING dims: [-1] }]
output [{ name: "OUT" data_type: TYPE_STRING dims: [-1] }]
parameters { key: "fake_mode" value { string_value: "identity" } }
`
	// Repeat is a decoupled model (the fake backend's repeat mode): one
	// response per element of its INT32 input IN, whose OUT is that
	// element, then the final flag alone.
	Repeat = `
backend: "fake"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
parameters { key: "fake_mode" value { string_value: "repeat" } }
`
	// SeqDirect is a stateful model under the sequence batcher's direct
	// strategy (the fake backend's accumulate mode, state per slot): OUT
	// is the sum of the sequence's IN values so far. Sequences idle for
	// 1 s are released: long enough that a loaded machine's pause between
	// two steps of a sequence does not release it, short enough for a test
	// to wait out.
	SeqDirect = `
backend: "fake"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  direct { }
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] }] }
  ]
}
instance_group [{ count: 2 }]
parameters { key: "fake_mode" value { string_value: "accumulate" } }
parameters { key: "fake_delay_us" value { string_value: "300" } }
`
	// SeqOldest is SeqDirect under the oldest strategy, its state kept
	// per correlation id, which it is fed as a STRING CORRID.
	SeqOldest = `
backend: "fake"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 1000 }
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] }
  ]
}
parameters { key: "fake_mode" value { string_value: "accumulate" } }
parameters { key: "fake_delay_us" value { string_value: "300" } }
`
	// Stage2 is a second linear model (rows of 3 to rows of 2), so that
	// Chain can feed it Linear's output.
	Stage2 = `
backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [3] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }]
`
	// Chain is an ensemble of the models named "linear" (Linear) and
	// "stage2" (Stage2): OUT = fake.Linear(fake.Linear(IN, 4, 3), 3, 2),
	// with the intermediate tensor MID also an output.
	Chain = `
platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [2] },
  { name: "MID" data_type: TYPE_FP32 dims: [3] }
]
ensemble_scheduling { step [
  { model_name: "stage2" model_version: -1 input_map { key: "INPUT__0" value: "MID" } output_map { key: "OUTPUT__0" value: "OUT" } },
  { model_name: "linear" model_version: 1 input_map { key: "INPUT__0" value: "IN" } output_map { key: "OUTPUT__0" value: "MID" } }
] }
`
	// Classes is Linear with class labels (ClassLabels) on its output, for
	// the classification extension.
	Classes = `
backend: "fake"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] label_filename: "labels.txt" }]
`
	// ClassLabels is the labels.txt NewRepo writes into every model
	// directory: class 0 is cat, 1 dog, 2 bird.
	ClassLabels = "cat\ndog\nbird\n"
	// Broken is a valid configuration whose instances fail to load, so the
	// model stays UNAVAILABLE.
	Broken = `
backend: "fake"
max_batch_size: 0
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] }]
parameters { key: "fake_fail" value { string_value: "load" } }
`
)

// SimpleLinear is the configuration of the report's simple_linear
// TorchScript model (nn.Linear(10, 5)) for the pytorch backend, without
// batching or instance settings; tests append their own.
func SimpleLinear(maxBatchSize int) string {
	return fmt.Sprintf(`
name: "simple_linear"
platform: "pytorch_libtorch"
max_batch_size: %d
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 10 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 5 ] }]
`, maxBatchSize)
}

// WriteModel writes <root>/<name>/config.pbtxt with cfg and creates the
// version directories.
func WriteModel(tb testing.TB, root, name, cfg string, versions ...string) {
	tb.Helper()
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(root, name, v), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Repo is a temporary model repository served by the fake backend.
type Repo struct {
	Root    string
	Manager *repository.Manager
	Backend *fake.Backend
}

// NewRepo writes models (name -> config, each with versions 1 and 2) to a
// temporary repository and loads them all with the fake backend and a
// strict model config. Models that fail to load stay in the index, as some
// tests want them. Each of tweaks may change the manager's options. The
// manager is closed when the test ends.
func NewRepo(tb testing.TB, models map[string]string, tweaks ...func(*repository.Options)) *Repo {
	tb.Helper()
	root := tb.TempDir()
	for name, cfg := range models {
		WriteModel(tb, root, name, cfg, "1", "2")
		if err := os.WriteFile(filepath.Join(root, name, "labels.txt"), []byte(ClassLabels), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	be := fake.New()
	opts := repository.Options{Repositories: []string{root}, Backends: map[string]backend.Backend{"fake": be}, StrictModelConfig: true}
	for _, tw := range tweaks {
		tw(&opts)
	}
	mgr, err := repository.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	_ = mgr.LoadAll(context.Background())
	tb.Cleanup(func() { _ = mgr.Close(context.Background()) })
	return &Repo{Root: root, Manager: mgr, Backend: be}
}

// BytesElems encodes n BYTES elements of size bytes each ('x'), the
// length-prefixed tensor encoding.
func BytesElems(n, size int) []byte {
	b := make([]byte, 0, n*(4+size))
	for i := 0; i < n; i++ {
		b = binary.LittleEndian.AppendUint32(b, uint32(size))
		for k := 0; k < size; k++ {
			b = append(b, 'x')
		}
	}
	return b
}

// F32Bytes encodes v as tensor data (little-endian FP32).
func F32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// ReadinessCase is one row of the readiness table: a server state and what
// both frontends must answer for it.
type ReadinessCase struct {
	Name     string
	Models   map[string]string // served as by NewRepo
	Unload   []string          // models unloaded explicitly after loading
	Strict   bool              // --strict-readiness
	Draining bool              // the server is shutting down
	// Live and Ready are the expected answers: HTTP 200 or 400 on
	// /v2/health/live and /v2/health/ready, true or false from gRPC
	// ServerLive and ServerReady.
	Live, Ready bool
}

// Readiness is the table both frontends are tested against: Triton's
// meaning of ready (live and accepting requests, and with strict readiness
// every model ready; explicitly unloaded models do not count).
func Readiness() []ReadinessCase {
	ok := map[string]string{"linear": Linear}
	failed := map[string]string{"linear": Linear, "broken": Broken}
	return []ReadinessCase{
		{Name: "strict, every model ready", Models: ok, Strict: true, Live: true, Ready: true},
		{Name: "strict, no models", Models: map[string]string{}, Strict: true, Live: true, Ready: true},
		{Name: "strict, a model failed to load", Models: failed, Strict: true, Live: true, Ready: false},
		{Name: "relaxed, a model failed to load", Models: failed, Strict: false, Live: true, Ready: true},
		{Name: "strict, a model unloaded", Models: map[string]string{"linear": Linear, "ident": Ident}, Unload: []string{"ident"}, Strict: true, Live: true, Ready: true},
		{Name: "strict, draining", Models: ok, Strict: true, Draining: true, Live: true, Ready: false},
		{Name: "relaxed, draining", Models: failed, Strict: false, Draining: true, Live: true, Ready: false},
	}
}

// Setup builds the case's repository and the health state a frontend
// reports.
func (c ReadinessCase) Setup(tb testing.TB) (*Repo, *health.State) {
	tb.Helper()
	repo := NewRepo(tb, c.Models)
	for _, name := range c.Unload {
		if err := repo.Manager.Unload(context.Background(), name); err != nil {
			tb.Fatal(err)
		}
	}
	hs := health.New(repo.Manager, c.Strict)
	if c.Draining {
		hs.Drain()
	}
	return repo, hs
}
