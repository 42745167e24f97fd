package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/access"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

func maxResponse(n int64) func(*repository.Options) {
	return func(o *repository.Options) { o.MaxResponseSize = n }
}

// serveRepo serves repo with opts over a real listener until the test ends.
func serveRepo(t *testing.T, repo *frontendtest.Repo, opts Options) *env {
	t.Helper()
	e := &env{mgr: repo.Manager, be: repo.Backend, srv: httptest.NewServer(New(opts))}
	t.Cleanup(e.srv.Close)
	return e
}

// allocated runs f and returns the bytes the process allocated meanwhile
// (server and client share the process): a bound on what one request
// made the server build.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDuplicateOutputsRefusedBeforeRunning is issue 17's case 1: a 4 MB
// BYTES request naming its output 400 times made a 1.2 GB JSON response.
// It is refused with Triton's text, having allocated little more than the
// request itself.
func TestDuplicateOutputsRefusedBeforeRunning(t *testing.T) {
	e := newEnv(t, map[string]string{"echo": frontendtest.Echo}, 0)
	data := frontendtest.BytesElems(1000, 4000) // 4 MB
	var outs []string
	for i := 0; i < 400; i++ {
		outs = append(outs, `{"name":"OUT"}`)
	}
	hdr := fmt.Sprintf(`{"inputs":[{"name":"IN","shape":[1000],"datatype":"BYTES","parameters":{"binary_data_size":%d}}],"outputs":[%s]}`,
		len(data), strings.Join(outs, ","))
	body, h := binaryBody(hdr, data)
	var status int
	var msg string
	n := allocated(func() {
		r, b := e.do(t, "POST", "/v2/models/echo/infer", body, h)
		status = r.StatusCode
		var er struct{ Error string }
		_ = json.Unmarshal(b, &er)
		msg = er.Error
	})
	if status != 400 || msg != "Duplicate output name 'OUT' is not allowed in a request" {
		t.Fatalf("duplicate outputs: %d %q", status, msg)
	}
	// The body is read once into the server's buffer and once sent by the
	// client; anything near 400 copies of the output is the bug.
	if n > 64<<20 {
		t.Errorf("the refused request allocated %d MB", n>>20)
	}
}

// TestResponseBound: a response over the limit is refused before it is
// rendered, whether the config sizes it (fixed dims, refused before the
// model runs) or only the result does (BYTES); the error states the
// numbers.
func TestResponseBound(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"echo": frontendtest.Echo}, maxResponse(1000))
	e := serveRepo(t, repo, Options{Manager: repo.Manager})
	data := frontendtest.BytesElems(3, 400) // 1212 bytes of output
	hdr := fmt.Sprintf(`{"inputs":[{"name":"IN","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}`, len(data))
	body, h := binaryBody(hdr, data)
	r, b := e.do(t, "POST", "/v2/models/echo/infer", body, h)
	if r.StatusCode != 413 || !strings.Contains(string(b), "would hold 1212 bytes of output, more than the maximum of 1000 bytes") {
		t.Errorf("BYTES response over the bound: %d %s", r.StatusCode, b)
	}
	// Rendered as JSON, 3 small elements still fit in binary but not in
	// the worst-case JSON spelling of 150 bytes each.
	small := frontendtest.BytesElems(3, 100)
	hdr = fmt.Sprintf(`{"inputs":[{"name":"IN","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}`, len(small))
	body, h = binaryBody(hdr, small)
	r, b = e.do(t, "POST", "/v2/models/echo/infer", body, h)
	if r.StatusCode != 413 || !strings.Contains(string(b), "request the outputs as binary data") {
		t.Errorf("JSON rendering over the bound: %d %s", r.StatusCode, b)
	}
	hdr = fmt.Sprintf(`{"inputs":[{"name":"IN","shape":[3],"datatype":"BYTES","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`, len(small))
	body, h = binaryBody(hdr, small)
	if r, b := e.do(t, "POST", "/v2/models/echo/infer", body, h); r.StatusCode != 200 {
		t.Errorf("binary rendering within the bound: %d %s", r.StatusCode, b)
	}
	// linear: 8 rows of 3 FP32 = 96 bytes fit; the limit below is checked
	// before the model runs.
	repo2 := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear}, maxResponse(90))
	e2 := serveRepo(t, repo2, Options{Manager: repo2.Manager})
	rows := `{"inputs":[{"name":"INPUT__0","shape":[8,4],"datatype":"FP32","data":[` + strings.TrimSuffix(strings.Repeat("1,", 32), ",") + `]}]}`
	before := len(repo2.Backend.Batches("linear"))
	r, b = e2.do(t, "POST", "/v2/models/linear/infer", []byte(rows), nil)
	if r.StatusCode != 413 || !strings.Contains(string(b), "would hold 96 bytes of output, more than the maximum of 90 bytes") {
		t.Errorf("fixed-size response over the bound: %d %s", r.StatusCode, b)
	}
	if after := len(repo2.Backend.Batches("linear")); after != before {
		t.Errorf("the model ran %d times for a request refused by its config's bound", after-before)
	}
}

// serveLimited serves h with lim over a real listener, as cmd/tritonserver
// does, and returns the address.
func serveLimited(t *testing.T, h http.Handler, lim Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := lim.NewHTTPServer(h)
	go func() { _ = srv.Serve(lim.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d (reading
// whatever it still sends).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: closed by the server; a timeout is an error
}

// TestConnectionsTimeOutAndAreBounded is issue 17's case 2: idle
// keep-alive connections stayed open forever, headers and bodies that
// never complete were held forever, and connections were not limited.
func TestConnectionsTimeOutAndAreBounded(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	lim := Limits{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, BodyMinRate: 1000, MaxConnections: 2}
	addr := serveLimited(t, New(Options{Manager: repo.Manager, Limits: lim}), lim)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	live := "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"

	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial()
		if _, err := io.WriteString(c, live); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("live: %v %v", resp, err)
		}
		resp.Body.Close()
		if !closedWithin(c, 3*time.Second) {
			t.Error("an idle keep-alive connection stayed open past the idle timeout")
		}
	})
	t.Run("headers never finished", func(t *testing.T) {
		c := dial()
		_, _ = io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
		if !closedWithin(c, 3*time.Second) {
			t.Error("a connection whose headers never end stayed open")
		}
	})
	t.Run("body never finished", func(t *testing.T) {
		c := dial()
		start := time.Now()
		_, _ = fmt.Fprintf(c, "POST /v2/models/linear/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{\"inputs\":")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "slower than 1000 bytes per second (--http-body-min-rate)") {
			t.Errorf("stalled body: %d %s", resp.StatusCode, b)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("a stalled body was held %s", d)
		}
	})
	t.Run("connection limit", func(t *testing.T) {
		a, b := dial(), dial()
		for _, c := range []net.Conn{a, b} {
			_, _ = io.WriteString(c, live)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("live: %v", err)
			}
		}
		// A third client waits while two connections are held...
		client := &http.Client{Timeout: 150 * time.Millisecond}
		if _, err := client.Get("http://" + addr + "/v2/health/live"); err == nil {
			t.Error("a third connection was served while the limit of 2 was held")
		}
		// ...and is served once one of them goes.
		a.Close()
		client.Timeout = 3 * time.Second
		resp, err := client.Get("http://" + addr + "/v2/health/live")
		if err != nil {
			t.Fatalf("after a connection closed: %v", err)
		}
		resp.Body.Close()
	})
}

// TestUnsupportedContentEncoding is part of issue 17's case 10: a gzip
// body was parsed as JSON ("expected '{' at offset 0"). An encoding the
// server does not read is refused with 415 naming it.
func TestUnsupportedContentEncoding(t *testing.T) {
	e := newEnv(t, map[string]string{"linear": frontendtest.Linear}, 0)
	body := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}
	for _, path := range []string{"/v2/models/linear/infer", "/v2/repository/index"} {
		r, b := e.do(t, "POST", path, body, map[string]string{"Content-Encoding": "br"})
		if r.StatusCode != 415 || !strings.Contains(string(b), "unsupported Content-Encoding 'br'") {
			t.Errorf("%s with br: %d %s", path, r.StatusCode, b)
		}
	}
	ok := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	if r, b := e.do(t, "POST", "/v2/models/linear/infer", []byte(ok), map[string]string{"Content-Encoding": "identity"}); r.StatusCode != 200 {
		t.Errorf("identity: %d %s", r.StatusCode, b)
	}
}

// TestRestrictedAPI is the HTTP half of issue 17's case 8 remedy: with
// --http-restricted-api=model-repository:admin=k the load API answers 403
// (Triton's text) without the header and works with it; inference stays
// open.
func TestRestrictedAPI(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	rules := access.Rules{}
	if err := rules.Add("http-restricted-api", "model-repository,model-config:admin=k"); err != nil {
		t.Fatal(err)
	}
	e := serveRepo(t, repo, Options{Manager: repo.Manager, ModelControl: true, Restricted: rules})
	for _, path := range []string{"/v2/repository/models/linear/load", "/v2/repository/index"} {
		r, b := e.do(t, "POST", path, nil, nil)
		if r.StatusCode != 403 || !strings.Contains(string(b), "This API is restricted, expecting header 'admin'") {
			t.Errorf("%s without the header: %d %s", path, r.StatusCode, b)
		}
		if r, b := e.do(t, "POST", path, nil, map[string]string{"admin": "k"}); r.StatusCode != 200 {
			t.Errorf("%s with the header: %d %s", path, r.StatusCode, b)
		}
	}
	if r, _ := e.do(t, "GET", "/v2/models/linear/config", nil, nil); r.StatusCode != 403 {
		t.Errorf("model config without the header: %d", r.StatusCode)
	}
	ok := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	if r, b := e.do(t, "POST", "/v2/models/linear/infer", []byte(ok), nil); r.StatusCode != 200 {
		t.Errorf("inference, not restricted: %d %s", r.StatusCode, b)
	}
	if r, _ := e.do(t, "GET", "/v2/health/ready", nil, nil); r.StatusCode != 200 {
		t.Errorf("health, not restricted: %d", r.StatusCode)
	}
	// Restricting inference covers every path that runs a model.
	inf := access.Rules{}
	if err := inf.Add("http-restricted-api", "inference:user=u"); err != nil {
		t.Fatal(err)
	}
	e2 := serveRepo(t, repo, Options{Manager: repo.Manager, Restricted: inf})
	for _, path := range []string{"/v2/models/linear/infer", "/v2/models/linear/versions/1/infer", "/v2/models/linear/generate", "/v2/models/linear/generate_stream"} {
		if r, b := e2.do(t, "POST", path, []byte(ok), nil); r.StatusCode != 403 {
			t.Errorf("%s with inference restricted: %d %s", path, r.StatusCode, b)
		}
	}
}

// TestErrorsNameNoServerPaths is part of issue 17's case 10: load errors,
// index reasons and request errors name files from the repository on,
// never by the server's absolute path.
func TestErrorsNameNoServerPaths(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{
		"nofile": frontendtest.Linear + `default_model_filename: "missing.bin"`,
		"syntax": "max_batch_size: eight",
	})
	e := serveRepo(t, repo, Options{Manager: repo.Manager, ModelControl: true})
	_, idx := e.do(t, "POST", "/v2/repository/index", nil, nil)
	r, load := e.do(t, "POST", "/v2/repository/models/syntax/load", nil, nil)
	for what, b := range map[string][]byte{"index": idx, "load": load} {
		if strings.Contains(string(b), repo.Root) || strings.Contains(string(b), "/tmp/") {
			t.Errorf("%s names a server path: %s", what, b)
		}
	}
	if r.StatusCode == 200 || !strings.Contains(string(load), "syntax/config.pbtxt:1:") {
		t.Errorf("load error: %d %s", r.StatusCode, load)
	}
	if !strings.Contains(string(idx), "model file 'missing.bin' not found in the model directory") {
		t.Errorf("index: %s", idx)
	}
}

// TestRefusedBodyEndsTheStream: a request whose body the server will not
// read (over --http-max-input-size) is answered and then the stream ends,
// as net/http does on a bare listener, so a client that reads after
// sending gets the answer and EOF. With CloseWrite hidden by the
// listener's wrapping it got a connection reset half a second later.
func TestRefusedBodyEndsTheStream(t *testing.T) {
	repo := frontendtest.NewRepo(t, map[string]string{"linear": frontendtest.Linear})
	lim := Limits{}
	addr := serveLimited(t, New(Options{Manager: repo.Manager, Limits: lim, MaxInputSize: 1000}), lim)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := make([]byte, 4<<20) // more than the socket buffers take: some stays unread
	go func() {
		// Fails once the server closes; the answer is what is checked.
		_, _ = fmt.Fprintf(c, "POST /v2/models/linear/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		_, _ = c.Write(body)
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("after %q: %v (want the answer, then the end of the stream)", got, err)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 413 ") || !strings.Contains(string(got), "exceeds the maximum allowed value of 1000 bytes") {
		t.Errorf("answer %q", got)
	}
}

// TestRestrictedCategoryByEndpoint: --http-restricted-api checks a
// request against the category of the endpoint it reaches, as Triton's
// routing does, whatever the model is called: inference on a model named
// "trace" is inference, and the metadata of a model named "ready",
// "infer" or "config" is metadata.
func TestRestrictedCategoryByEndpoint(t *testing.T) {
	for path, want := range map[string]access.Category{
		"/v2/models/trace/infer":                     access.Inference,
		"/v2/models/trace/versions/1/infer":          access.Inference,
		"/v2/models/trace/generate_stream":           access.Inference,
		"/v2/models/trace/ready":                     access.Health,
		"/v2/models/trace/config":                    access.ModelConfig,
		"/v2/models/trace/stats":                     access.Statistics,
		"/v2/models/trace":                           access.Metadata,
		"/v2/models/trace/trace/setting":             access.Trace,
		"/v2/models/m/versions/1/trace/setting":      access.Trace,
		"/v2/models/ready":                           access.Metadata,
		"/v2/models/infer":                           access.Metadata,
		"/v2/models/config":                          access.Metadata,
		"/v2/models/generate":                        access.Metadata,
		"/v2/models/infer/ready":                     access.Health,
		"/v2/models/stats":                           access.Statistics,
		"/v2/models/stats/infer":                     access.Inference,
		"/v2/models/m/versions/1":                    access.Metadata,
		"/v2/models/m/versions/1/stats":              access.Statistics,
		"/v2/trace/setting":                          access.Trace,
		"/v2/models/linear/infer":                    access.Inference,
		"/v2/models/linear/versions/2/generate":      access.Inference,
		"/v2/models/linear/versions/2/config":        access.ModelConfig,
		"/v2/models/linear/versions/2/ready":         access.Health,
		"/v2/models/linear/versions/2/trace/setting": access.Trace,
	} {
		if got := category(path); got != want {
			t.Errorf("%s: category %q, want %q", path, got, want)
		}
	}

	// End to end: restricting inference also covers a model named trace.
	repo := frontendtest.NewRepo(t, map[string]string{"trace": frontendtest.Linear})
	inf := access.Rules{}
	if err := inf.Add("http-restricted-api", "inference:user=u"); err != nil {
		t.Fatal(err)
	}
	e := serveRepo(t, repo, Options{Manager: repo.Manager, Restricted: inf})
	ok := `{"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	if r, b := e.do(t, "POST", "/v2/models/trace/infer", []byte(ok), nil); r.StatusCode != 403 {
		t.Errorf("inference on model 'trace' with inference restricted: %d %s", r.StatusCode, b)
	}
}
