package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/access"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/grpcapi"
	"github.com/tritonbuild/tritonbuild/runtime/heapfloor"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/metrics"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
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
	logInfo           bool
	logWarning        bool
	logError          bool
	logFormat         string
	modelLoadThreads  int
	bufferThreads     int
	allowCPUMetrics   bool
	allowGPUMetrics   bool
	backendDirectory  string
	grpcCompression   string
	allowClientShm    bool
	trace             tracing.Options
	metrics           metrics.Config
	backendConfig     map[string]map[string]string // backend ("" = every backend) -> key -> value
	id                string
	modelControlMode  string
	pollSecs          int
	loadModels        []string
	cacheSize         int64 // --cache-config local,size=N; 0: no response cache
	gcHeapFloor       int64 // --gc-heap-floor-byte-size; 0: Go's default pacing
	rateLimit         string
	rateResources     []string
	hostPolicies      map[string]backend.HostPolicy // --host-policy=<policy>,cpu-cores=<list> / numa-node=<node>

	// What one client or model can hold of the server: every bound is
	// here, parsed in parseLimits, and handed to the frontends' and the
	// repository's Options.
	maxResponseSize int64
	maxConfigSize   int64
	httpRestricted  access.Rules
	grpcRestricted  access.Rules
	httpLimits      httpapi.Limits
	grpcLimits      grpcapi.Limits
}

// tritonBool is a boolean flag spelled as Triton accepts it: true, on, 1,
// false, off or 0 (any case). Like Go's boolean flags it may stand alone
// (--flag means true); splitBoolArgs lets it take its value as the next
// argument as well, as Triton's --flag true.
type tritonBool struct{ v *bool }

func (b tritonBool) String() string {
	if b.v == nil {
		return "false"
	}
	return strconv.FormatBool(*b.v)
}
func (b tritonBool) IsBoolFlag() bool { return true }
func (b tritonBool) Set(s string) error {
	v, ok := parseTritonBool(s)
	if !ok {
		return fmt.Errorf("invalid value for bool option: %s (want true, false, on, off, 1 or 0)", s)
	}
	*b.v = v
	return nil
}

func parseTritonBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "true", "on", "1":
		return true, true
	case "false", "off", "0":
		return false, true
	}
	return false, false
}

// verboseFlag is --log-verbose: an integer level, or true/false for 1/0
// as Triton accepts.
type verboseFlag struct{ v *int }

func (f verboseFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.Itoa(*f.v)
}
func (f verboseFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "true":
		*f.v = 1
		return nil
	case "false":
		*f.v = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a verbose level >= 0 (or true/false), got %q", s)
	}
	*f.v = n
	return nil
}

// splitBoolArgs joins "--flag value" into "--flag=value" for the boolean
// flags of fs when the value is one of Triton's boolean spellings, so that
// Triton's command lines (--strict-model-config false) parse unchanged
// while a bare --flag keeps meaning true.
func splitBoolArgs(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		if name != a && !strings.Contains(name, "=") && i+1 < len(args) {
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
					if _, ok := parseTritonBool(args[i+1]); ok {
						out = append(out, a+"="+args[i+1])
						i++
						continue
					}
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// refusedFlags are Triton flags this server does not implement, with the
// reason given when a command line uses one (instead of Go's "flag
// provided but not defined").
var refusedFlags = map[string]string{
	"repoagent-directory":              "repository agents are not supported by this server",
	"cuda-memory-pool-byte-size":       "this server has no GPU support",
	"cuda-virtual-address-size":        "this server has no GPU support",
	"min-supported-compute-capability": "this server has no GPU support",
	"model-load-gpu-limit":             "this server has no GPU support",
	"model-load-retry-count":           "load retries are not supported by this server",
	"allow-sagemaker":                  "the SageMaker frontend is not part of this server",
	"sagemaker-port":                   "the SageMaker frontend is not part of this server",
	"sagemaker-safe-port-range":        "the SageMaker frontend is not part of this server",
	"sagemaker-thread-count":           "the SageMaker frontend is not part of this server",
	"allow-vertex-ai":                  "the Vertex AI frontend is not part of this server",
	"vertex-ai-port":                   "the Vertex AI frontend is not part of this server",
	"vertex-ai-thread-count":           "the Vertex AI frontend is not part of this server",
	"vertex-ai-default-model":          "the Vertex AI frontend is not part of this server",
	"grpc-use-ssl":                     "TLS is not built into this server; terminate TLS in front of it",
	"grpc-use-ssl-mutual":              "TLS is not built into this server; terminate TLS in front of it",
	"grpc-server-cert":                 "TLS is not built into this server; terminate TLS in front of it",
	"grpc-server-key":                  "TLS is not built into this server; terminate TLS in front of it",
	"grpc-root-cert":                   "TLS is not built into this server; terminate TLS in front of it",
	"reuse-http-port":                  "SO_REUSEPORT sharing of a port is not supported by this server",
	"reuse-grpc-port":                  "SO_REUSEPORT sharing of a port is not supported by this server",
	"http-header-forward-pattern":      "forwarding headers as request parameters is not supported by this server",
	"grpc-header-forward-pattern":      "forwarding headers as request parameters is not supported by this server",
	"model-config-name":                "custom configuration names (configs/<name>.pbtxt) are not supported by this server; models read config.pbtxt",
}

// undefinedFlag extracts the name from the flag package's error for an
// unknown flag.
func undefinedFlag(err error) (string, bool) {
	const prefix = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	return strings.TrimLeft(msg[len(prefix):], "-"), true
}

// traceFlags collects --trace-config and Triton's deprecated --trace-*
// flags; apply resolves them as Triton does (--trace-config wins).
type traceFlags struct {
	config                          [][3]string // mode ("" global), setting, value
	file, rate, count, logFrequency *string
	levels                          []string
}

func (t *traceFlags) add(fs *flag.FlagSet) {
	fs.Var(funcFlag(func(s string) error {
		mode, kv, hasMode := strings.Cut(s, ",")
		if !hasMode {
			mode, kv = "", s
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" || (hasMode && mode == "") {
			return fmt.Errorf("--trace-config option format is '<trace mode>,<setting>=<value>' or '<setting>=<value>'. Got %s", s)
		}
		mode = strings.ToLower(mode)
		if mode != "" && mode != tracing.ModeTriton && mode != tracing.ModeOpenTelemetry {
			return fmt.Errorf("invalid value for trace mode option: %s. Available options are \"triton\" and \"opentelemetry\"", mode)
		}
		t.config = append(t.config, [3]string{mode, k, v})
		return nil
	}), "trace-config", "trace setting <mode>,<setting>=<value> (mode triton: file, log-frequency; opentelemetry: url, resource, bsp_*) or global <setting>=<value> (level, rate, count, mode); repeatable")
	str := func(name, usage string) *string {
		p := new(string)
		fs.Var(funcFlag(func(s string) error { *p = s; return nil }), name, usage)
		return p
	}
	t.file = str("trace-file", "deprecated: --trace-config triton,file=<path>")
	t.rate = str("trace-rate", "deprecated: --trace-config rate=<n>")
	t.count = str("trace-count", "deprecated: --trace-config count=<n>")
	t.logFrequency = str("trace-log-frequency", "deprecated: --trace-config triton,log-frequency=<n>")
	fs.Var(funcFlag(func(s string) error { t.levels = append(t.levels, s); return nil }), "trace-level", "deprecated: --trace-config level=<OFF|TIMESTAMPS|TENSORS> (repeatable)")
}

// apply builds the tracing options: defaults rate 1000, count -1, level OFF.
func (t *traceFlags) apply(c *config) error {
	o := tracing.Options{Mode: tracing.ModeTriton, Global: tracing.Setting{Rate: 1000, Count: -1}}
	off := false
	level := func(v string) error {
		l, ok := tracing.ParseLevel(v)
		if !ok {
			return fmt.Errorf("invalid value for trace level option: %s", v)
		}
		off = off || l == 0
		o.Global.Level |= l
		return nil
	}
	num := func(name, v string, bits int, signed bool) (int64, error) {
		if signed {
			n, err := strconv.ParseInt(v, 10, bits)
			if err != nil || n < -1 {
				return 0, fmt.Errorf("--trace-config %s=%s: want an integer >= -1", name, v)
			}
			return n, nil
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return 0, fmt.Errorf("--trace-config %s=%s: want a non-negative integer", name, v)
		}
		return int64(n), nil
	}
	for _, l := range t.levels {
		if err := level(l); err != nil {
			return err
		}
	}
	deprecated := [][3]string{{"", "rate", *t.rate}, {"", "count", *t.count}, {"triton", "file", *t.file}, {"triton", "log-frequency", *t.logFrequency}}
	for _, kv := range append(deprecated, t.config...) {
		mode, k, v := kv[0], kv[1], kv[2]
		if v == "" {
			continue
		}
		var err error
		var n int64
		switch {
		case mode == "" && k == "level":
			err = level(v)
		case mode == "" && k == "rate":
			n, err = num(k, v, 32, false)
			o.Global.Rate = uint32(n)
		case mode == "" && k == "count":
			n, err = num(k, v, 32, true)
			o.Global.Count = int32(n)
		case mode == "" && k == "mode":
			o.Mode = strings.ToLower(v)
			if o.Mode != tracing.ModeTriton && o.Mode != tracing.ModeOpenTelemetry {
				err = fmt.Errorf("invalid value for trace mode option: %s. Available options are \"triton\" and \"opentelemetry\"", v)
			}
		case mode == tracing.ModeTriton && k == "file":
			o.Global.File = v
		case mode == tracing.ModeTriton && k == "log-frequency":
			n, err = num(k, v, 32, false)
			o.Global.LogFrequency = uint32(n)
		case mode == tracing.ModeOpenTelemetry:
			o.OpenTelemetry = append(o.OpenTelemetry, [2]string{k, v})
		default:
			err = fmt.Errorf("--trace-config: unknown setting %q for %s", k, map[string]string{"": "the global settings", "triton": "mode triton"}[mode])
		}
		if err != nil {
			return err
		}
	}
	if off {
		o.Global.Level = 0
	}
	c.trace = o
	return nil
}

// funcFlag is a string flag handled by a function.
type funcFlag func(string) error

func (f funcFlag) String() string     { return "" }
func (f funcFlag) Set(s string) error { return f(s) }

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

// setCacheConfig takes one --cache-config=<cache>,<key>=<value>. Only
// Triton's local cache exists here; its one setting is size, in bytes (0
// means no cache, as the deprecated --response-cache-byte-size's default).
func (c *config) setCacheConfig(s string) error {
	name, kv, ok := strings.Cut(s, ",")
	k, v, ok2 := strings.Cut(kv, "=")
	if !ok || !ok2 || name == "" || k == "" {
		return fmt.Errorf("want <cache>,<key>=<value>, got %q", s)
	}
	if name != "local" {
		return fmt.Errorf("cache implementation %q is not available: this server has only the local cache", name)
	}
	if k != "size" {
		return fmt.Errorf("unknown local cache setting %q (the local cache takes size=<bytes>)", k)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("local cache size must be a number of bytes, got %q", v)
	}
	c.cacheSize = n
	return nil
}

// setHostPolicy takes one --host-policy=<policy>,<setting>=<value>; a
// policy's settings add up over several. Of Triton's three settings this
// server applies cpu-cores and numa-node (to python stubs and pytorch
// instances' forward threads, see backend.CPUPlacer);
// pinned-memory-pool-byte-size sizes a pool for GPU copies, which does not
// exist here, so it is refused by name rather than ignored.
func (c *config) setHostPolicy(s string) error {
	name, kv, ok := strings.Cut(s, ",")
	k, v, ok2 := strings.Cut(kv, "=")
	if !ok || !ok2 || name == "" || k == "" {
		return fmt.Errorf("want <policy>,<setting>=<value>, got %q", s)
	}
	switch k {
	case "cpu-cores":
		cpus, err := backend.ParseCPUList(v)
		if err != nil {
			return fmt.Errorf("host policy '%s': cpu-cores: %w", name, err)
		}
		p := c.hostPolicies[name]
		p.CPUs = cpus
		c.hostPolicies[name] = p
		return nil
	case "numa-node":
		node, err := backend.ParseNUMANode(v)
		if err != nil {
			return fmt.Errorf("host policy '%s': numa-node: %w", name, err)
		}
		p := c.hostPolicies[name]
		p.NUMANodes = []int{node}
		c.hostPolicies[name] = p
		return nil
	case "pinned-memory-pool-byte-size":
		return fmt.Errorf("host policy '%s': pinned-memory-pool-byte-size is not supported: pinned memory serves GPU copies, and this server has no GPU", name)
	}
	return fmt.Errorf("host policy '%s': unknown setting '%s' (Triton's are numa-node, cpu-cores and pinned-memory-pool-byte-size; this server applies cpu-cores and numa-node)", name, k)
}

// parseFlags parses args (without the program name). --help prints the
// usage to out and returns flag.ErrHelp.
// dropProgramName drops a leading "tritonserver" (or a path to it) from
// args. Triton's images have no entrypoint, so every guide runs `docker run
// IMAGE tritonserver --model-repository=/models` and KServe's Triton
// runtime passes `tritonserver --model-store=...` as container args; in an
// image whose entrypoint is this binary those arrive as its first
// argument. Nothing else may be positional, so the name is never a value.
func dropProgramName(args []string) []string {
	if len(args) > 0 && filepath.Base(args[0]) == "tritonserver" && !strings.HasPrefix(args[0], "-") {
		return args[1:]
	}
	return args
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	args = dropProgramName(args)
	c := &config{backendConfig: map[string]map[string]string{}, hostPolicies: map[string]backend.HostPolicy{}}
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
	boolVar := func(p *bool, name string, def bool, usage string) {
		*p = def
		fs.Var(tritonBool{p}, name, usage)
	}
	boolVar(&c.allowHTTP, "allow-http", true, "serve the HTTP protocol")
	boolVar(&c.allowGRPC, "allow-grpc", true, "serve the GRPC protocol")
	boolVar(&c.allowMetrics, "allow-metrics", true, "serve Prometheus metrics")
	boolVar(&c.allowCPUMetrics, "allow-cpu-metrics", true, "report the nv_cpu_* metrics (ignored unless --allow-metrics)")
	boolVar(&c.allowGPUMetrics, "allow-gpu-metrics", true, "accepted for Triton's command lines; there are no GPUs here, so no GPU metrics")
	boolVar(&c.allowClientShm, "allow-client-shm", false, "let clients register system shared memory regions and pass tensors through them (Triton's default since 26.04 is false)")
	boolVar(&c.strictInputShapes, "strict-input-shapes", false, "refuse, as Triton does, inputs with one more leading dimension than a max_batch_size 0 model declares (by default they pass through, as the field report's client needs)")
	boolVar(&c.strictModelConfig, "strict-model-config", false, "require config.pbtxt for every model (when false, a backend that can auto-complete a configuration may serve a model without one); deprecated by Triton in favour of --disable-auto-complete-config")
	disableAuto := fs.Bool("disable-auto-complete-config", false, "require config.pbtxt with every required setting for every model (no auto-completion); the same as --strict-model-config=true")
	boolVar(&c.strictReadiness, "strict-readiness", true, "report ready only when every model is ready")
	boolVar(&c.exitOnError, "exit-on-error", true, "exit when a model fails to load at startup")
	namespacing := false
	boolVar(&namespacing, "model-namespacing", false, "serve models of the same name from different repositories (only false is supported: names must be unique across repositories)")
	secs := fs.Int("exit-timeout-secs", 30, "seconds to drain in-flight requests on shutdown")
	fs.Int64Var(&c.httpMaxInputSize, "http-max-input-size", 64<<20, "largest HTTP request body accepted, in bytes")
	fs.Var(verboseFlag{&c.logVerbose}, "log-verbose", "verbose logging level (0 off, 1 and up more detail; changeable through /v2/logging)")
	fs.StringVar(&c.logFile, "log-file", "", "write the log to this file instead of standard error")
	boolVar(&c.logInfo, "log-info", true, "log INFO messages (changeable through /v2/logging)")
	boolVar(&c.logWarning, "log-warning", true, "log WARNING messages (changeable through /v2/logging)")
	boolVar(&c.logError, "log-error", true, "log ERROR messages (changeable through /v2/logging)")
	fs.StringVar(&c.logFormat, "log-format", "default", `log line format: "default" (LMMDD hh:mm:ss.ssssss) or "ISO8601" (YYYY-MM-DDThh:mm:ssZ L)`)
	fs.IntVar(&c.modelLoadThreads, "model-load-thread-count", 4, "Triton's bound on models loading at once (at least 1); this server loads models one after another, which any value allows")
	fs.IntVar(&c.bufferThreads, "buffer-manager-thread-count", 0, "accepted for Triton's command lines (Triton itself no longer uses it); tensor copies here run on the request's goroutine")
	fs.StringVar(&c.grpcCompression, "grpc-infer-response-compression-level", "none", "gzip inference responses to clients that accept it: none, low, medium or high (requests compressed with gzip are always read)")
	fs.Int("http-thread-count", 8, "accepted for Triton's command lines: each HTTP connection is served on its own goroutine here, so there is no thread pool to size")
	fs.Int("grpc-infer-allocation-pool-size", 8, "accepted for Triton's command lines: request and response messages are garbage collected here, not pooled")
	fs.Int("grpc-max-response-pool-size", 0, "accepted for Triton's command lines: responses are garbage collected here, not pooled (a stream's requests in flight are bounded instead)")
	fs.Int("grpc-infer-thread-count", 2, "accepted for Triton's command lines: each GRPC call is served on its own goroutine here, so there is no thread pool to size")
	peerAccess := true
	boolVar(&peerAccess, "enable-peer-access", true, "accepted for Triton's command lines: without GPUs there is no peer access to enable")
	fs.StringVar(&c.backendDirectory, "backend-directory", "", "accepted for Triton's command lines; the backends (pytorch, python) are built into this binary, so no directory is searched")
	fs.Var(backendConfigFlag{c.backendConfig}, "backend-config", "backend setting <backend>,<setting>=<value> (repeatable)")
	fs.StringVar(&c.id, "id", "triton", "server identifier reported by the metadata endpoint")
	fs.StringVar(&c.modelControlMode, "model-control-mode", "none", "model control mode: none (load everything at startup), poll (follow repository changes every --repository-poll-secs) or explicit (load and unload on request; --load-model at startup)")
	fs.IntVar(&c.pollSecs, "repository-poll-secs", 15, "seconds between repository polls (poll mode)")
	fs.Var(listFlag{&c.loadModels}, "load-model", "model to load at startup (explicit mode; repeatable; * loads every model)")
	fs.Var(funcFlag(c.setCacheConfig), "cache-config", "response cache setting <cache>,<key>=<value>: local,size=<bytes> (repeatable; the local cache is the one built in)")
	fs.Var(funcFlag(func(v string) error { return c.setCacheConfig("local,size=" + v) }), "response-cache-byte-size", "deprecated: --cache-config local,size=<bytes>")
	fs.String("cache-directory", "/opt/tritonserver/caches", "accepted for Triton's command lines; the local cache is built into this binary, so no directory is searched")
	fs.StringVar(&c.rateLimit, "rate-limit", "off", "rate limiting mode: execution_count (instances execute only while they hold their instance group's rate_limiter resources, across all models) or off")
	fs.Var(funcFlag(c.setHostPolicy), "host-policy", "host policy setting <policy>,cpu-cores=<list> or <policy>,numa-node=<node> (e.g. cpu,cpu-cores=2-3): the CPUs the instances under that policy run on, and the NUMA node their memory comes from (python stubs; pytorch instances' forward threads); instance groups name their policy in host_policy, KIND_CPU groups default to \"cpu\" (repeatable, settings of one policy add up)")
	fs.Var(listFlag{&c.rateResources}, "rate-limit-resource", "copies of a rate limiter resource, <resource_name>:<count>[:<device>] (repeatable; names case-insensitive; by default the most any instance lists)")
	lim := addLimitFlags(fs)
	var tf traceFlags
	tf.add(fs)
	c.metrics = metrics.DefaultConfig()
	fs.Var(funcFlag(c.metrics.Apply), "metrics-config", "metrics setting <setting>=<value>: counter_latencies, summary_latencies, summary_quantiles=<q>:<err>,..., histogram_latencies (repeatable)")
	intervalMs := fs.Float64("metrics-interval-ms", 2000, "milliseconds between samples of the per-interval metrics (CPU utilization and memory)")
	fs.Int64Var(&c.gcHeapFloor, "gc-heap-floor-byte-size", heapfloor.DefaultBytes, "heap size below which the Go collector does not start a cycle; above twice it, GOGC=100 pacing (0: GOGC=100 pacing throughout; ignored when GOGC is set)")
	fs.Int64Var(&c.metrics.PinnedPoolBytes, "pinned-memory-pool-byte-size", 1<<28, "size reported by nv_pinned_memory_pool_total_bytes; this CPU-only server keeps no pinned pool")
	fs.Usage = func() {}
	if err := fs.Parse(splitBoolArgs(fs, args)); err != nil {
		if name, ok := undefinedFlag(err); ok {
			if why, known := refusedFlags[name]; known {
				return nil, fmt.Errorf("--%s is not supported: %s", name, why)
			}
		}
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
	if err := tf.apply(c); err != nil {
		return nil, err
	}
	if *intervalMs <= 0 {
		return nil, fmt.Errorf("--metrics-interval-ms must be positive, got %v", *intervalMs)
	}
	c.metrics.Interval = time.Duration(*intervalMs * float64(time.Millisecond))
	c.metrics.CPU = c.allowCPUMetrics && c.allowMetrics
	if *disableAuto {
		c.strictModelConfig = true
	}
	if namespacing {
		return nil, errors.New("--model-namespacing=true is not supported: this server needs model names unique across repositories")
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
	if c.logFormat != "default" && c.logFormat != "ISO8601" {
		return fmt.Errorf("--log-format must be default or ISO8601, got %q", c.logFormat)
	}
	switch strings.ToLower(c.grpcCompression) {
	case "none", "low", "medium", "high":
	default:
		return fmt.Errorf("invalid argument for --grpc-infer-response-compression-level: %q (want none, low, medium or high)", c.grpcCompression)
	}
	switch c.rateLimit {
	case "off", "execution_count":
	default:
		return fmt.Errorf("--rate-limit must be execution_count or off, got %q", c.rateLimit)
	}
	if len(c.rateResources) > 0 && c.rateLimit == "off" {
		return errors.New("--rate-limit-resource needs --rate-limit=execution_count")
	}
	if _, err := scheduler.NewRateLimiter(c.rateResources); err != nil {
		return err
	}
	if c.modelLoadThreads < 1 {
		return fmt.Errorf("--model-load-thread-count must be at least 1, got %d", c.modelLoadThreads)
	}
	if c.bufferThreads < 0 {
		return fmt.Errorf("--buffer-manager-thread-count must not be negative, got %d", c.bufferThreads)
	}
	if c.gcHeapFloor < 0 {
		return fmt.Errorf("--gc-heap-floor-byte-size must not be negative, got %d", c.gcHeapFloor)
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
	maxResponse, maxConfig         *int64
	httpHeader, httpIdle           *int
	httpMinRate                    *int64
	httpConns                      *int
	grpcRecv, grpcSend             *int
	grpcStreams                    *uint
	grpcConns                      *int
	keepTime, keepTimeout, minPing *int
	permitWithoutCalls             *bool
	grpcIdle, grpcHandshake        *int
	connAge, connAgeGrace          *int
	pingStrikes, pingsWithoutData  *int
	httpRestricted, grpcRestricted []string
}

func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	l := &limitFlags{
		maxResponse:        fs.Int64("max-response-size", repository.DefaultMaxResponseSize, "largest response, in bytes of output, one request may get (refused before the model runs when the config fixes the output sizes); -1 for no bound"),
		maxConfig:          fs.Int64("max-config-size", repository.DefaultMaxConfigSize, "largest model configuration, in bytes: config.pbtxt and the load API's config parameter"),
		httpHeader:         fs.Int("http-header-timeout-secs", int(httpapi.DefaultHeaderTimeout/time.Second), "seconds a client has to send a request's headers; also the grace before --http-body-min-rate applies (-1: none)"),
		httpIdle:           fs.Int("http-idle-timeout-secs", int(httpapi.DefaultIdleTimeout/time.Second), "seconds an HTTP keep-alive connection may sit idle before it is closed (-1: never)"),
		httpMinRate:        fs.Int64("http-body-min-rate", httpapi.DefaultBodyMinRate, "slowest rate, in bytes per second, at which a request body must arrive (-1: any)"),
		httpConns:          fs.Int("http-max-connections", 0, "HTTP connections served at once; more wait until one closes (0: a quarter of the open-file limit, at least 64; -1: no bound)"),
		grpcRecv:           fs.Int("grpc-max-recv-message-size", grpcapi.DefaultMaxRecvMsgSize, "largest GRPC request message, in bytes"),
		grpcSend:           fs.Int("grpc-max-send-message-size", grpcapi.DefaultMaxSendMsgSize, "largest GRPC response message, in bytes"),
		grpcStreams:        fs.Uint("grpc-max-concurrent-streams", grpcapi.DefaultMaxConcurrentStreams, "GRPC calls one connection may run at once"),
		grpcConns:          fs.Int("grpc-max-connections", 0, "GRPC connections served at once; more wait until one closes (0: a quarter of the open-file limit, at least 64, as for HTTP; -1: no bound)"),
		keepTime:           fs.Int("grpc-keepalive-time", int(grpcapi.DefaultKeepaliveTime/time.Millisecond), "milliseconds between the server's keepalive pings on an idle GRPC connection"),
		keepTimeout:        fs.Int("grpc-keepalive-timeout", int(grpcapi.DefaultKeepaliveTimeout/time.Millisecond), "milliseconds the server waits for a keepalive ping's answer before closing the connection"),
		minPing:            fs.Int("grpc-http2-min-recv-ping-interval-without-data", int(grpcapi.DefaultMinRecvPingInterval/time.Millisecond), "shortest interval, in milliseconds, between client pings the server tolerates; faster clients are disconnected"),
		permitWithoutCalls: new(bool),
		grpcIdle:           fs.Int("grpc-max-connection-idle-secs", int(grpcapi.DefaultMaxConnectionIdle/time.Second), "seconds a GRPC connection without calls stays open before the server sends GOAWAY (-1: never)"),
		grpcHandshake:      fs.Int("grpc-handshake-timeout-secs", int(grpcapi.DefaultHandshakeTimeout/time.Second), "seconds a new GRPC connection has to complete its HTTP/2 setup"),
		connAge:            fs.Int("grpc-max-connection-age", 0, "milliseconds after which a GRPC connection is sent GOAWAY, so that clients reconnect (0: no limit)"),
		connAgeGrace:       fs.Int("grpc-max-connection-age-grace", 0, "milliseconds a connection past --grpc-max-connection-age gives its calls to finish before it is closed (0: no limit)"),
		pingStrikes:        fs.Int("grpc-http2-max-ping-strikes", 2, "pings faster than --grpc-http2-min-recv-ping-interval-without-data tolerated before the connection is closed; only 2, the GRPC transport's fixed number, is supported"),
		pingsWithoutData:   fs.Int("grpc-http2-max-pings-without-data", 2, "accepted for Triton's command lines: the server sends one keepalive ping per --grpc-keepalive-time of idleness and no others, whatever the value"),
	}
	// A Triton <boolean>: its command lines spell it on/off as well.
	fs.Var(tritonBool{l.permitWithoutCalls}, "grpc-keepalive-permit-without-calls", "let clients send keepalive pings while no call runs")
	fs.Var(listFlag{&l.httpRestricted}, "http-restricted-api", "<api>[,<api>...]:<key>=<value>: HTTP requests to these APIs need header <key> with <value> (repeatable; APIs: health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging)")
	fs.Var(listFlag{&l.grpcRestricted}, "grpc-restricted-protocol", "<api>[,<api>...]:<key>=<value>: GRPC calls to these APIs need metadata triton-grpc-protocol-<key> with <value> (repeatable; the APIs of --http-restricted-api)")
	return l
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
	c.httpRestricted, c.grpcRestricted = access.Rules{}, access.Rules{}
	for _, v := range l.httpRestricted {
		errs = append(errs, c.httpRestricted.Add("http-restricted-api", v))
	}
	for _, v := range l.grpcRestricted {
		errs = append(errs, c.grpcRestricted.Add("grpc-restricted-protocol", v))
	}
	c.maxConfigSize = *l.maxConfig
	if c.maxConfigSize <= 0 {
		errs = append(errs, fmt.Errorf("--max-config-size must be positive, got %d", c.maxConfigSize))
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
	grpcConns := *l.grpcConns
	if grpcConns == 0 {
		// Each service gets the same share of the open-file limit, so that
		// idle clients of one cannot take the descriptors the other, the
		// models and the stubs need (accept4: too many open files).
		grpcConns = httpapi.DefaultMaxConnections()
	}
	c.grpcLimits = grpcapi.Limits{
		MaxRecvMsgSize:              *l.grpcRecv,
		MaxSendMsgSize:              *l.grpcSend,
		MaxConcurrentStreams:        uint32(min(*l.grpcStreams, 1<<31)),
		MaxConnections:              grpcConns,
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
	if *l.connAge < 0 || *l.connAgeGrace < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-connection-age and --grpc-max-connection-age-grace must not be negative, got %d and %d", *l.connAge, *l.connAgeGrace))
	}
	c.grpcLimits.MaxConnectionAge = time.Duration(*l.connAge) * time.Millisecond
	c.grpcLimits.MaxConnectionAgeGrace = time.Duration(*l.connAgeGrace) * time.Millisecond
	if *l.pingStrikes != 2 {
		// grpc-go's server transport closes a connection after exactly two
		// bad pings; no option changes it.
		errs = append(errs, fmt.Errorf("--grpc-http2-max-ping-strikes=%d is not supported: the GRPC transport of this server tolerates exactly 2 ping strikes (Triton's default) before it closes the connection", *l.pingStrikes))
	}
	if *l.pingsWithoutData < 0 {
		errs = append(errs, fmt.Errorf("--grpc-http2-max-pings-without-data must not be negative, got %d", *l.pingsWithoutData))
	}
	return errors.Join(errs...)
}

func itoa(i int) string { return strconv.Itoa(i) }
