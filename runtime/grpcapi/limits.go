package grpcapi

import (
	"net"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits bound what one client can hold of the gRPC service. Zero fields
// select the defaults below; flag names are Triton's where it has the
// setting (--grpc-keepalive-*, --grpc-http2-min-recv-ping-interval-without-data).
type Limits struct {
	// MaxRecvMsgSize bounds one request message in bytes
	// (--grpc-max-recv-message-size).
	MaxRecvMsgSize int
	// MaxSendMsgSize bounds one response message in bytes
	// (--grpc-max-send-message-size).
	MaxSendMsgSize int
	// MaxConcurrentStreams bounds the RPCs one connection runs at once
	// (--grpc-max-concurrent-streams).
	MaxConcurrentStreams uint32
	// MaxConnections bounds the connections served at once
	// (--grpc-max-connections); further clients wait in the listen backlog.
	// Negative means no bound.
	MaxConnections int
	// KeepaliveTime is how often the server pings an idle connection and
	// KeepaliveTimeout how long it waits for the answer before closing it
	// (--grpc-keepalive-time, --grpc-keepalive-timeout, milliseconds).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepalivePermitWithoutCalls lets clients ping while no RPC runs
	// (--grpc-keepalive-permit-without-calls).
	KeepalivePermitWithoutCalls bool
	// MinRecvPingInterval is the shortest interval between client pings
	// the server tolerates; a client pinging faster is disconnected
	// (--grpc-http2-min-recv-ping-interval-without-data, milliseconds).
	MinRecvPingInterval time.Duration
	// MaxConnectionIdle closes, with a GOAWAY that clients recover from, a
	// connection without RPCs for this long (--grpc-max-connection-idle-secs);
	// negative never.
	MaxConnectionIdle time.Duration
	// HandshakeTimeout bounds a new connection's HTTP/2 setup, so that a
	// socket that never speaks is closed (--grpc-handshake-timeout-secs).
	HandshakeTimeout time.Duration
	// MaxConnectionAge sends a connection GOAWAY once it is this old, so
	// that clients reconnect (and rebalance); its RPCs then have
	// MaxConnectionAgeGrace to finish before it is closed (Triton's
	// --grpc-max-connection-age and --grpc-max-connection-age-grace,
	// milliseconds). Zero means no age limit, Triton's default.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// Defaults of Limits: Triton's keepalive defaults (gRPC core's), and
// message sizes matching the HTTP frontend's input limit and the server's
// response limit.
const (
	DefaultMaxRecvMsgSize       = 64 << 20
	DefaultMaxSendMsgSize       = 1<<30 + 1<<20 // a 1 GiB response and its framing
	DefaultMaxConcurrentStreams = 128
	DefaultKeepaliveTime        = 2 * time.Hour
	DefaultKeepaliveTimeout     = 20 * time.Second
	DefaultMinRecvPingInterval  = 5 * time.Minute
	DefaultMaxConnectionIdle    = 5 * time.Minute
	DefaultHandshakeTimeout     = 10 * time.Second
	defaultMaxConnections       = 1024
)

func (l Limits) withDefaults() Limits {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if l.MaxRecvMsgSize <= 0 {
		l.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if l.MaxSendMsgSize <= 0 {
		l.MaxSendMsgSize = DefaultMaxSendMsgSize
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = defaultMaxConnections
	}
	set(&l.KeepaliveTime, DefaultKeepaliveTime)
	set(&l.KeepaliveTimeout, DefaultKeepaliveTimeout)
	set(&l.MinRecvPingInterval, DefaultMinRecvPingInterval)
	set(&l.MaxConnectionIdle, DefaultMaxConnectionIdle)
	set(&l.HandshakeTimeout, DefaultHandshakeTimeout)
	return l
}

func (l Limits) serverOptions() []grpc.ServerOption {
	l = l.withDefaults()
	params := keepalive.ServerParameters{Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout}
	if l.MaxConnectionIdle > 0 {
		params.MaxConnectionIdle = l.MaxConnectionIdle
	}
	if l.MaxConnectionAge > 0 {
		params.MaxConnectionAge = l.MaxConnectionAge
	}
	if l.MaxConnectionAgeGrace > 0 {
		params.MaxConnectionAgeGrace = l.MaxConnectionAgeGrace
	}
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(l.MaxSendMsgSize),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.MinRecvPingInterval,
			PermitWithoutStream: l.KeepalivePermitWithoutCalls,
		}),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		// Without workers grpc-go starts a goroutine per RPC, whose stack
		// then grows through the handler's depth (runtime.newstack was a
		// tenth of the server's CPU under 64 one-stream connections);
		// workers keep their grown stacks. RPCs beyond them still get a
		// goroutine of their own, so this bounds nothing but idle workers.
		grpc.NumStreamWorkers(streamWorkers),
		// Fixed flow-control windows turn off grpc-go's bandwidth-delay
		// estimation, which pings the client whenever data arrives and no
		// ping is out: about a fifth of the writes per request under 64
		// one-stream connections, and a read for each ack. They are the
		// largest window the estimation grows to, so no link gets a
		// smaller one than before, and a client can hold no more unread
		// data than it could make the estimation allow.
		grpc.StaticStreamWindowSize(flowWindow),
		grpc.StaticConnWindowSize(flowWindow),
		// Each connection keeps its write buffer rather than returning it to
		// a pool after every flush: a sync.Pool drops what it holds over
		// collections, and with one response per flush every connection
		// then allocates (and clears) a new 32 KiB buffer, which under 64
		// one-stream connections was a twentieth of the server's
		// instructions per call and made collections come sooner. The cost
		// is the buffer held per open connection (bounded by
		// MaxConnections), as the read buffer already is. grpc-go marks the
		// option deprecated; it still honours it, and its removal would
		// show at the upgrade's build.
		grpc.SharedWriteBuffer(false), //nolint:staticcheck // see above
	}
}

// flowWindow is the stream and connection flow-control window: grpc-go's
// limit for its estimated windows (16 MiB).
const flowWindow = 16 << 20

// streamWorkers is the number of goroutines kept to run RPCs: the
// concurrency a busy client typically keeps in flight (bench/serving's 64),
// each idle one holding only its stack.
const streamWorkers = 64

// Listener bounds the connections accepted from ln at once.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.withDefaults()
	if l.MaxConnections < 0 {
		return ln
	}
	return netutil.LimitListener(ln, l.MaxConnections)
}
