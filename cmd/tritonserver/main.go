// Command tritonserver serves model repositories over Triton's HTTP and GRPC
// protocols and Prometheus metrics. It only parses flags and wires the
// runtime packages together: model control (none, poll, explicit) and the
// graceful shutdown on SIGINT/SIGTERM live here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/grpcapi"
	"github.com/tritonbuild/tritonbuild/runtime/health"
	"github.com/tritonbuild/tritonbuild/runtime/heapfloor"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/logging"
	"github.com/tritonbuild/tritonbuild/runtime/metrics"
	"github.com/tritonbuild/tritonbuild/runtime/python"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// version is reported by GET /v2; release builds set it with -ldflags -X.
var version = "0.0.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tritonserver: %v\n", err)
		return 2
	}
	logOut := stderr
	if cfg.logFile != "" {
		f, err := os.OpenFile(cfg.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "tritonserver: opening log file: %v\n", err)
			return 1
		}
		defer f.Close()
		logOut = f
	}
	log, err := newLog(cfg, logOut)
	if err != nil {
		fmt.Fprintf(stderr, "tritonserver: %v\n", err)
		return 2
	}
	logger := log.Logger()
	floor, how := heapfloor.Start(uint64(cfg.gcHeapFloor))
	defer floor.Stop()
	if floor == nil && cfg.gcHeapFloor > 0 {
		logger.Info("--gc-heap-floor-byte-size not applied", "reason", how)
	}
	if cfg.backendDirectory != "" {
		logger.Info("backends are built into this server; --backend-directory is not searched", "backend-directory", cfg.backendDirectory)
	}
	if err := serve(ctx, cfg, log, backends(cfg, logger)); err != nil {
		logger.Error("exiting", "err", err)
		return 1
	}
	return 0
}

// newLog builds the server's one log from the --log-* flags, writing to out.
func newLog(cfg *config, out io.Writer) (*logging.Log, error) {
	return logging.New(out, logging.Settings{
		File: cfg.logFile, Info: cfg.logInfo, Warning: cfg.logWarning, Error: cfg.logError,
		Verbose: uint32(cfg.logVerbose), Format: cfg.logFormat,
	})
}

// backends registers the backends this binary carries, each logging to
// logger with its name attached.
func backends(cfg *config, logger *slog.Logger) map[string]backend.Backend {
	return map[string]backend.Backend{
		"pytorch": torch.New(torch.Options{Logger: logger.With("backend", "pytorch")}),
		"python":  python.New(python.Options{Logger: logger.With("backend", "python"), Verbose: cfg.logVerbose > 0}),
	}
}

// installLibDirs is the lib/ directory of the install tree this binary
// runs from (PREFIX/bin/tritonserver -> PREFIX/lib), where tritonbuild
// installs custom operator libraries: models may name op libraries there
// as well as in their own directory. None when the binary cannot be found.
func installLibDirs() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return nil
	}
	lib := filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib")
	if st, err := os.Stat(lib); err != nil || !st.IsDir() {
		return nil
	}
	return []string{lib}
}

// serve runs the server with the backends bes until ctx ends (the signal),
// then shuts down gracefully: stop reporting ready, stop accepting, let the
// requests in flight finish (up to --exit-timeout-secs), unload the models.
func serve(ctx context.Context, cfg *config, log *logging.Log, bes map[string]backend.Backend) error {
	logger := log.Logger()
	beCfg := map[string]map[string]string{}
	for name := range bes {
		beCfg[name] = cfg.settingsFor(name)
	}
	sums := metrics.NewSummaries(cfg.metrics)
	var observer func(string, int64) scheduler.Observer
	if sums != nil {
		observer = sums.Observer
	}
	var cache *scheduler.Cache
	if cfg.cacheSize > 0 {
		var err error
		if cache, err = scheduler.NewCache(cfg.cacheSize); err != nil {
			return err
		}
	}
	var limiter *scheduler.RateLimiter
	if cfg.rateLimit == "execution_count" {
		var err error
		if limiter, err = scheduler.NewRateLimiter(cfg.rateResources); err != nil {
			return err
		}
	}
	libDirs := installLibDirs()
	logger.Info("op libraries are loaded from the model directories and the install tree's", "lib", libDirs)
	mgr, err := repository.New(repository.Options{
		Observer: observer, Cache: cache, RateLimiter: limiter, LibraryDirs: libDirs,
		Repositories: cfg.repositories, Backends: bes, BackendConfig: beCfg, HostPolicies: cfg.hostPolicies,
		StrictModelConfig: cfg.strictModelConfig, StrictInputShapes: cfg.strictInputShapes, Logger: logger,
		MaxResponseSize: cfg.maxResponseSize, MaxConfigSize: cfg.maxConfigSize,
	})
	if err != nil {
		return err
	}
	explicit := cfg.modelControlMode == "explicit"
	if py, ok := bes["python"].(*python.Backend); ok {
		// Before the first load: initialize may already ask for models.
		py.SetServer(pythonServer{mgr: mgr, explicit: explicit})
	}
	if err := initialLoad(ctx, cfg, mgr); err != nil {
		if cfg.exitOnError {
			_ = mgr.Close(context.Background())
			return fmt.Errorf("loading models (--exit-on-error=true): %w", err)
		}
		logger.Warn("some models failed to load; serving the others", "err", err)
	}
	for _, e := range mgr.Index(false) {
		logger.Info("model", "name", e.Name, "version", e.Version, "state", e.State, "reason", e.Reason)
	}

	// One shared-memory registry for both frontends, when clients may use
	// shared memory.
	var shm *sharedmem.Registry
	if cfg.allowClientShm {
		shm = sharedmem.New("")
		defer func() {
			if err := shm.Close(); err != nil {
				logger.Warn("unregistering shared memory", "err", err)
			}
		}()
	}
	// One trace manager for both frontends, kept until the frontends stop.
	tracer, err := tracing.New(tracing.Options{Mode: cfg.trace.Mode, Global: cfg.trace.Global, OpenTelemetry: cfg.trace.OpenTelemetry, Logger: logger})
	if err != nil {
		_ = mgr.Close(context.Background())
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracer.Close(cctx); err != nil {
			logger.Warn("writing traces", "err", err)
		}
	}()
	// One health state for both frontends: ready while not shutting down
	// and, with --strict-readiness, while every model is ready.
	hs := health.New(mgr, cfg.strictReadiness)
	var servers []*http.Server
	errc := make(chan error, 4)
	listen := func(what, addr string, port int, h http.Handler) error {
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, itoa(port)))
		if err != nil {
			return fmt.Errorf("starting %s: %w", what, err)
		}
		srv := cfg.httpLimits.NewHTTPServer(h)
		ln = cfg.httpLimits.Listener(ln)
		servers = append(servers, srv)
		logger.Info("Started "+what+" at "+ln.Addr().String(), "service", what, "addr", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", what, err)
			}
		}()
		return nil
	}
	if cfg.allowHTTP {
		h := httpapi.New(httpapi.Options{
			Manager: mgr, ID: cfg.id, Version: version, MaxInputSize: cfg.httpMaxInputSize, Logger: logger,
			ModelControl: explicit, Health: hs, Limits: cfg.httpLimits, Restricted: cfg.httpRestricted, Logging: log, SharedMemory: shm, Tracing: tracer,
		})
		if err := listen("HTTPService", cfg.httpAddress, cfg.httpPort, h); err != nil {
			return err
		}
	}
	if cfg.allowMetrics {
		reg := metrics.NewRegistryWith(mgr, cfg.metrics, sums)
		if py, ok := bes["python"].(*python.Backend); ok {
			reg.MustRegister(py.Collector()) // pb_utils.MetricFamily's
		}
		if err := listen("Metrics Service", cfg.metricsAddress, cfg.metricsPort, metrics.Handler(reg)); err != nil {
			return err
		}
	}
	var grpcSrv *grpcapi.Server
	var grpcServer *grpc.Server
	if cfg.allowGRPC {
		grpcSrv = grpcapi.New(grpcapi.Options{
			Manager: mgr, ID: cfg.id, Version: version, Extensions: httpapi.Extensions, Logger: logger,
			ModelControl: explicit, Health: hs, Limits: cfg.grpcLimits, Restricted: cfg.grpcRestricted, Logging: log, SharedMemory: shm, Tracing: tracer,
			ResponseCompression: cfg.grpcCompression,
		})
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.grpcAddress, itoa(cfg.grpcPort)))
		if err != nil {
			_ = shutdown(cfg.exitTimeout, servers, nil, mgr, logger)
			return fmt.Errorf("starting GRPCInferenceService: %w", err)
		}
		ln = cfg.grpcLimits.Listener(ln)
		grpcServer = grpcSrv.NewGRPCServer()
		logger.Info("Started GRPCInferenceService at "+ln.Addr().String(), "service", "GRPCInferenceService", "addr", ln.Addr().String())
		go func() {
			if err := grpcServer.Serve(ln); err != nil {
				errc <- fmt.Errorf("GRPCInferenceService: %w", err)
			}
		}()
	}

	pollDone := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(context.Background())
	if cfg.modelControlMode == "poll" && cfg.pollSecs > 0 {
		go pollLoop(pollCtx, mgr, time.Duration(cfg.pollSecs)*time.Second, logger, pollDone)
	} else {
		close(pollDone)
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("signal received, shutting down", "exit-timeout-secs", cfg.exitTimeout.Seconds())
	case runErr = <-errc:
	}
	// Stop reporting ready and polling, stop accepting, let in-flight
	// requests finish, then unload the models (closing their instances).
	hs.Drain()
	stopPoll()
	<-pollDone
	var g *grpc.Server
	if grpcServer != nil {
		grpcSrv.Shutdown()
		g = grpcServer
	}
	return errors.Join(runErr, shutdown(cfg.exitTimeout, servers, g, mgr, logger))
}

// shutdown stops the frontends and unloads the models within timeout
// (--exit-timeout-secs), whatever the models do. Requests in flight may
// finish until a reserve before the end; then those still running are
// answered with an error, which the frontends still send, instances that
// do not return are left to the exiting process, and the connections
// close. The error says when requests had to be cut off, so that the exit
// status tells.
func shutdown(timeout time.Duration, servers []*http.Server, g *grpc.Server, mgr *repository.Manager, logger *slog.Logger) error {
	start := time.Now()
	// The reserve covers answering the cut requests and closing the
	// instances (scheduler.Close takes up to twice its grace after its
	// deadline).
	reserve := min(timeout/5, 2*time.Second)
	exitCtx, cancelExit := context.WithDeadline(context.Background(), start.Add(timeout))
	defer cancelExit()
	drainCtx, cancelDrain := context.WithDeadline(context.Background(), start.Add(timeout-reserve))
	defer cancelDrain()

	frontends := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Shutdown(exitCtx) // on timeout, closed below
			}()
		}
		if g != nil {
			wg.Add(1)
			go func() { defer wg.Done(); g.GracefulStop() }()
		}
		wg.Wait()
		close(frontends)
	}()
	var cut error
	select {
	case <-frontends:
	case <-drainCtx.Done():
		cut = fmt.Errorf("requests still running %s after the signal were answered with an error (--exit-timeout-secs=%d)", timeout-reserve, int(timeout/time.Second))
		logger.Warn("requests still running at the exit timeout; answering them with an error", "exit-timeout-secs", timeout.Seconds())
	}
	if err := mgr.Close(drainCtx); err != nil {
		logger.Warn("unloading models", "err", err)
	}
	select {
	case <-frontends:
	case <-exitCtx.Done():
		logger.Warn("closing the connections still open at the exit timeout")
		for _, s := range servers {
			_ = s.Close()
		}
		if g != nil {
			g.Stop()
		}
		if cut == nil {
			cut = fmt.Errorf("connections still open at the exit timeout were closed (--exit-timeout-secs=%d)", int(timeout/time.Second))
		}
	}
	logger.Info("shutdown complete", "seconds", time.Since(start).Seconds())
	if cut != nil {
		return fmt.Errorf("shutdown: %w", cut)
	}
	return nil
}

// initialLoad loads the models the model control mode starts with: all of
// them (none, poll) or those named by --load-model (explicit; "*" = all).
func initialLoad(ctx context.Context, cfg *config, mgr *repository.Manager) error {
	switch cfg.modelControlMode {
	case "poll":
		return mgr.Poll(ctx)
	case "explicit":
		var errs []error
		for _, name := range cfg.loadModels {
			if name == "*" {
				errs = append(errs, mgr.LoadAll(ctx))
				continue
			}
			errs = append(errs, mgr.Load(ctx, name))
		}
		return errors.Join(errs...)
	}
	return mgr.LoadAll(ctx)
}

// pollLoop polls the repositories every interval until ctx ends.
func pollLoop(ctx context.Context, mgr *repository.Manager, every time.Duration, logger *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := mgr.Poll(ctx); err != nil {
			logger.Warn("repository poll: some models failed to load", "err", err)
		}
	}
}

// pythonServer is what python models reach through pb_utils: BLS requests
// on the other models and the model loading API (explicit mode only, as
// in Triton).
type pythonServer struct {
	mgr      *repository.Manager
	explicit bool
}

func (s pythonServer) Infer(ctx context.Context, model string, version int64, req *backend.Request) (*backend.Response, error) {
	mod, err := s.mgr.Get(model, version)
	if err != nil {
		return nil, err
	}
	_, resp, err := s.mgr.Infer(ctx, mod, version, req, time.Now())
	return resp, err
}

func (s pythonServer) InferStream(ctx context.Context, model string, version int64, req *backend.Request, fn func(*backend.Response, bool) error) error {
	mod, err := s.mgr.Get(model, version)
	if err != nil {
		return err
	}
	if !mod.Decoupled() {
		// exec(decoupled=True) on an ordinary model: its one response.
		_, resp, err := s.mgr.Infer(ctx, mod, version, req, time.Now())
		if err != nil {
			return err
		}
		return fn(resp, true)
	}
	_, err = s.mgr.InferStream(ctx, mod, version, req, time.Now(), fn)
	return err
}

func (s pythonServer) ModelReady(model string, version int64) bool {
	_, err := s.mgr.Get(model, version)
	return err == nil
}

func (s pythonServer) LoadModel(ctx context.Context, model string, config []byte, files map[string][]byte) error {
	if !s.explicit {
		return repository.ControlDisabled()
	}
	return s.mgr.LoadModelFiles(ctx, model, config, files)
}

func (s pythonServer) UnloadModel(ctx context.Context, model string, dependents bool) error {
	if !s.explicit {
		return repository.ControlDisabled()
	}
	return s.mgr.UnloadModel(ctx, model, dependents)
}
