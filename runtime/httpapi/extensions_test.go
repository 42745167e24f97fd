package httpapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/fake"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
)

// topK is the test's own reading of the classification extension: the k
// largest values of row with their indices, as "value:index:label".
func topK(row []float32, k int, labels []string) []string {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
	var out []string
	for _, i := range idx[:k] {
		out = append(out, fmt.Sprintf("%f:%d:%s", row[i], i, labels[i]))
	}
	return out
}

// TestClassificationHTTP sends the extension document's request shape
// (outputs[].parameters.classification) and reads back Triton's strings.
func TestClassificationHTTP(t *testing.T) {
	e := newEnv(t, map[string]string{"classes": frontendtest.Classes}, 0)
	x := inputRows(2, 0.5)
	y := fake.Linear(x, 4, 3)
	labels := strings.Split(strings.TrimSpace(frontendtest.ClassLabels), "\n")
	body, _ := json.Marshal(map[string]any{
		"id":      "42",
		"inputs":  []any{map[string]any{"name": "INPUT__0", "shape": []int{2, 4}, "datatype": "FP32", "data": x}},
		"outputs": []any{map[string]any{"name": "OUTPUT__0", "parameters": map[string]any{"classification": 2}}},
	})
	resp, b := e.do(t, "POST", "/v2/models/classes/infer", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var got struct {
		ID      string
		Outputs []struct {
			Name, Datatype string
			Shape          []int64
			Data           []string
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := append(topK(y[:3], 2, labels), topK(y[3:], 2, labels)...)
	o := got.Outputs[0]
	if got.ID != "42" || o.Name != "OUTPUT__0" || o.Datatype != "BYTES" || fmt.Sprint(o.Shape) != "[2 2]" || strings.Join(o.Data, " ") != strings.Join(want, " ") {
		t.Errorf("classification: %s, want data %q", b, want)
	}

	// As binary data: the same strings, length-prefixed.
	body, _ = json.Marshal(map[string]any{
		"inputs":  []any{map[string]any{"name": "INPUT__0", "shape": []int{1, 4}, "datatype": "FP32", "data": x[:4]}},
		"outputs": []any{map[string]any{"name": "OUTPUT__0", "parameters": map[string]any{"classification": 5, "binary_data": true}}},
	})
	resp, b = e.do(t, "POST", "/v2/models/classes/infer", body, nil)
	n, _ := strconv.Atoi(resp.Header.Get(HeaderLength))
	if resp.StatusCode != 200 || n <= 0 || n > len(b) {
		t.Fatalf("binary classification: %d %s", resp.StatusCode, b)
	}
	var strs []string
	for tail := b[n:]; len(tail) >= 4; {
		l := binary.LittleEndian.Uint32(tail)
		strs = append(strs, string(tail[4:4+l]))
		tail = tail[4+l:]
	}
	if want := topK(y[:3], 3, labels); strings.Join(strs, " ") != strings.Join(want, " ") || !strings.Contains(string(b[:n]), `"shape":[1,3]`) {
		t.Errorf("binary classification (count 5 of 3 classes): %q, header %s; want %q", strs, b[:n], want)
	}

	// A BYTES output has no classification.
	e2 := newEnv(t, map[string]string{"ident": frontendtest.Ident}, 0)
	body = []byte(`{"inputs":[{"name":"S","shape":[1],"datatype":"BYTES","data":["a"]},{"name":"I","shape":[2,2],"datatype":"INT32","data":[1,2,3,4]},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}],"outputs":[{"name":"S_OUT","parameters":{"classification":1}}]}`)
	if resp, b := e2.do(t, "POST", "/v2/models/ident/infer", body, nil); resp.StatusCode != 400 || !strings.Contains(string(b), "class result not available for output 'S_OUT' due to unsupported type 'BYTES'") {
		t.Errorf("classification of BYTES: %d %s", resp.StatusCode, b)
	}
	// Integer outputs print as integers.
	body = []byte(`{"inputs":[{"name":"S","shape":[1],"datatype":"BYTES","data":["a"]},{"name":"I","shape":[2,2],"datatype":"INT32","data":[7,-2,9,9]},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}],"outputs":[{"name":"I_OUT","parameters":{"classification":3}}]}`)
	resp, b = e2.do(t, "POST", "/v2/models/ident/infer", body, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"data":["9:2","9:3","7:0"]`) {
		t.Errorf("INT32 classification (ties by index, no labels): %d %s", resp.StatusCode, b)
	}
}

// TestRawBinaryRequest sends a bare tensor with Inference-Header-Content-
// Length 0, as the binary data extension's raw request describes.
func TestRawBinaryRequest(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear, "ident": frontendtest.Ident}, 0)
	x := inputRows(1, 2)
	resp, b := e.do(t, "POST", "/v2/models/linear/infer", frontendtest.F32Bytes(x), map[string]string{HeaderLength: "0", "Content-Type": "application/octet-stream"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	n, _ := strconv.Atoi(resp.Header.Get(HeaderLength))
	if n <= 0 || !strings.Contains(string(b[:n]), `"shape":[1,3]`) || !strings.Contains(string(b[:n]), `"binary_data_size":12`) {
		t.Fatalf("raw response header: %q", b[:max(n, 0)])
	}
	want := fake.Linear(x, 4, 3)
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[n+4*i:])); got != w {
			t.Errorf("output %d = %v, want %v", i, got, w)
		}
	}
	if resp, b := e.do(t, "POST", "/v2/models/ident/infer", []byte("abc"), map[string]string{HeaderLength: "0"}); resp.StatusCode != 400 ||
		!strings.Contains(string(b), "Raw request must only have 1 input (found 1) to be deduced but got 6 inputs in 'ident' model configuration") {
		t.Errorf("raw request to a 6-input model: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do(t, "POST", "/v2/models/linear/infer", make([]byte, 20), map[string]string{HeaderLength: "0"}); resp.StatusCode != 400 || !strings.Contains(string(b), "input byte size mismatch for input 'INPUT__0' for model 'linear'. Expected 16, got 20") {
		t.Errorf("raw request of the wrong size: %d %s", resp.StatusCode, b)
	}
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return buf.Bytes()
}

// TestCorruptCompressedBodies: a body that is not what its
// Content-Encoding says is refused 400, and the decoder it failed in,
// back in its pool, decodes the next body right.
func TestCorruptCompressedBodies(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	plain := []byte(`{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	_, want := e.do(t, "POST", "/v2/models/linear/infer", plain, nil)
	var zl bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write(plain)
	zw.Close()
	good := gz(t, plain)
	for _, c := range []struct {
		enc       string
		bad, good []byte
	}{
		{"gzip", []byte("not gzip at all, just text"), good},
		{"gzip", good[:len(good)/2], good},                      // cut short
		{"deflate", zl.Bytes()[:len(zl.Bytes())-6], zl.Bytes()}, // no checksum
		{"deflate", []byte{0x78, 0x9c, 0xff, 0xff, 0xff}, zl.Bytes()},
	} {
		for range 3 { // a pool of one decoder or a few: each reused after failing
			r, b := e.do(t, "POST", "/v2/models/linear/infer", c.bad, map[string]string{"Content-Encoding": c.enc})
			// A bad header fails at once ("decoding the gzip request body:
			// gzip: invalid header"), a bad stream while it is read
			// ("decoding the gzip request body: unexpected EOF"): either
			// way the answer names the encoding.
			if r.StatusCode != 400 || !strings.Contains(string(b), "decoding the "+c.enc+" request body: ") {
				t.Errorf("corrupt %s body %q: %d %s", c.enc, c.bad, r.StatusCode, b)
			}
			if r, b := e.do(t, "POST", "/v2/models/linear/infer", c.good, map[string]string{"Content-Encoding": c.enc}); r.StatusCode != 200 || !bytes.Equal(b, want) {
				t.Errorf("%s body after a corrupt one: %d %s", c.enc, r.StatusCode, b)
			}
		}
	}
}

// TestCompressedRequestsAndResponses: gzip and deflate (zlib, as
// tritonclient sends it, or bare) bodies are read; Accept-Encoding gets a
// compressed answer whose header length still counts the inflated JSON.
func TestCompressedRequestsAndResponses(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	x := inputRows(2, 1)
	plain := []byte(fmt.Sprintf(`{"inputs":[{"name":"INPUT__0","shape":[2,4],"datatype":"FP32","data":%s}]}`, mustJSON(x)))
	var zl, fl bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write(plain)
	zw.Close()
	fw, _ := flate.NewWriter(&fl, flate.BestCompression)
	fw.Write(plain)
	fw.Close()
	_, want := e.do(t, "POST", "/v2/models/linear/infer", plain, nil)
	for enc, body := range map[string][]byte{"gzip": gz(t, plain), "deflate": zl.Bytes(), "Deflate": fl.Bytes()} {
		resp, b := e.do(t, "POST", "/v2/models/linear/infer", body, map[string]string{"Content-Encoding": enc})
		if resp.StatusCode != 200 || !bytes.Equal(b, want) {
			t.Errorf("Content-Encoding %s: %d %s", enc, resp.StatusCode, b)
		}
	}

	// Binary outputs, gzip accepted: the client inflates, then splits.
	req := []byte(`{"parameters":{"binary_data_output":true},` + string(plain[1:]))
	for _, accept := range []string{"gzip", "deflate;q=1, gzip;q=0"} {
		hreq, _ := http.NewRequest("POST", e.srv.URL+"/v2/models/linear/infer", bytes.NewReader(req))
		hreq.Header.Set("Accept-Encoding", accept)
		resp, err := http.DefaultTransport.RoundTrip(hreq) // no transparent decompression
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var zr io.Reader
		switch resp.Header.Get("Content-Encoding") {
		case "gzip":
			zr, err = gzip.NewReader(bytes.NewReader(raw))
		case "deflate":
			zr, err = zlib.NewReader(bytes.NewReader(raw))
		default:
			t.Fatalf("Accept-Encoding %q: response Content-Encoding %q", accept, resp.Header.Get("Content-Encoding"))
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(resp.Header.Get(HeaderLength))
		if cl, _ := strconv.Atoi(resp.Header.Get("Content-Length")); cl != len(raw) || n <= 0 || len(body) != n+24 {
			t.Fatalf("Accept-Encoding %q: Content-Length %d for %d bytes, header %d of %d inflated", accept, cl, len(raw), n, len(body))
		}
		y := fake.Linear(x, 4, 3)
		for i, w := range y {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(body[n+4*i:])); got != w {
				t.Errorf("Accept-Encoding %q: output %d = %v, want %v", accept, i, got, w)
			}
		}
	}
}

// TestCompressionBomb: the size limit applies to inflated bytes, and
// inflating stops at the limit: a 1 KiB-per-MiB bomb is refused after
// reading a small part of it.
func TestCompressionBomb(t *testing.T) {
	const limit = 1 << 20
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, limit)
	bomb := gz(t, make([]byte, 64<<20))
	if len(bomb) > 256<<10 {
		t.Fatalf("bomb of %d bytes is not small", len(bomb))
	}
	resp, b := e.do(t, "POST", "/v2/models/linear/infer", bomb, map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != 413 || !strings.Contains(string(b), "exceeds") {
		t.Errorf("bomb: %d %s", resp.StatusCode, b)
	}
	// Reading through the frontend's own decoding consumes only what the
	// limit needs of the compressed stream.
	cr := &countingReader{r: bytes.NewReader(bomb)}
	srv := New(Options{Manager: e.mgr, MaxInputSize: limit})
	hreq, _ := http.NewRequest("POST", "/", io.NopCloser(cr))
	hreq.Header.Set("Content-Encoding", "gzip")
	body, err := srv.body(nopWriter{}, hreq, limit)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, body)
	if err == nil || n > limit {
		t.Fatalf("read %d inflated bytes, err %v", n, err)
	}
	if cr.n > int64(len(bomb))/8 {
		t.Errorf("consumed %d of %d compressed bytes to refuse the bomb", cr.n, len(bomb))
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
