package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
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

func itoa(i int) string { return strconv.Itoa(i) }
