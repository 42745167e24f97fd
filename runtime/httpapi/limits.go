package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Limits bound what one client can hold of an HTTP service: time to send
// the request headers, time a kept-alive connection may sit idle, the rate
// a request body must arrive at, and the connections open at once. The
// zero value of a field selects its default (DefaultLimits); a negative
// duration or rate turns that bound off.
type Limits struct {
	// HeaderTimeout bounds reading a request's headers
	// (--http-header-timeout-secs). It is also the grace a body gets
	// before BodyMinRate applies.
	HeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long (--http-idle-timeout-secs).
	IdleTimeout time.Duration
	// BodyMinRate is the slowest a request body may arrive, in bytes per
	// second averaged from the end of the headers (--http-body-min-rate):
	// n bytes must be in within HeaderTimeout + n/BodyMinRate.
	BodyMinRate int64
	// MaxConnections bounds the connections served at once
	// (--http-max-connections); further clients wait in the listen
	// backlog until one closes.
	MaxConnections int
}

// Defaults of Limits.
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout   = 60 * time.Second
	DefaultBodyMinRate   = 64 << 10 // 64 KiB/s: 16 minutes for a 64 MiB body
)

// DefaultMaxConnections is the connection bound used when MaxConnections
// is 0: a quarter of the process's open-file limit (the HTTP, gRPC and
// metrics services share it with model files, pipes and shared memory),
// at least 64.
func DefaultMaxConnections() int {
	return max(openFileLimit()/4, 64)
}

func openFileLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 16
	}
	return int(rl.Cur)
}

// withDefaults resolves zero fields.
func (l Limits) withDefaults() Limits {
	if l.HeaderTimeout == 0 {
		l.HeaderTimeout = DefaultHeaderTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.BodyMinRate == 0 {
		l.BodyMinRate = DefaultBodyMinRate
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections()
	}
	return l
}

// NewHTTPServer returns an http.Server for h that applies the header and
// idle timeouts of l; serve it on l.Listener's result so that the
// connection bound holds too.
func (l Limits) NewHTTPServer(h http.Handler) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: positive(l.HeaderTimeout),
		IdleTimeout:       positive(l.IdleTimeout),
	}
}

// Listener bounds the connections accepted from ln at once, and gives
// them read deadlines that reach the socket only when a read runs under
// them (lazyListener): the timeouts above cost a timer each otherwise.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.withDefaults()
	lazy := &lazyListener{Listener: ln, done: make(chan struct{})}
	if l.MaxConnections >= 0 {
		lazy.slots = make(chan struct{}, l.MaxConnections)
	}
	return lazy
}

// positive maps a turned-off (negative) duration to net/http's "none".
func positive(d time.Duration) time.Duration { return max(d, 0) }

// body returns r's body decoded, bounded to limit bytes and held to the
// minimum arrival rate; the caller closes it with closeBody. The error is
// a *backend.Error.
func (s *Server) body(w http.ResponseWriter, r *http.Request, limit int64) (*bodyReader, error) {
	br := new(bodyReader)
	if err := s.openBody(br, w, r, limit, time.Now()); err != nil {
		return nil, err
	}
	return br, nil
}

// closeBody hands a decoded body's decoder back for reuse once the body
// is read (or abandoned); br must not be read after.
func (s *Server) closeBody(br *bodyReader) {
	if br.dec != nil {
		s.unzip.close(br.dec)
		br.dec = nil
	}
}

// bodyReader reads a request body decoded, bounded and, unless the rate
// bound is off, paced. A value rather than a chain of readers, so that a
// caller reading the body itself (readBody) keeps it on its stack.
type bodyReader struct {
	src   io.Reader
	dec   *decoding // the pooled decoder under src, for closeBody
	pace  paced
	paced bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.paced {
		return b.pace.Read(p)
	}
	return b.src.Read(p)
}

// openBody sets br up to read r's body as body describes; the rate
// counts from start, when the handler began (the end of the headers).
func (s *Server) openBody(br *bodyReader, w http.ResponseWriter, r *http.Request, limit int64, start time.Time) error {
	rd := r.Body
	decoded := false
	// The Content-Encodings this frontend reads; anything else is refused
	// with 415 before the body is read.
	switch enc := strings.ToLower(strings.TrimSpace(headerValue(r.Header, "Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "deflate":
		dec, err := s.unzip.open(enc, rd)
		if err != nil {
			return err
		}
		br.dec, rd, decoded = dec, dec, true
	default:
		return backend.Errorf(backend.UnsupportedMedia, "unsupported Content-Encoding '%s' (this server reads identity, gzip and deflate)", enc)
	}
	// A body of a known length within the limit cannot pass it (net/http
	// reads exactly Content-Length bytes); a decoded or chunked one can.
	if decoded || r.ContentLength < 0 || r.ContentLength > limit {
		rd = http.MaxBytesReader(w, rd, limit)
	}
	br.src = rd
	lim := s.opts.Limits // defaults resolved in New
	if lim.BodyMinRate < 0 {
		return nil
	}
	br.paced = true
	whole := int64(-1)
	if !decoded {
		whole = r.ContentLength
	}
	br.pace = paced{r: rd, rc: *http.NewResponseController(w), start: start, grace: positive(lim.HeaderTimeout), rate: lim.BodyMinRate, whole: whole}
	return nil
}

// paced moves the connection's read deadline ahead of each read so that
// the body's n-th byte must arrive within grace + n/rate of the start: a
// client that stalls, or trickles below the rate, is cut off instead of
// holding its connection and buffer forever.
type paced struct {
	r     io.Reader
	rc    http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
	// whole is the body's length when known (-1 if not): once it is
	// read, the read that returns EOF does not touch the connection and
	// needs no deadline (each costs a timer update, a measurable part of
	// a small request).
	whole int64
	armed bool // a deadline is set
}

func (p *paced) Read(b []byte) (int, error) {
	if p.whole < 0 || p.n < p.whole {
		due := p.start.Add(p.grace + time.Duration(float64(p.n+1)/float64(p.rate)*float64(time.Second)))
		// Recorders and other non-connection writers cannot set
		// deadlines; the bound then rests on the server's own timeouts.
		_ = p.rc.SetReadDeadline(due)
		p.armed = true
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, backend.Errorf(backend.InvalidArg, "the request body arrived slower than %d bytes per second (--http-body-min-rate): %d bytes in %s", p.rate, p.n, time.Since(p.start).Round(time.Millisecond))
	}
	if err == io.EOF && p.armed {
		_ = p.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
