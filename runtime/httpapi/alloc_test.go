package httpapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// discardWriter is a ResponseWriter that keeps nothing between requests
// but what it is told to check, so that counting allocations counts the
// server's and not the recorder's. It takes read deadlines as a
// connection does.
type discardWriter struct {
	h      http.Header
	code   int
	body   bytes.Buffer
	writes int
}

func (w *discardWriter) Header() http.Header             { return w.h }
func (w *discardWriter) WriteHeader(code int)            { w.code = code }
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }
func (w *discardWriter) Write(b []byte) (int, error)     { w.writes++; return w.body.Write(b) }
func (w *discardWriter) reset()                          { clear(w.h); w.code = 0; w.body.Reset(); w.writes = 0 }
func (w *discardWriter) status() int                     { return max(w.code, http.StatusOK) }

// binaryInfer returns a func sending model the same one-row binary infer
// request through h each time (failing t unless the answer is 200), with
// the writer it answers into; request, body and writer are reused, so
// that counting allocations counts only the server's.
func binaryInfer(t testing.TB, h http.Handler, model string) (func(), *discardWriter) {
	return binaryInferWith(t, h, model, nil)
}

// binaryInferWith is binaryInfer with extra request headers.
func binaryInferWith(t testing.TB, h http.Handler, model string, hdr map[string]string) (func(), *discardWriter) {
	return binaryInferEncoded(t, h, model, hdr, func(b []byte) []byte { return b })
}

// binaryInferEncoded is binaryInferWith with the request body passed
// through encode (a compressor, with the matching Content-Encoding in hdr).
func binaryInferEncoded(t testing.TB, h http.Handler, model string, hdr map[string]string, encode func([]byte) []byte) (func(), *discardWriter) {
	j := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	body := encode(append([]byte(j), frontendtest.F32Bytes(inputRows(1, 0.5))...))
	req := httptest.NewRequest("POST", "/v2/models/"+model+"/infer", nil)
	req.Header.Set(HeaderLength, strconv.Itoa(len(j)))
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	rc := io.NopCloser(rd)
	w := &discardWriter{h: http.Header{}}
	return func() {
		rd.Reset(body)
		req.Body = rc
		w.reset()
		h.ServeHTTP(w, req)
		if w.status() != http.StatusOK {
			t.Fatalf("status %d: %s", w.status(), w.body.Bytes())
		}
	}, w
}

// TestInferAllocations bounds the Go objects one binary infer request
// allocates in the frontend, the repository and the scheduler (the fake
// backend's own included): each is garbage the serving path makes per
// request, which at concurrency 64 costs the collector's time on the
// same cores.
func TestInferAllocations(t *testing.T) {
	testenv.SkipAllocCountUnderRace(t)
	h := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0).srv.Config.Handler
	run, w := binaryInfer(t, h, "linear")
	run()
	if w.writes != 1 {
		t.Errorf("the response took %d writes, want 1 (a small binary output goes out with its JSON part)", w.writes)
	}
	allocs := testing.AllocsPerRun(500, run)
	t.Logf("%.1f allocations per binary infer request", allocs)
	// The fake backend's response, outputs, shape and data (6), the
	// decoded request with its input's shape and binary size (1; the
	// name and data type are the model's and the constants' strings),
	// the response headers' values (1) and the two lengths spelled in
	// them (1). It was 25 before the decoded request, the body's readers
	// and the header values took one object each, 14 before the input's
	// name, shape and size came without allocating, 11 before infer
	// requests were routed without the mux's path values, 10 before the
	// lengths shared a string.
	const want = 9
	if allocs > want {
		t.Fatalf("a binary infer request allocates %.1f Go objects, want at most %d", allocs, want)
	}
}

// BenchmarkInferParallel runs binary infer requests from 64 goroutines
// straight into the handler (no network) against a 2-instance fake model
// with the report's tuned dynamic batching: the frontend's, the
// repository's and the scheduler's CPU per request under concurrency.
func BenchmarkInferParallel(b *testing.B) {
	cfg := strings.Replace(frontendtest.Linear, "max_batch_size: 8", "max_batch_size: 32", 1) + `
dynamic_batching { preferred_batch_size: [4, 8, 16] max_queue_delay_microseconds: 1000 }
instance_group [{ kind: KIND_CPU count: 2 }]
`
	e := newEnv(b, map[string]string{"linear": cfg}, 0)
	h := e.srv.Config.Handler
	j := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	body := append([]byte(j), frontendtest.F32Bytes(inputRows(1, 0.5))...)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		if m, err := e.mgr.Get("linear", -1); err == nil {
			st := m.Scheduler.Stats()
			b.ReportMetric(float64(st.InferenceCount)/float64(max(st.ExecutionCount, 1)), "rows/exec")
		}
	}()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("POST", "/v2/models/linear/infer", nil)
		req.Header.Set(HeaderLength, strconv.Itoa(len(j)))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.ContentLength = int64(len(body))
		rd := bytes.NewReader(body)
		rc := io.NopCloser(rd)
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			rd.Reset(body)
			req.Body = rc
			w.reset()
			h.ServeHTTP(w, req)
			if w.status() != http.StatusOK {
				b.Errorf("status %d: %s", w.status(), w.body.Bytes())
				return
			}
		}
	})
}

// processCPU is the CPU time the process has used: unlike the wall time
// per request, it does not move when other processes take the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCompressedResponseBytes bounds what a response compressed for a
// client that accepts gzip or deflate allocates: the writers are reused,
// where a new one each time set up about 800 KB of deflate state per
// response (Go's HTTP client accepts gzip unless told otherwise).
func TestCompressedResponseBytes(t *testing.T) {
	testenv.SkipAllocCountUnderRace(t)
	h := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0).srv.Config.Handler
	for _, enc := range []string{"gzip", "deflate"} {
		run, w := binaryInferWith(t, h, "linear", map[string]string{"Accept-Encoding": enc})
		run()
		if got := w.h.Get("Content-Encoding"); got != enc {
			t.Fatalf("Accept-Encoding %s: Content-Encoding %q", enc, got)
		}
		per := bytesPerRun(run)
		t.Logf("%s: %d bytes allocated per response", enc, per)
		if per > 32<<10 {
			t.Errorf("a %s response allocates %d bytes, want at most 32 KiB", enc, per)
		}
	}
}

// TestCompressedRequestBytes bounds what a compressed request body costs
// to decode: a new gzip, zlib or flate reader sets up a 32 KiB window and
// its tables (about 40 KB a request before the decoders were pooled).
func TestCompressedRequestBytes(t *testing.T) {
	testenv.SkipAllocCountUnderRace(t)
	h := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0).srv.Config.Handler
	compress := func(newWriter func(io.Writer) io.WriteCloser) func([]byte) []byte {
		return func(b []byte) []byte {
			var buf bytes.Buffer
			zw := newWriter(&buf)
			if _, err := zw.Write(b); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
	}
	cases := []struct {
		name, enc string
		w         func(io.Writer) io.WriteCloser
	}{
		{"gzip", "gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
		{"zlib", "deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
		{"raw deflate", "deflate", func(w io.Writer) io.WriteCloser {
			fw, _ := flate.NewWriter(w, flate.BestSpeed)
			return fw
		}},
	}
	for _, c := range cases {
		run, _ := binaryInferEncoded(t, h, "linear", map[string]string{"Content-Encoding": c.enc}, compress(c.w))
		run() // the response's status is checked on every run
		per := bytesPerRun(run)
		t.Logf("%s: %d bytes allocated per request", c.name, per)
		if per > 8<<10 {
			t.Errorf("a %s request allocates %d bytes, want at most 8 KiB", c.name, per)
		}
	}
}

// bytesPerRun is what one run allocates on the heap, over 1000 runs: a
// collection may empty a pool the code draws on, and one new object is
// then amortized.
func bytesPerRun(run func()) uint64 {
	const n = 1000
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		run()
	}
	runtime.ReadMemStats(&m1)
	return (m1.TotalAlloc - m0.TotalAlloc) / n
}
