package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testBlob is deterministic pseudo-random content and its digest.
func testBlob(n int) ([]byte, string) {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

// fastOpts retries quickly so that failure paths run in milliseconds.
func fastOpts(t *testing.T) Options {
	return Options{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Log: newTestLog(t)}
}

// testLog sends whole lines to t.Log; apt writes its output in pieces.
type testLog struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func newTestLog(t *testing.T) *testLog { return &testLog{t: t} }

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(l.buf[:i])); line != "" {
			l.t.Log(line)
		}
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func serveBlob(w http.ResponseWriter, r *http.Request, b []byte) {
	http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(b))
}

// cutAfter sends the headers of the whole file, n bytes of it, and then
// drops the connection.
func cutAfter(w http.ResponseWriter, b []byte, n int) {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b[:n])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

func checkCached(t *testing.T, c Cache, p, sha string, want []byte) {
	t.Helper()
	if p != c.Path(sha) {
		t.Fatalf("path %s, want %s", p, c.Path(sha))
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("cached content differs: %d bytes, want %d", len(got), len(want))
	}
	if !c.Has(sha) {
		t.Fatal("Has is false after a fetch")
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir, "partial", "*")); len(left) != 0 {
		t.Fatalf("partial files left: %v", left)
	}
}

func TestFetchURLMirrorFailover(t *testing.T) {
	blob, sha := testBlob(100_000)
	for _, tc := range []struct {
		status   int
		wantHits int64 // requests the failing mirror gets
	}{
		{http.StatusInternalServerError, 3}, // transient: every attempt
		{http.StatusNotFound, 1},            // permanent: once
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			var bad, good atomic.Int64
			badSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				bad.Add(1)
				http.Error(w, "no", tc.status)
			}))
			defer badSrv.Close()
			goodSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				good.Add(1)
				if ua := r.Header.Get("User-Agent"); ua != "tritonbuild" {
					t.Errorf("User-Agent %q", ua)
				}
				serveBlob(w, r, blob)
			}))
			defer goodSrv.Close()
			c := Cache{Dir: t.TempDir()}
			p, err := FetchURL(context.Background(), URLSpec{
				URLs:   []string{badSrv.URL + "/f.tar", goodSrv.URL + "/f.tar"},
				SHA256: sha,
			}, c, fastOpts(t))
			if err != nil {
				t.Fatal(err)
			}
			checkCached(t, c, p, sha, blob)
			if bad.Load() != tc.wantHits || good.Load() != 1 {
				t.Fatalf("requests: failing mirror %d (want %d), good mirror %d (want 1)", bad.Load(), tc.wantHits, good.Load())
			}
		})
	}
}

func TestFetchURLAllFail(t *testing.T) {
	_, sha := testBlob(10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusGone)
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	_, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL + "/a", srv.URL + "/b"}, SHA256: sha}, c, fastOpts(t))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusGone {
		t.Fatalf("want a StatusError 410, got %v", err)
	}
	for _, want := range []string{srv.URL + "/a", srv.URL + "/b", "410"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFetchURLResumeAfterCut(t *testing.T) {
	blob, sha := testBlob(300_000)
	const cut = 123_456
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		n := len(ranges)
		mu.Unlock()
		if n == 1 {
			cutAfter(w, blob, cut)
		}
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL + "/f"}, SHA256: sha}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	want := []string{"", fmt.Sprintf("bytes=%d-", cut)}
	if fmt.Sprint(ranges) != fmt.Sprint(want) {
		t.Fatalf("Range headers %q, want %q", ranges, want)
	}
}

func TestFetchURLResumeOnAnotherMirror(t *testing.T) {
	blob, sha := testBlob(200_000)
	const cut = 50_000
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == "" {
			cutAfter(w, blob, cut)
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer first.Close()
	var gotRange string
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotRange = r.Header.Get("Range")
		serveBlob(w, r, blob)
	}))
	defer second.Close()
	c := Cache{Dir: t.TempDir()}
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{first.URL, second.URL}, SHA256: sha}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if gotRange != fmt.Sprintf("bytes=%d-", cut) {
		t.Fatalf("second mirror saw Range %q", gotRange)
	}
}

func TestFetchURLServerIgnoresRange(t *testing.T) {
	blob, sha := testBlob(200_000)
	var n atomic.Int64
	var secondRange atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			cutAfter(w, blob, 70_000)
		}
		secondRange.Store(r.Header.Get("Range"))
		w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
		w.Write(blob) // 200 with the whole file, Range or not
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if r := secondRange.Load(); r != "bytes=70000-" {
		t.Fatalf("second request Range %q", r)
	}
}

func TestFetchURLCompletePartialGets416(t *testing.T) {
	blob, sha := testBlob(5000)
	c := Cache{Dir: t.TempDir()}
	// A previous run downloaded everything and died before the rename.
	if err := c.prepare(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.partPath(sha), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		serveBlob(rec, r, blob)
		status.Store(int64(rec.Code))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if status.Load() != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("server answered %d, the test wanted to exercise 416", status.Load())
	}
}

func TestFetchURLStallTimeout(t *testing.T) {
	blob, sha := testBlob(100_000)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
			w.Write(blob[:1000])
			w.(http.Flusher).Flush()
			<-r.Context().Done() // hang until the client gives up
			return
		}
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	opts := fastOpts(t)
	opts.StallTimeout = 200 * time.Millisecond
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha}, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

func TestFetchURLChecksumMismatch(t *testing.T) {
	_, sha := testBlob(1000)
	wrong, wrongSHA := testBlob(999)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		serveBlob(w, r, wrong)
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	u := srv.URL + "/pkg-1.0.tar.gz"
	_, err := FetchURL(context.Background(), URLSpec{URLs: []string{u}, SHA256: sha}, c, fastOpts(t))
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("want a ChecksumError, got %v", err)
	}
	if ce.URL != u || ce.Want != sha || ce.Got != wrongSHA {
		t.Fatalf("ChecksumError %+v", ce)
	}
	for _, s := range []string{u, sha, wrongSHA} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if c.Has(sha) || c.Has(wrongSHA) {
		t.Fatal("mismatching content entered the cache")
	}
	for _, d := range []string{"sha256", "partial", "tmp"} {
		if left, _ := os.ReadDir(filepath.Join(c.Dir, d)); len(left) != 0 {
			t.Errorf("%s/ holds %d entries after a mismatch", d, len(left))
		}
	}
	if n.Load() != 1 {
		t.Errorf("%d requests: a fresh download that mismatches must not be retried", n.Load())
	}
}

func TestFetchURLCacheHitMakesNoRequest(t *testing.T) {
	blob, sha := testBlob(4096)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	spec := URLSpec{URLs: []string{srv.URL}, SHA256: strings.ToUpper(sha)}
	for i := 0; i < 3; i++ {
		p, err := FetchURL(context.Background(), spec, c, fastOpts(t))
		if err != nil {
			t.Fatal(err)
		}
		checkCached(t, c, p, sha, blob)
	}
	if n.Load() != 1 {
		t.Fatalf("%d requests for three fetches of one digest, want 1", n.Load())
	}
	srv.Close()
	// With the server gone a cached fetch still succeeds.
	if _, err := FetchURL(context.Background(), spec, c, fastOpts(t)); err != nil {
		t.Fatal(err)
	}
}

func TestFetchURLFile(t *testing.T) {
	blob, sha := testBlob(70_000)
	src := filepath.Join(t.TempDir(), "src.tar")
	if err := os.WriteFile(src, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	c := Cache{Dir: t.TempDir()}
	p, err := FetchURL(context.Background(), URLSpec{
		URLs:   []string{"file://" + filepath.Join(t.TempDir(), "missing"), "file://" + src},
		SHA256: sha,
	}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("the file:// source was disturbed: %v", err)
	}
}

func TestFetchURLConcurrentSameDigest(t *testing.T) {
	blob, sha := testBlob(500_000)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(50 * time.Millisecond) // keep the first fetch busy while the second arrives
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	// Two Cache values on one directory, as two processes would have.
	dir := t.TempDir()
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha}, Cache{Dir: dir}, fastOpts(t))
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkCached(t, Cache{Dir: dir}, paths[i], sha, blob)
	}
	if n.Load() != 1 {
		t.Fatalf("%d downloads of one digest by concurrent fetchers, want 1", n.Load())
	}
}

func TestFetchURLBadSpec(t *testing.T) {
	_, sha := testBlob(1)
	c := Cache{Dir: t.TempDir()}
	for _, tc := range []struct {
		spec URLSpec
		want string
	}{
		{URLSpec{URLs: []string{"http://x/a"}, SHA256: "abc"}, "invalid sha256"},
		{URLSpec{SHA256: sha, Filename: "f"}, "no URLs"},
		{URLSpec{URLs: []string{"ftp://x/a"}, SHA256: sha}, "unsupported scheme"},
	} {
		_, err := FetchURL(context.Background(), tc.spec, c, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func TestFetchURLProgress(t *testing.T) {
	blob, sha := testBlob(600_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveBlob(w, r, blob) }))
	defer srv.Close()
	ch := make(chan Update)
	var updates []Update
	done := make(chan struct{})
	go func() {
		for u := range ch {
			updates = append(updates, u)
		}
		close(done)
	}()
	opts := fastOpts(t)
	opts.Progress = ch
	_, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL + "/x.tar"}, SHA256: sha}, Cache{Dir: t.TempDir()}, opts)
	close(ch)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if len(updates) < 2 {
		t.Fatalf("updates %v", updates)
	}
	last, final := updates[len(updates)-2], updates[len(updates)-1]
	if last.Name != "x.tar" || last.Complete != 600_000 || last.Total != 600_000 || last.Done {
		t.Errorf("last byte count %+v", last)
	}
	if final.Name != "x.tar" || !final.Done || final.Error != nil {
		t.Errorf("final update %+v", final)
	}
}

// A sha256 pin in upper case names the same bytes.
func TestFetchURLUpperCaseSHA256(t *testing.T) {
	blob, sha := testBlob(2048)
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	c := Cache{Dir: t.TempDir()}
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{"file://" + src}, SHA256: strings.ToUpper(sha)}, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
}

// TestMain doubles as the second process of TestFetchURLTwoProcesses: with
// FETCH_HELPER_URL set, the test binary fetches one file and exits.
func TestMain(m *testing.M) {
	if u := os.Getenv("FETCH_HELPER_URL"); u != "" {
		spec := URLSpec{URLs: []string{u}, SHA256: os.Getenv("FETCH_HELPER_SHA")}
		if _, err := FetchURL(context.Background(), spec, Cache{Dir: os.Getenv("FETCH_HELPER_CACHE")}, Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestFetchURLTwoProcesses(t *testing.T) {
	blob, sha := testBlob(400_000)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(100 * time.Millisecond)
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "FETCH_HELPER_URL="+srv.URL, "FETCH_HELPER_CACHE="+dir, "FETCH_HELPER_SHA="+sha)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("helper output:\n%s", out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper process: %v", err)
		}
	}
	checkCached(t, Cache{Dir: dir}, Cache{Dir: dir}.Path(sha), sha, blob)
	if n.Load() != 1 {
		t.Fatalf("%d downloads by two processes sharing a cache, want 1", n.Load())
	}
}

func TestFetchURLCorruptPartialRetriedFromZero(t *testing.T) {
	blob, sha := testBlob(50_000)
	c := Cache{Dir: t.TempDir()}
	if err := c.prepare(); err != nil {
		t.Fatal(err)
	}
	// A partial file from an earlier run whose bytes are wrong.
	if err := os.WriteFile(c.partPath(sha), bytes.Repeat([]byte{'x'}, 10_000), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		mu.Unlock()
		serveBlob(w, r, blob)
	}))
	defer srv.Close()
	p, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha}, c, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if fmt.Sprint(ranges) != fmt.Sprint([]string{"bytes=10000-", ""}) {
		t.Fatalf("Range headers %q: want a resume, then a fresh download after the mismatch", ranges)
	}
}

func TestFetchURLSizeLimit(t *testing.T) {
	blob, sha := testBlob(20_000)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Write(blob) // chunked, no length: only Size can stop it
	}))
	defer srv.Close()
	c := Cache{Dir: t.TempDir()}
	_, err := FetchURL(context.Background(), URLSpec{URLs: []string{srv.URL}, SHA256: sha, Size: 10_000}, c, fastOpts(t))
	if err == nil || !strings.Contains(err.Error(), "more than the expected 10000 bytes") {
		t.Fatalf("error %v", err)
	}
	if n.Load() != 1 {
		t.Errorf("%d requests: an oversized answer is not retried", n.Load())
	}
	if left, _ := os.ReadDir(filepath.Join(c.Dir, "partial")); len(left) != 0 {
		t.Errorf("partial/ holds %d entries after an oversized answer", len(left))
	}
}
