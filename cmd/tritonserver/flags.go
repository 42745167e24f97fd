package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/grpcapi"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

// config is the parsed command line. Flag names and defaults follow
// Triton's tritonserver.
type config struct {
	repositories      []string
	httpPort          int
	httpAddress       string
	grpcPort          int
	grpcAddress       string
	metricsPort       int
	metricsAddress    string
	allowHTTP         bool
	allowGRPC         bool
	allowMetrics      bool
	strictModelConfig bool
	strictInputShapes bool
	strictReadiness   bool
	exitOnError       bool
	exitTimeout       time.Duration
	httpMaxInputSize  int64
	logVerbose        int
	logFile           string
	backendConfig     map[string]map[string]string // backend ("" = every backend) -> key -> value
	id                string
	modelControlMode  string
	pollSecs          int
	loadModels        []string

	// What one client or model can hold of the server: every bound is
	// here, parsed in parseLimits, and handed to the frontends' and the
	// repository's Options.
	maxResponseSize int64
	httpLimits      httpapi.Limits
	grpcLimits      grpcapi.Limits
}

// listFlag collects a repeatable string flag.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}
func (l listFlag) Set(s string) error { *l.v = append(*l.v, s); return nil }

// backendConfigFlag parses --backend-config=<backend>,<key>=<value> and the
// backend-less form --backend-config=<key>=<value>.
type backendConfigFlag struct{ m map[string]map[string]string }

func (b backendConfigFlag) String() string { return "" }
func (b backendConfigFlag) Set(s string) error {
	be, kv, hasBackend := strings.Cut(s, ",")
	if !hasBackend {
		be, kv = "", s
	}
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" || (hasBackend && be == "") {
		return fmt.Errorf("want <backend>,<setting>=<value> or <setting>=<value>, got %q", s)
	}
	if b.m[be] == nil {
		b.m[be] = map[string]string{}
	}
	b.m[be][k] = v
	return nil
}

// parseFlags parses args (without the program name). --help prints the
// usage to out and returns flag.ErrHelp.
func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{backendConfig: map[string]map[string]string{}}
	fs := flag.NewFlagSet("tritonserver", flag.ContinueOnError)
	// Errors are reported by the caller, without the whole usage text.
	fs.SetOutput(io.Discard)
	fs.Var(listFlag{&c.repositories}, "model-repository", "path to a model repository (repeatable; also --model-store)")
	fs.Var(listFlag{&c.repositories}, "model-store", "alias of --model-repository")
	fs.IntVar(&c.httpPort, "http-port", 8000, "port of the HTTP service")
	fs.StringVar(&c.httpAddress, "http-address", "0.0.0.0", "address the HTTP service binds to")
	fs.IntVar(&c.grpcPort, "grpc-port", 8001, "port of the GRPC service")
	fs.StringVar(&c.grpcAddress, "grpc-address", "0.0.0.0", "address the GRPC service binds to")
	fs.IntVar(&c.metricsPort, "metrics-port", 8002, "port of the metrics service (/metrics)")
	fs.StringVar(&c.metricsAddress, "metrics-address", "0.0.0.0", "address the metrics service binds to")
	fs.BoolVar(&c.allowHTTP, "allow-http", true, "serve the HTTP protocol")
	fs.BoolVar(&c.allowGRPC, "allow-grpc", true, "serve the GRPC protocol")
	fs.BoolVar(&c.allowMetrics, "allow-metrics", true, "serve Prometheus metrics")
	fs.BoolVar(&c.strictInputShapes, "strict-input-shapes", false, "refuse, as Triton does, inputs with one more leading dimension than a max_batch_size 0 model declares (by default they pass through, as the field report's client needs)")
	fs.BoolVar(&c.strictModelConfig, "strict-model-config", false, "require config.pbtxt for every model (when false, a backend that can auto-complete a configuration may serve a model without one)")
	fs.BoolVar(&c.strictReadiness, "strict-readiness", true, "report ready only when every model is ready")
	fs.BoolVar(&c.exitOnError, "exit-on-error", true, "exit when a model fails to load at startup")
	secs := fs.Int("exit-timeout-secs", 30, "seconds to drain in-flight requests on shutdown")
	fs.Int64Var(&c.httpMaxInputSize, "http-max-input-size", 64<<20, "largest HTTP request body accepted, in bytes")
	fs.IntVar(&c.logVerbose, "log-verbose", 0, "verbose logging level (0 off, 1 and up more detail)")
	fs.StringVar(&c.logFile, "log-file", "", "write the log to this file instead of standard error")
	fs.Var(backendConfigFlag{c.backendConfig}, "backend-config", "backend setting <backend>,<setting>=<value> (repeatable)")
	fs.StringVar(&c.id, "id", "triton", "server identifier reported by the metadata endpoint")
	fs.StringVar(&c.modelControlMode, "model-control-mode", "none", "model control mode: none (load everything at startup), poll (follow repository changes every --repository-poll-secs) or explicit (load and unload on request; --load-model at startup)")
	fs.IntVar(&c.pollSecs, "repository-poll-secs", 15, "seconds between repository polls (poll mode)")
	fs.Var(listFlag{&c.loadModels}, "load-model", "model to load at startup (explicit mode; repeatable; * loads every model)")
	lim := addLimitFlags(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(out, "Usage: tritonserver --model-repository=<path> [options]\n\nOptions (--flag=value or --flag value; booleans as --flag=false):\n")
			fs.SetOutput(out)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (booleans take the form --flag=false)", fs.Arg(0))
	}
	c.exitTimeout = time.Duration(*secs) * time.Second
	if err := lim.apply(c); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func (c *config) validate() error {
	if len(c.repositories) == 0 {
		return errors.New("--model-repository must be given")
	}
	switch c.modelControlMode {
	case "none", "poll", "explicit":
	default:
		return fmt.Errorf("--model-control-mode must be none, poll or explicit, got %q", c.modelControlMode)
	}
	if len(c.loadModels) > 0 && c.modelControlMode != "explicit" {
		return errors.New("--load-model requires --model-control-mode=explicit")
	}
	for name, p := range map[string]int{"http-port": c.httpPort, "grpc-port": c.grpcPort, "metrics-port": c.metricsPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("--%s %d is not a port number", name, p)
		}
	}
	if c.httpMaxInputSize <= 0 {
		return fmt.Errorf("--http-max-input-size must be positive, got %d", c.httpMaxInputSize)
	}
	if c.exitTimeout < 0 {
		return errors.New("--exit-timeout-secs must not be negative")
	}
	if c.pollSecs < 0 {
		return errors.New("--repository-poll-secs must not be negative")
	}
	return nil
}

// settingsFor merges the backend-less --backend-config settings with those
// for backend be (the specific ones win).
func (c *config) settingsFor(be string) map[string]string {
	out := map[string]string{}
	for k, v := range c.backendConfig[""] {
		out[k] = v
	}
	for k, v := range c.backendConfig[be] {
		out[k] = v
	}
	return out
}

// limitFlags are the flags of the bounds on clients and models, in Triton's
// units (seconds, milliseconds for its gRPC keepalive flags, bytes).
type limitFlags struct {
	maxResponse                    *int64
	httpHeader, httpIdle           *int
	httpMinRate                    *int64
	httpConns                      *int
	grpcRecv, grpcSend             *int
	grpcStreams                    *uint
	grpcConns                      *int
	keepTime, keepTimeout, minPing *int
	permitWithoutCalls             *bool
	grpcIdle, grpcHandshake        *int
}

func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	return &limitFlags{
		maxResponse:        fs.Int64("max-response-size", repository.DefaultMaxResponseSize, "largest response, in bytes of output, one request may get (refused before the model runs when the config fixes the output sizes); -1 for no bound"),
		httpHeader:         fs.Int("http-header-timeout-secs", int(httpapi.DefaultHeaderTimeout/time.Second), "seconds a client has to send a request's headers; also the grace before --http-body-min-rate applies (-1: none)"),
		httpIdle:           fs.Int("http-idle-timeout-secs", int(httpapi.DefaultIdleTimeout/time.Second), "seconds an HTTP keep-alive connection may sit idle before it is closed (-1: never)"),
		httpMinRate:        fs.Int64("http-body-min-rate", httpapi.DefaultBodyMinRate, "slowest rate, in bytes per second, at which a request body must arrive (-1: any)"),
		httpConns:          fs.Int("http-max-connections", 0, "HTTP connections served at once; more wait until one closes (0: a quarter of the open-file limit, at least 64; -1: no bound)"),
		grpcRecv:           fs.Int("grpc-max-recv-message-size", grpcapi.DefaultMaxRecvMsgSize, "largest GRPC request message, in bytes"),
		grpcSend:           fs.Int("grpc-max-send-message-size", grpcapi.DefaultMaxSendMsgSize, "largest GRPC response message, in bytes"),
		grpcStreams:        fs.Uint("grpc-max-concurrent-streams", grpcapi.DefaultMaxConcurrentStreams, "GRPC calls one connection may run at once"),
		grpcConns:          fs.Int("grpc-max-connections", 0, "GRPC connections served at once; more wait until one closes (0: 1024; -1: no bound)"),
		keepTime:           fs.Int("grpc-keepalive-time", int(grpcapi.DefaultKeepaliveTime/time.Millisecond), "milliseconds between the server's keepalive pings on an idle GRPC connection"),
		keepTimeout:        fs.Int("grpc-keepalive-timeout", int(grpcapi.DefaultKeepaliveTimeout/time.Millisecond), "milliseconds the server waits for a keepalive ping's answer before closing the connection"),
		minPing:            fs.Int("grpc-http2-min-recv-ping-interval-without-data", int(grpcapi.DefaultMinRecvPingInterval/time.Millisecond), "shortest interval, in milliseconds, between client pings the server tolerates; faster clients are disconnected"),
		permitWithoutCalls: fs.Bool("grpc-keepalive-permit-without-calls", false, "let clients send keepalive pings while no call runs"),
		grpcIdle:           fs.Int("grpc-max-connection-idle-secs", int(grpcapi.DefaultMaxConnectionIdle/time.Second), "seconds a GRPC connection without calls stays open before the server sends GOAWAY (-1: never)"),
		grpcHandshake:      fs.Int("grpc-handshake-timeout-secs", int(grpcapi.DefaultHandshakeTimeout/time.Second), "seconds a new GRPC connection has to complete its HTTP/2 setup"),
	}
}

// apply validates the limit flags and stores them in c.
func (l *limitFlags) apply(c *config) error {
	secs := func(name string, v int) (time.Duration, error) {
		switch {
		case v == -1:
			return -1, nil
		case v <= 0:
			return 0, fmt.Errorf("--%s must be positive or -1, got %d", name, v)
		}
		return time.Duration(v) * time.Second, nil
	}
	millis := func(name string, v int) (time.Duration, error) {
		if v <= 0 {
			return 0, fmt.Errorf("--%s must be positive, got %d", name, v)
		}
		return time.Duration(v) * time.Millisecond, nil
	}
	var errs []error
	check := func(d time.Duration, err error) time.Duration { errs = append(errs, err); return d }
	c.maxResponseSize = *l.maxResponse
	if c.maxResponseSize == 0 || c.maxResponseSize < -1 {
		errs = append(errs, fmt.Errorf("--max-response-size must be positive or -1, got %d", c.maxResponseSize))
	}
	c.httpLimits = httpapi.Limits{
		HeaderTimeout:  check(secs("http-header-timeout-secs", *l.httpHeader)),
		IdleTimeout:    check(secs("http-idle-timeout-secs", *l.httpIdle)),
		BodyMinRate:    *l.httpMinRate,
		MaxConnections: *l.httpConns,
	}
	if *l.httpMinRate == 0 || *l.httpMinRate < -1 {
		errs = append(errs, fmt.Errorf("--http-body-min-rate must be positive or -1, got %d", *l.httpMinRate))
	}
	if *l.httpConns < -1 || *l.grpcConns < -1 {
		errs = append(errs, errors.New("--http-max-connections and --grpc-max-connections must be >= -1"))
	}
	if *l.grpcRecv <= 0 || *l.grpcSend <= 0 || *l.grpcStreams == 0 || *l.grpcStreams > 1<<31 {
		errs = append(errs, errors.New("--grpc-max-recv-message-size, --grpc-max-send-message-size and --grpc-max-concurrent-streams must be positive"))
	}
	c.grpcLimits = grpcapi.Limits{
		MaxRecvMsgSize:              *l.grpcRecv,
		MaxSendMsgSize:              *l.grpcSend,
		MaxConcurrentStreams:        uint32(min(*l.grpcStreams, 1<<31)),
		MaxConnections:              *l.grpcConns,
		KeepaliveTime:               check(millis("grpc-keepalive-time", *l.keepTime)),
		KeepaliveTimeout:            check(millis("grpc-keepalive-timeout", *l.keepTimeout)),
		KeepalivePermitWithoutCalls: *l.permitWithoutCalls,
		MinRecvPingInterval:         check(millis("grpc-http2-min-recv-ping-interval-without-data", *l.minPing)),
		MaxConnectionIdle:           check(secs("grpc-max-connection-idle-secs", *l.grpcIdle)),
		HandshakeTimeout:            check(secs("grpc-handshake-timeout-secs", *l.grpcHandshake)),
	}
	if c.grpcLimits.HandshakeTimeout < 0 {
		errs = append(errs, errors.New("--grpc-handshake-timeout-secs must be positive"))
	}
	return errors.Join(errs...)
}

func itoa(i int) string { return strconv.Itoa(i) }
