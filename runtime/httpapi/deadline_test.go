package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/netutil"

	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// countingListener counts the read deadlines its connections' sockets are
// given.
type countingListener struct {
	net.Listener
	sets *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.sets}, nil
}

type countingConn struct {
	net.Conn
	sets *atomic.Int64
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// tcpPair returns the two ends of a loopback TCP connection, the server's
// end as a lazyConn over a countingConn.
func tcpPair(t *testing.T) (client net.Conn, server *lazyConn, sets *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sets = new(atomic.Int64)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := (&lazyListener{Listener: countingListener{ln, sets}}).Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	if c == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	return client, c.(*lazyConn), sets
}

// TestLazyConnDeadlines: a deadline asked for between reads reaches the
// socket only when the next read starts (and only the last one asked
// for), one asked for during a read at once, and each read runs under the
// deadline last asked for, as on a plain connection.
func TestLazyConnDeadlines(t *testing.T) {
	client, c, sets := tcpPair(t)
	buf := make([]byte, 16)

	// Several moves between reads: none reach the socket.
	for _, d := range []time.Duration{time.Minute, time.Second, 0} {
		var at time.Time
		if d > 0 {
			at = time.Now().Add(d)
		}
		if err := c.SetReadDeadline(at); err != nil {
			t.Fatal(err)
		}
	}
	if n := sets.Load(); n != 0 {
		t.Errorf("%d socket deadlines set before any read, want 0", n)
	}
	// The last one (none) is what the socket already has: a read with
	// data waiting sets nothing.
	if _, err := client.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); n != 1 || err != nil {
		t.Fatalf("read: %d %v", n, err)
	}
	if n := sets.Load(); n != 0 {
		t.Errorf("%d socket deadlines set for a read without one, want 0", n)
	}

	// A deadline asked for before a read that must wait bounds it.
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline returned %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the read waited %s past a 50ms deadline", d)
	}
	if n := sets.Load(); n != 1 {
		t.Errorf("%d socket deadlines set for one bounded read, want 1", n)
	}

	// A deadline asked for while a read waits reaches it at once: this
	// is how net/http stops its background read.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(buf)
		done <- err
	}()
	for {
		c.mu.Lock()
		reading := c.reading
		c.mu.Unlock()
		if reading > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a waiting read stopped with %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a past deadline set during a read did not stop it")
	}

	// Once closed, the next read says so.
	c.Close()
	if _, err := c.Read(buf); err == nil {
		t.Error("a read on a closed connection succeeded")
	}
}

// TestLazyDeadlinesPerRequest: with net/http's own timeouts and the body's
// pacing on, a small request on a kept-alive connection moves its socket's
// read deadline 7 times when every move reaches the socket; through
// Limits.Listener at most 3.
func TestLazyDeadlinesPerRequest(t *testing.T) {
	lb := loopbackCacheHit(t, true)
	const n = 200
	for range n {
		lb.do(t)
	}
	per := float64(lb.sets.Load()) / n
	t.Logf("%.2f socket read deadlines per request", per)
	if per > 3 {
		t.Errorf("%.2f socket read deadlines per request, want at most 3", per)
	}
}

// loopback is a server of a cached model on a real listener and one
// kept-alive client connection to it.
type loopback struct {
	sets *atomic.Int64 // socket read deadlines set
	conn net.Conn
	r    *bufio.Reader
	req  []byte
}

// loopbackCacheHit serves a cached model as cmd/tritonserver does, on
// Limits' http.Server, through either Limits.Listener (lazy) or the
// connection bound alone (every deadline on the socket), and returns a
// client sending it the same binary request: after the first, all hits.
func loopbackCacheHit(t testing.TB, lazy bool) *loopback {
	t.Helper()
	cache, err := scheduler.NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	repo := frontendtest.NewRepo(t, map[string]string{"cached": frontendtest.Linear + "response_cache { enable: true }"},
		func(o *repository.Options) { o.Cache = cache })
	lim := Limits{}.withDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sets := new(atomic.Int64)
	var served net.Listener = countingListener{ln, sets}
	if lazy {
		served = lim.Listener(served)
	} else {
		served = netutil.LimitListener(served, lim.MaxConnections)
	}
	srv := lim.NewHTTPServer(New(Options{Manager: repo.Manager, Limits: lim}))
	go func() { _ = srv.Serve(served) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	j := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT__0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	body := append([]byte(j), frontendtest.F32Bytes(inputRows(1, 0.5))...)
	req := fmt.Appendf(nil, "POST /v2/models/cached/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		HeaderLength, strconv.Itoa(len(j)), len(body))
	lb := &loopback{sets: sets, conn: conn, r: bufio.NewReader(conn), req: append(req, body...)}
	lb.do(t) // the miss
	sets.Store(0)
	return lb
}

// do sends the request and reads its answer, failing t unless it is 200.
func (lb *loopback) do(t testing.TB) {
	if _, err := lb.conn.Write(lb.req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(lb.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
}

// BenchmarkLoopbackCacheHit is a cache hit over a loopback connection,
// client and server in this process, with every read deadline on the
// socket (socket) and through Limits.Listener (lazy), in the same run.
func BenchmarkLoopbackCacheHit(b *testing.B) {
	for _, lazy := range []bool{false, true} {
		name := "socket"
		if lazy {
			name = "lazy"
		}
		b.Run(name, func(b *testing.B) {
			lb := loopbackCacheHit(b, lazy)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				lb.do(b)
			}
			b.ReportMetric(float64(lb.sets.Load())/float64(b.N), "deadlines/op")
		})
	}
}
