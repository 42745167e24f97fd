package toolchain

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// client speaks the broker protocol by hand, so tests control exactly when
// each lease is taken and returned.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, b *Broker) *client {
	t.Helper()
	conn, err := net.Dial("unix", b.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *client) send(m brokerMsg) {
	c.t.Helper()
	if err := json.NewEncoder(c.conn).Encode(m); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) sendRaw(s string) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one message; the deadline turns a missing reply into a
// failure instead of a hung test.
func (c *client) recv(timeout time.Duration) (brokerMsg, error) {
	c.conn.SetReadDeadline(time.Now().Add(timeout))
	var m brokerMsg
	err := readMsg(c.r, &m)
	return m, err
}

// acquireAsync sends acquire and delivers the grant (or error) on the
// returned channel.
func (c *client) acquireAsync(kind Kind, key string) <-chan brokerMsg {
	c.send(brokerMsg{Op: "acquire", Kind: kind, Key: key, Cwd: "/build"})
	ch := make(chan brokerMsg, 1)
	go func() {
		m, err := c.recv(10 * time.Second)
		if err != nil {
			m = brokerMsg{Op: "error", Error: err.Error()}
		}
		ch <- m
	}()
	return ch
}

func (c *client) done(rss int64, oom bool) {
	c.t.Helper()
	c.send(brokerMsg{Op: "done", PeakRSS: rss, WallMS: 10, OOM: oom})
	m, err := c.recv(5 * time.Second)
	if err != nil || m.Op != "ok" {
		c.t.Fatalf("done: got %+v, %v", m, err)
	}
}

func startBroker(t *testing.T, opts BrokerOptions) *Broker {
	t.Helper()
	b, err := StartBroker(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func mustGrant(t *testing.T, ch <-chan brokerMsg, what string) brokerMsg {
	t.Helper()
	select {
	case m := <-ch:
		if m.Op != "grant" {
			t.Fatalf("%s: got %+v, want a grant", what, m)
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no grant", what)
	}
	return brokerMsg{}
}

func mustWait(t *testing.T, ch <-chan brokerMsg, what string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s: got %+v, want it to wait", what, m)
	case <-time.After(150 * time.Millisecond):
	}
}

func TestBrokerGrantsInOrderWithinBudget(t *testing.T) {
	b := startBroker(t, BrokerOptions{Budget: 1000, Declared: Profile{CompileBytes: 400, LinkBytes: 100}})
	a, bb, c, d := dial(t, b), dial(t, b), dial(t, b), dial(t, b)
	ga := mustGrant(t, a.acquireAsync(KindCompile, "a.c"), "a")
	if ga.Bytes != 400 || ga.Estimate != "declared per-compile memory" {
		t.Errorf("grant a = %+v", ga)
	}
	mustGrant(t, bb.acquireAsync(KindCompile, "b.c"), "b")
	cc := c.acquireAsync(KindCompile, "c.c")
	mustWait(t, cc, "c (400 more would exceed 1000)")
	// d would fit (800+100) but must not overtake c: FIFO keeps big
	// requests from starving.
	dd := d.acquireAsync(KindLink, "app")
	mustWait(t, dd, "d (behind c)")
	a.done(300, false)
	// c is estimated when granted, from a's report: 300 x 1.15.
	if g := mustGrant(t, cc, "c after a finished"); g.Bytes != 345 {
		t.Errorf("c granted %d (%s), want 345 learned from a", g.Bytes, g.Estimate)
	}
	mustGrant(t, dd, "d after c")
	got := b.Counters()
	if got.Granted != 4 || got.Waited != 2 || got.PeakConcurrency != 3 || got.PeakBytes != 845 || got.Completed != 1 {
		t.Errorf("counters = %+v", got)
	}
}

func TestBrokerOversizeRunsAlone(t *testing.T) {
	b := startBroker(t, BrokerOptions{Budget: 1000, Declared: Profile{CompileBytes: 300, LinkBytes: 5000}})
	a, l, c := dial(t, b), dial(t, b), dial(t, b)
	mustGrant(t, a.acquireAsync(KindCompile, "a.c"), "a")
	ll := l.acquireAsync(KindLink, "big.so")
	mustWait(t, ll, "oversize link while a compile runs")
	a.done(100, false)
	g := mustGrant(t, ll, "oversize link once nothing runs")
	if g.Bytes != 5000 {
		t.Errorf("oversize grant = %d, want the full estimate 5000", g.Bytes)
	}
	cc := c.acquireAsync(KindCompile, "c.c")
	mustWait(t, cc, "compile while the oversize link runs")
	l.done(4000, false)
	mustGrant(t, cc, "compile after the link")
	if n := b.Counters().Oversize; n != 1 {
		t.Errorf("oversize = %d, want 1", n)
	}
}

func TestBrokerLearnsAndReleasesAbandonedLeases(t *testing.T) {
	stats := NewStats("r", "1")
	b := startBroker(t, BrokerOptions{Budget: 1000, Margin: 1.5, TrimPrefixes: []string{"/build"}, Stats: stats})
	a := dial(t, b)
	g := mustGrant(t, a.acquireAsync(KindCompile, "src/x.c"), "first x.c")
	if g.Bytes != DefaultCompileBytes {
		t.Errorf("first grant %d, want the default %d", g.Bytes, DefaultCompileBytes)
	}
	a.done(200, false)
	if v, n := stats.CommandP95(CommandID{Kind: KindCompile, Key: "src/x.c"}); v != 200 || n != 1 {
		t.Fatalf("recorded p95 %d over %d runs; key not trimmed to src/x.c?", v, n)
	}
	// Same file: its own history with the margin.
	a2 := dial(t, b)
	g = mustGrant(t, a2.acquireAsync(KindCompile, "/build/src/x.c"), "second x.c")
	if g.Bytes != 300 || !strings.Contains(g.Estimate, "this command") {
		t.Errorf("grant = %+v, want 300 from this command's p95", g)
	}
	// Another file: the kind's p95. The connection then drops without a
	// report, which must free the lease.
	a3 := dial(t, b)
	g = mustGrant(t, a3.acquireAsync(KindCompile, "src/y.c"), "y.c")
	if g.Bytes != 300 || !strings.Contains(g.Estimate, "learned compile") {
		t.Errorf("grant = %+v, want 300 from the kind's p95", g)
	}
	a2.conn.Close()
	a3.conn.Close()
	a4 := dial(t, b)
	// 700 in use if the abandoned leases leaked; 0 if released.
	deadline := time.Now().Add(5 * time.Second)
	for b.Counters().Abandoned < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b.SetBudget(400)
	mustGrant(t, a4.acquireAsync(KindCompile, "src/z.c"), "after abandoned leases")
	b.mu.Lock()
	inUse, running := b.inUse, b.running
	b.mu.Unlock()
	if inUse != 300 || running != 1 {
		t.Errorf("in use %d by %d commands, want 300 by 1", inUse, running)
	}
}

func TestBrokerProtocolErrors(t *testing.T) {
	b := startBroker(t, BrokerOptions{Budget: 1000})
	for _, tc := range []struct{ name, send, want string }{
		{"not json", "hello\n", "bad broker message"},
		{"done first", `{"op":"done","peak_rss":1}` + "\n", "first message must be acquire"},
		{"bad kind", `{"op":"acquire","kind":"lint","key":"x"}` + "\n", "neither compile nor link"},
		{"unknown field", `{"op":"acquire","kind":"compile","bytes_wanted":3}` + "\n", "unknown field"},
	} {
		c := dial(t, b)
		c.sendRaw(tc.send)
		m, err := c.recv(5 * time.Second)
		if err != nil || m.Op != "error" || !strings.Contains(m.Error, tc.want) {
			t.Errorf("%s: got %+v, %v; want an error containing %q", tc.name, m, err, tc.want)
		}
	}
	// A message other than done after the grant is refused too.
	c := dial(t, b)
	mustGrant(t, c.acquireAsync(KindCompile, "a.c"), "a")
	c.send(brokerMsg{Op: "acquire", Kind: KindCompile})
	if m, err := c.recv(5 * time.Second); err != nil || m.Op != "error" {
		t.Errorf("second acquire on one lease: got %+v, %v", m, err)
	}
	// The broker still works after all that.
	mustGrant(t, dial(t, b).acquireAsync(KindLink, "app"), "after errors")
}

func TestBrokerOptionsErrors(t *testing.T) {
	if _, err := StartBroker(context.Background(), BrokerOptions{}); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("zero budget: %v", err)
	}
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120), "sock")
	if _, err := StartBroker(context.Background(), BrokerOptions{Budget: 1, SocketPath: long}); err == nil || !strings.Contains(err.Error(), "107") {
		t.Errorf("long socket path: %v", err)
	}
}

func TestBrokerCloseSavesStatsAndEndsWaiters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stats", "llvm-15.json")
	b, err := StartBroker(context.Background(), BrokerOptions{Budget: 100, StatsPath: path, Stats: NewStats("llvm", "15"),
		Declared: Profile{CompileBytes: 60}})
	if err != nil {
		t.Fatal(err)
	}
	a, w := dial(t, b), dial(t, b)
	mustGrant(t, a.acquireAsync(KindCompile, "/src/a.cpp"), "a")
	a.done(50, false)
	mustGrant(t, a.acquireAsyncFresh(t, b, "/src/b.cpp"), "b")
	waiting := w.acquireAsync(KindCompile, "/src/c.cpp")
	mustWait(t, waiting, "c")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-waiting:
		if m.Op == "grant" {
			t.Errorf("waiter got a grant from a closed broker")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not released by Close")
	}
	s, err := LoadStats(path, "llvm", "15")
	if err != nil {
		t.Fatal(err)
	}
	if v, n := s.CommandP95(CommandID{Kind: KindCompile, Key: "/src/a.cpp"}); v != 50 || n != 1 {
		t.Errorf("saved stats: p95 %d over %d", v, n)
	}
	if _, err := os.Stat(b.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// acquireAsyncFresh takes a lease on a new connection that the test never
// returns (it is ended by Close).
func (c *client) acquireAsyncFresh(t *testing.T, b *Broker, key string) <-chan brokerMsg {
	return dial(t, b).acquireAsync(KindCompile, key)
}

func TestBrokerManyConcurrentLeasesStayWithinBudget(t *testing.T) {
	b := startBroker(t, BrokerOptions{Budget: 1000, Declared: Profile{CompileBytes: 250}})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, b)
			m := <-c.acquireAsync(KindCompile, "f"+string(rune('a'+i%26))+".c")
			if m.Op != "grant" {
				t.Errorf("lease %d: %+v", i, m)
				return
			}
			time.Sleep(2 * time.Millisecond)
			c.send(brokerMsg{Op: "done", PeakRSS: 1})
			c.recv(5 * time.Second)
		}()
	}
	wg.Wait()
	got := b.Counters()
	// After the first report the estimate is learned (1 byte with margin),
	// so concurrency may rise, but the declared phase must respect 4 x 250.
	if got.Granted != 40 || got.Completed != 40 || got.PeakBytes > 1000 {
		t.Errorf("counters = %+v", got)
	}
}
