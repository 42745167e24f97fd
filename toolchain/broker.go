package toolchain

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// BrokerEnv is the environment variable that tells Launch where the broker
// listens. Without it Launch runs commands directly.
const BrokerEnv = "TRITONBUILD_BROKER"

// maxSocketPath is the size of sun_path minus its terminating NUL.
const maxSocketPath = 107

// The broker protocol is one JSON object per line over a Unix stream socket.
// A connection is one command's lease:
//
//	launcher -> {"op":"acquire","kind":"compile","key":"src/a.cpp","cwd":"/b","pid":7}
//	broker   -> {"op":"grant","bytes":1288490188,"estimate":"p95 of 3 runs of this command"}
//	         (the command runs)
//	launcher -> {"op":"done","peak_rss":1100000000,"wall_ms":5120,"exit":0,"oom":false}
//	broker   -> {"op":"ok"}
//
// The grant is held until "done" arrives or the connection drops, so a
// launcher killed mid-command cannot leak budget. A malformed line gets
// {"op":"error","error":"..."} and the connection is closed.
type brokerMsg struct {
	Op       string `json:"op"`
	Kind     Kind   `json:"kind,omitempty"`
	Key      string `json:"key,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	Estimate string `json:"estimate,omitempty"`
	PeakRSS  int64  `json:"peak_rss,omitempty"`
	WallMS   int64  `json:"wall_ms,omitempty"`
	Exit     int    `json:"exit,omitempty"`
	OOM      bool   `json:"oom,omitempty"`
	Error    string `json:"error,omitempty"`
	// Remote marks a compile sent to a distcc host.
	Remote bool `json:"remote,omitempty"`
}

// DefaultRemoteCompileBytes is the local memory of a compile that a distcc
// host runs: the preprocessor (LLVM's largest preprocess to well under
// 256 MiB) plus the client.
const DefaultRemoteCompileBytes = 256 << 20

// BrokerOptions configures StartBroker.
type BrokerOptions struct {
	// SocketPath is where to listen; "" creates one in a new temporary
	// directory (removed by Close). Unix socket paths are limited to 107
	// bytes, so deep build directories are a poor place for it.
	SocketPath string
	// Budget is the memory the broker may grant at once (usually
	// JobPlan.Budget: usable memory minus reserve). Required.
	Budget int64
	// Stats is the learned profile to estimate from and record into; nil
	// means a fresh one. StatsPath, when set, is where Close saves it.
	Stats     *Stats
	StatsPath string
	// Declared is the recipe's declared per-job memory, used before
	// anything is learned.
	Declared Profile
	// Margin multiplies learned figures (peak RSS misses page tables,
	// kernel memory and the launcher itself); 0 means 1.15.
	Margin float64
	// TrimPrefixes are removed from command keys (made absolute first), so
	// that a file's history survives a new source or build directory.
	TrimPrefixes []string
	// RemoteCompileBytes is what a compile sent to a distcc host costs
	// here (its preprocessing and the client); 0 means
	// DefaultRemoteCompileBytes. Such compiles are not recorded in the
	// stats: their local peak says nothing about the compile itself.
	RemoteCompileBytes int64
	// Logf receives one line per notable event (oversize grants, OOM
	// reports); nil discards them.
	Logf func(format string, args ...any)
}

// Counters are what the broker saw during one build.
type Counters struct {
	Granted   int64 `json:"granted"`
	Completed int64 `json:"completed"`
	// Waited counts requests that had to queue for memory (granted later
	// or abandoned while queued).
	Waited int64 `json:"waited"`
	// Oversize counts requests larger than the whole budget, run alone.
	Oversize int64 `json:"oversize"`
	// Abandoned counts leases whose connection dropped without a report.
	Abandoned int64 `json:"abandoned"`
	// OOMKills counts commands the launcher reported as OOM-killed.
	OOMKills int64 `json:"oom_kills"`
	// Remote counts compiles granted as sent to distcc hosts.
	Remote          int64         `json:"remote"`
	PeakConcurrency int           `json:"peak_concurrency"`
	PeakBytes       int64         `json:"peak_bytes"`
	WaitTime        time.Duration `json:"wait_time_ns"`
}

// Broker grants memory to compile and link commands so that those running
// at once fit into a budget. Requests are served in arrival order; one that
// does not fit waits (and holds back those behind it, so big links are not
// starved by a stream of small compiles), except that a request larger
// than the whole budget is granted when nothing else runs, so no build can
// deadlock on its biggest command.
type Broker struct {
	opts     BrokerOptions
	ln       net.Listener
	tmpDir   string
	stats    *Stats
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	budget   int64
	inUse    int64
	running  int
	queue    []*waiter
	counters Counters
	closed   bool
}

type waiter struct {
	id       CommandID
	remote   bool
	need     int64
	estimate string
	queued   time.Time
	ready    chan struct{}
}

// StartBroker listens on the socket and serves launchers in goroutines until
// ctx ends or Close is called.
func StartBroker(ctx context.Context, opts BrokerOptions) (*Broker, error) {
	if opts.Budget <= 0 {
		return nil, fmt.Errorf("starting memory broker: budget %d is not positive", opts.Budget)
	}
	if opts.Margin == 0 {
		opts.Margin = 1.15
	}
	if opts.RemoteCompileBytes <= 0 {
		opts.RemoteCompileBytes = DefaultRemoteCompileBytes
	}
	if opts.Margin < 1 {
		return nil, fmt.Errorf("starting memory broker: margin %v is below 1", opts.Margin)
	}
	b := &Broker{opts: opts, budget: opts.Budget, stats: opts.Stats}
	if b.stats == nil {
		b.stats = NewStats("", "")
	}
	sock := opts.SocketPath
	if sock == "" {
		dir, err := os.MkdirTemp("", "tbroker")
		if err != nil {
			return nil, fmt.Errorf("starting memory broker: %w", err)
		}
		b.tmpDir = dir
		sock = filepath.Join(dir, "sock")
	}
	if abs, err := filepath.Abs(sock); err == nil {
		sock = abs
	}
	if len(sock) > maxSocketPath {
		b.cleanupTmp()
		return nil, fmt.Errorf("starting memory broker: socket path %q is %d bytes, over the %d a Unix socket allows", sock, len(sock), maxSocketPath)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.cleanupTmp()
		return nil, fmt.Errorf("starting memory broker: %w", err)
	}
	b.ln = ln
	b.opts.SocketPath = sock
	b.ctx, b.cancel = context.WithCancel(ctx)
	b.wg.Add(1)
	go b.accept()
	go func() {
		<-b.ctx.Done()
		b.ln.Close()
	}()
	return b, nil
}

func (b *Broker) cleanupTmp() {
	if b.tmpDir != "" {
		os.RemoveAll(b.tmpDir)
	}
}

// SocketPath is where the broker listens.
func (b *Broker) SocketPath() string { return b.opts.SocketPath }

// Env returns the environment entries a launcher needs to find the broker;
// append them to the build tool's environment.
func (b *Broker) Env() []string { return []string{BrokerEnv + "=" + b.opts.SocketPath} }

// Stats is the learned profile the broker records into.
func (b *Broker) Stats() *Stats { return b.stats }

// Counters returns a snapshot of what the broker saw so far.
func (b *Broker) Counters() Counters {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counters
}

// Budget is the memory the broker grants at most at once.
func (b *Broker) Budget() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.budget
}

// SetBudget changes the budget for grants from now on (a retry after an OOM
// kill lowers it without restarting the broker).
func (b *Broker) SetBudget(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		b.budget = n
	}
	b.dispatchLocked()
}

// Close stops listening, ends open leases, saves the stats to StatsPath and
// removes the socket.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.cleanupTmp()
	if b.opts.StatsPath != "" {
		if err := b.stats.Save(b.opts.StatsPath); err != nil {
			return fmt.Errorf("closing memory broker: %w", err)
		}
	}
	return nil
}

func (b *Broker) logf(format string, args ...any) {
	if b.opts.Logf != nil {
		b.opts.Logf(format, args...)
	}
}

func (b *Broker) accept() {
	defer b.wg.Done()
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return // listener closed
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(conn)
		}()
	}
}

// estimateLocked decides what a command may use: p95 of its own history,
// else p95 of its kind, else the declared figure, else the default.
func (b *Broker) estimateLocked(id CommandID) (int64, string) {
	margin := func(v int64) int64 { return int64(float64(v) * b.opts.Margin) }
	if v, n := b.stats.CommandP95(id); n > 0 {
		return margin(v), fmt.Sprintf("p95 of %d runs of this command", n)
	}
	if v := b.stats.KindP95(id.Kind); v > 0 {
		return margin(v), fmt.Sprintf("p95 of learned %s commands", id.Kind)
	}
	if id.Kind == KindLink {
		if b.opts.Declared.LinkBytes > 0 {
			return b.opts.Declared.LinkBytes, "declared per-link memory"
		}
		return DefaultLinkBytes, "default per-link memory"
	}
	if b.opts.Declared.CompileBytes > 0 {
		return b.opts.Declared.CompileBytes, "declared per-compile memory"
	}
	return DefaultCompileBytes, "default per-compile memory"
}

// dispatchLocked grants from the head of the queue while grants fit. The
// estimate is taken at grant time so that a queue built up before anything
// was learned benefits from the first commands' measurements.
func (b *Broker) dispatchLocked() {
	// A closing broker grants nothing: its waiters are being sent away.
	for !b.closed && len(b.queue) > 0 {
		w := b.queue[0]
		w.need, w.estimate = b.estimateLocked(w.id)
		if w.remote {
			w.need, w.estimate = b.opts.RemoteCompileBytes, "remote compile: local preprocessing only"
		}
		oversize := w.need > b.budget
		if b.running > 0 && (oversize || b.inUse+w.need > b.budget) {
			return
		}
		b.queue = b.queue[1:]
		if oversize {
			b.counters.Oversize++
			b.logf("memory broker: %s %s needs %s (%s), over the %s budget: running it alone",
				w.id.Kind, w.id.Key, FormatBytes(w.need), w.estimate, FormatBytes(b.budget))
		}
		b.inUse += w.need
		b.running++
		b.counters.Granted++
		if w.remote {
			b.counters.Remote++
		}
		b.counters.WaitTime += time.Since(w.queued)
		b.counters.PeakConcurrency = max(b.counters.PeakConcurrency, b.running)
		b.counters.PeakBytes = max(b.counters.PeakBytes, b.inUse)
		close(w.ready)
	}
}

func (b *Broker) release(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse -= w.need
	b.running--
	b.dispatchLocked()
}

func (b *Broker) dequeue(w *waiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			// Those behind it may fit now.
			b.dispatchLocked()
			return true
		}
	}
	return false // already granted
}

// normaliseKey makes a command key stable across build directories.
func (b *Broker) normaliseKey(key, cwd string) string {
	if key == "" {
		return key
	}
	if !filepath.IsAbs(key) && cwd != "" {
		key = filepath.Join(cwd, key)
	}
	key = filepath.Clean(key)
	for _, p := range b.opts.TrimPrefixes {
		p = filepath.Clean(p)
		if rest, ok := strings.CutPrefix(key, p+string(filepath.Separator)); ok {
			return rest
		}
	}
	return key
}

func (b *Broker) serve(conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(b.ctx, func() { conn.Close() })
	defer stop()
	r := bufio.NewReaderSize(conn, maxLine)
	enc := json.NewEncoder(conn)
	fail := func(format string, args ...any) {
		_ = enc.Encode(brokerMsg{Op: "error", Error: fmt.Sprintf(format, args...)}) // the launcher may be gone already
	}
	var req brokerMsg
	if err := readMsg(r, &req); err != nil {
		if !errors.Is(err, errEOF) {
			fail("%v", err)
		}
		return
	}
	if req.Op != "acquire" {
		fail("first message must be acquire, got op %q", req.Op)
		return
	}
	if req.Kind != KindCompile && req.Kind != KindLink {
		fail("acquire: kind %q is neither compile nor link", req.Kind)
		return
	}
	id := CommandID{Kind: req.Kind, Key: b.normaliseKey(req.Key, req.Cwd)}
	w := &waiter{id: id, remote: req.Remote && req.Kind == KindCompile, ready: make(chan struct{})}

	// The next message is only read to notice a launcher that goes away
	// while it waits; it must not arrive before the grant.
	next := make(chan error, 1)
	var done brokerMsg
	go func() { next <- readMsg(r, &done) }()

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		fail("broker is closing")
		return
	}
	w.queued = time.Now()
	b.queue = append(b.queue, w)
	b.dispatchLocked()
	// Waited counts requests that were not granted on arrival; judging by
	// elapsed time instead miscounted on a loaded machine, where a goroutine
	// switch alone can take milliseconds.
	select {
	case <-w.ready:
	default:
		b.counters.Waited++
	}
	b.mu.Unlock()

	select {
	case <-w.ready:
	case err := <-next:
		if b.dequeue(w) {
			if err == nil {
				fail("got %q before the grant", done.Op)
			}
			return
		}
		// Granted in the meantime: treat it like a report after the grant.
		<-w.ready
		b.finish(w, enc, err, &done)
		return
	case <-b.ctx.Done():
		if b.dequeue(w) {
			return
		}
		<-w.ready
	}
	if err := enc.Encode(brokerMsg{Op: "grant", Bytes: w.need, Estimate: w.estimate}); err != nil {
		b.finish(w, enc, err, nil)
		return
	}
	b.finish(w, enc, <-next, &done)
}

// finish releases a granted lease and records the launcher's report.
func (b *Broker) finish(w *waiter, enc *json.Encoder, readErr error, done *brokerMsg) {
	defer b.release(w)
	if readErr != nil || done == nil {
		b.mu.Lock()
		b.counters.Abandoned++
		b.mu.Unlock()
		return
	}
	if done.Op != "done" {
		_ = enc.Encode(brokerMsg{Op: "error", Error: fmt.Sprintf("want op done after the grant, got %q", done.Op)}) // the launcher may be gone already
		b.mu.Lock()
		b.counters.Abandoned++
		b.mu.Unlock()
		return
	}
	if !w.remote {
		b.stats.Record(w.id, Sample{PeakRSS: done.PeakRSS, WallMS: done.WallMS}, done.OOM)
	}
	b.mu.Lock()
	b.counters.Completed++
	if done.OOM {
		b.counters.OOMKills++
	}
	b.mu.Unlock()
	if done.OOM {
		b.logf("memory broker: %s %s was OOM-killed (granted %s by %s)", w.id.Kind, w.id.Key, FormatBytes(w.need), w.estimate)
	}
	_ = enc.Encode(brokerMsg{Op: "ok"}) // the result is recorded; a launcher that left early loses only the ack
}

var errEOF = errors.New("connection closed")

// maxLine bounds one protocol line; keys are paths, so 64 KiB is plenty.
const maxLine = 64 << 10

func readMsg(r *bufio.Reader, m *brokerMsg) error {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("protocol line longer than %d bytes", r.Size())
	}
	if err != nil {
		if len(line) == 0 {
			return errEOF
		}
		return fmt.Errorf("reading broker message: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return fmt.Errorf("bad broker message %q: %w", strings.TrimSpace(string(line)), err)
	}
	return nil
}
