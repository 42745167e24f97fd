// Command tritonserver serves model repositories over Triton's HTTP protocol
// and Prometheus metrics. It only parses flags and wires the runtime
// packages together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/httpapi"
	"github.com/tritonbuild/tritonbuild/runtime/metrics"
	"github.com/tritonbuild/tritonbuild/runtime/python"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/torch"
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
	level := slog.LevelInfo
	if cfg.logVerbose > 0 {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	if err := serve(ctx, cfg, logger, log.New(logOut, "", log.LstdFlags)); err != nil {
		logger.Error("exiting", "err", err)
		return 1
	}
	return 0
}

// backends registers the backends this binary carries.
func backends(cfg *config, logger *slog.Logger, stdlog *log.Logger) map[string]backend.Backend {
	return map[string]backend.Backend{
		"pytorch": torch.New(torch.Options{Logf: func(format string, args ...any) {
			logger.Warn(fmt.Sprintf(format, args...), "backend", "pytorch")
		}}),
		"python": python.New(python.Options{Logger: stdlog, Verbose: cfg.logVerbose > 0}),
	}
}

func serve(ctx context.Context, cfg *config, logger *slog.Logger, stdlog *log.Logger) error {
	bes := backends(cfg, logger, stdlog)
	beCfg := map[string]map[string]string{}
	for name := range bes {
		beCfg[name] = cfg.settingsFor(name)
	}
	mgr, err := repository.New(repository.Options{
		Repositories: cfg.repositories, Backends: bes, BackendConfig: beCfg,
		StrictModelConfig: cfg.strictModelConfig, Logger: logger,
	})
	if err != nil {
		return err
	}
	if err := mgr.LoadAll(ctx); err != nil {
		if cfg.exitOnError {
			_ = mgr.Close(context.Background())
			return fmt.Errorf("loading models (--exit-on-error=true): %w", err)
		}
		logger.Warn("some models failed to load; serving the others", "err", err)
	}
	for _, e := range mgr.Index(false) {
		logger.Info("model", "name", e.Name, "version", e.Version, "state", e.State, "reason", e.Reason)
	}

	var shuttingDown atomic.Bool
	var servers []*http.Server
	errc := make(chan error, 3)
	listen := func(what, addr string, port int, h http.Handler) error {
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, itoa(port)))
		if err != nil {
			return fmt.Errorf("starting %s: %w", what, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
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
			Ready: func() bool { return !shuttingDown.Load() },
			Live:  func() bool { return true },
		})
		var handler http.Handler = h
		if !cfg.strictReadiness {
			handler = relaxedReadiness(h, &shuttingDown)
		}
		if err := listen("HTTPService", cfg.httpAddress, cfg.httpPort, handler); err != nil {
			return err
		}
	}
	if cfg.allowMetrics {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler(metrics.NewRegistry(mgr)))
		if err := listen("Metrics Service", cfg.metricsAddress, cfg.metricsPort, mux); err != nil {
			return err
		}
	}
	if cfg.allowGRPC {
		logger.Warn("the GRPC service is not part of this build; serving HTTP only", "grpc-port", cfg.grpcPort)
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("signal received, shutting down", "exit-timeout-secs", cfg.exitTimeout.Seconds())
	case runErr = <-errc:
	}
	// Stop reporting ready, stop accepting, let in-flight requests finish,
	// then unload the models.
	shuttingDown.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.exitTimeout)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			logger.Warn("HTTP shutdown", "err", err)
		}
	}
	if err := mgr.Close(sctx); err != nil {
		logger.Warn("unloading models", "err", err)
	}
	return runErr
}

// relaxedReadiness answers /v2/health/ready from the server's own state only
// (--strict-readiness=false): models that failed to load do not make the
// server unready.
func relaxedReadiness(h http.Handler, shuttingDown *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
		if shuttingDown.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return mux
}
