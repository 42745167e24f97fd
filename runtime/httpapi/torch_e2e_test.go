//go:build cgo && libtorch

package httpapi

// End-to-end test of the report's simple_linear model as a pytorch model
// served over HTTP by the real libtorch backend. It needs libtbtorch.so at
// link time (see runtime/torch) and /usr/bin/python3 with torch to write the
// model and compute reference outputs; TBTORCH_PYTHON overrides the
// interpreter.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/torchtest"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
)

func TestTorchSimpleLinearEndToEnd(t *testing.T) {
	py, root, modelPath := torchtest.Repository(t, frontendtest.SimpleLinear(32)+`
dynamic_batching { preferred_batch_size: [ 4, 8, 16 ] max_queue_delay_microseconds: 1000 }
instance_group [{ kind: KIND_CPU count: 2 }]
`)
	e := torchEnv(t, root, false)

	x := make([][]float32, 2)
	for r := range x {
		x[r] = make([]float32, 10)
		for c := range x[r] {
			x[r][c] = float32(r*10+c)*0.1 - 0.7
		}
	}
	xj, _ := json.Marshal(x)
	want, err := torchtest.Reference(t.Context(), py, modelPath, x)
	if err != nil {
		t.Fatalf("reference forward: %v", err)
	}
	if len(want) != 10 {
		t.Fatalf("reference output has %d values, want 10", len(want))
	}
	check := func(kind string, got []float32) { closeToTorch(t, kind, got, want) }

	// JSON in, JSON out.
	body := fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[2,10],"datatype":"FP32","data":%s}]}`, xj)
	r, b := e.do(t, "POST", "/v2/models/simple_linear/infer", []byte(body), nil)
	if r.StatusCode != 200 {
		t.Fatalf("JSON infer: %d %s", r.StatusCode, b)
	}
	shape, got := jsonOutput(t, b)
	if shape != "[2 5]" {
		t.Errorf("shape %v", shape)
	}
	check("json", got)

	// Binary in, binary out.
	var flat []float32
	for _, row := range x {
		flat = append(flat, row...)
	}
	hdr := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[2,10],"datatype":"FP32","parameters":{"binary_data_size":80}}]}`
	bb, h := binaryBody(hdr, frontendtest.F32Bytes(flat))
	r, b = e.do(t, "POST", "/v2/models/simple_linear/infer", bb, h)
	if r.StatusCode != 200 {
		t.Fatalf("binary infer: %d %s", r.StatusCode, b)
	}
	hl, _ := strconv.Atoi(r.Header.Get(HeaderLength))
	if hl <= 0 || hl > len(b) || !bytes.Contains(b[:hl], []byte(`"binary_data_size":40`)) {
		t.Fatalf("binary response header: %q", b)
	}
	got = got[:0]
	for i := hl; i+4 <= len(b); i += 4 {
		got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	check("binary", got)
}

// TestTorchReportShapeWithoutBatching: the report's client sends [2,10] to a
// max_batch_size 0 model declaring dims [10]. The pytorch backend runs it as
// sent (forward() takes the rows), unless the server is strict about shapes
// as Triton is.
func TestTorchReportShapeWithoutBatching(t *testing.T) {
	py, root, modelPath := torchtest.Repository(t, frontendtest.SimpleLinear(0))
	x := [][]float32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, -1, 2, -3, 4, -5, 6, -7, 8, -9}}
	want, err := torchtest.Reference(t.Context(), py, modelPath, x)
	if err != nil {
		t.Fatalf("reference forward: %v", err)
	}
	xj, _ := json.Marshal(x)
	body := fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[2,10],"datatype":"FP32","data":%s}]}`, xj)
	for _, strict := range []bool{false, true} {
		r, b := torchEnv(t, root, strict).do(t, "POST", "/v2/models/simple_linear/infer", []byte(body), nil)
		if strict {
			if r.StatusCode != 400 {
				t.Fatalf("strict: status %d %s, want 400", r.StatusCode, b)
			}
			continue
		}
		if r.StatusCode != 200 {
			t.Fatalf("status %d %s", r.StatusCode, b)
		}
		shape, got := jsonOutput(t, b)
		if shape != "[2 5]" {
			t.Fatalf("output shape %v", shape)
		}
		closeToTorch(t, "json", got, want)
	}
}

// torchEnv serves the repository root with the real libtorch backend until
// the test ends.
func torchEnv(t *testing.T, root string, strictShapes bool) *env {
	t.Helper()
	mgr, err := repository.New(repository.Options{
		Repositories: []string{root}, StrictModelConfig: true, StrictInputShapes: strictShapes,
		Backends: map[string]backend.Backend{"pytorch": torch.New(torch.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.Close(context.Background()) })
	if err := mgr.LoadAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Manager: mgr}))
	t.Cleanup(srv.Close)
	return &env{srv: srv, mgr: mgr}
}

// jsonOutput decodes the first output of a JSON infer response: its shape
// (as fmt prints it) and its values.
func jsonOutput(t *testing.T, b []byte) (string, []float32) {
	t.Helper()
	var resp inferResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	var got []float32
	if err := json.Unmarshal(resp.Outputs[0].Data, &got); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(resp.Outputs[0].Shape), got
}

// closeToTorch compares outputs with torch's own forward within 1e-6.
func closeToTorch(t *testing.T, kind string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", kind, len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Errorf("%s: value %d = %v, torch says %v", kind, i, got[i], want[i])
		}
	}
}
