// Command ratelimit-svc serves Envoy's Rate Limit Service v3 and external
// processor over the policies of a directory, or over the rate limit
// configs an xDS server sends (CONFIG_TYPE=GRPC_XDS_SOTW), with health and
// reflection,
// an HTTP port for /healthcheck, /metrics and /json, and a debug port for
// operators (pprof, /debug/config, /debug/keys, /rlconfig). It also runs
// on envoyproxy/ratelimit's environment variables, as a drop-in.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errInvalid) {
			fmt.Fprintln(os.Stderr, "ratelimit-svc:", err)
		}
		os.Exit(1)
	}
}

// healthNames are the gRPC health service names answered besides "".
var healthNames = []string{
	"ratelimit",
	"envoy.service.ratelimit.v3.RateLimitService",
	"envoy.service.ext_proc.v3.ExternalProcessor",
}

// run serves until ctx ends, then drains and returns. It is main without
// the process: tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "validate" {
		return runValidate(args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(cfg, stdout)
	for _, n := range cfg.Notes {
		log.Warn(n)
	}
	defer applyMemoryLimit(cfg.MemoryLimit, cfg.src("memory-limit"), getenv, "/", log)()
	_, stopGCTuner := startGCTuner(cfg.GCHeapFloor, getenv, log)
	defer stopGCTuner()
	headers, err := envoyapi.ParseHeaderMode(cfg.ResponseHeaders)
	if err != nil {
		return err
	}
	tel, err := newTelemetry(cfg.Service)
	if err != nil {
		return err
	}
	defer tel.shutdown()
	tr, err := newTracing(ctx, getenv, cfg.Service, cfg.ReplicaID)
	if err != nil {
		return err
	}
	defer tr.shutdown(context.WithoutCancel(ctx))
	app, err := wire(cfg, log, tel, tr, headers)
	if err != nil {
		return err
	}
	defer app.close()
	return app.serve(ctx)
}

// app is the wired service: what serve starts and stops.
type app struct {
	cfg      config
	log      *slog.Logger
	tel      *telemetry
	lim      *limiter.Limiter
	pol      policySource
	xds      *xdsconfig.Client // nil when the policies come from files
	redis    redis.UniversalClient
	rls      *envoyapi.RLS
	draining atomic.Bool
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	prom     *http.Server // nil without --prometheus-addr
	debug    *http.Server // nil when off or its address was taken
	grpcLis  net.Listener
	httpLis  net.Listener
	promLis  net.Listener
	debugLis net.Listener
	// httpConns caps the HTTP and Prometheus ports' connections together,
	// debugConns the debug port's (nil when it is off).
	httpConns, debugConns *connLimiter

	// configured is closed once there is a config to serve: at once for
	// files or with FORCE_START_WITHOUT_INITIAL_CONFIG, else when the
	// first set arrived over xDS. Until then health is NOT_SERVING.
	configured <-chan struct{}
}

// serve runs every part until ctx ends, then shuts down in order: health
// NOT_SERVING, in-flight calls finish (bounded), background loops stop.
func (a *app) serve(ctx context.Context) error {
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	wg.Go(func() { errs <- a.lim.Run(bg) })
	wg.Go(func() { errs <- a.pol.Run(bg) })
	wg.Go(func() { errs <- a.grpc.Serve(a.grpcLis) })
	if !a.hasConfig() {
		wg.Go(func() { a.awaitConfig(bg) })
	}
	for _, s := range a.httpServers() {
		wg.Go(func() {
			if err := s.srv.Serve(s.lis); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		})
	}
	mode := "local"
	if a.lim.Shared() {
		mode = "redis"
	}
	a.log.Info("serving", "grpc", a.grpcLis.Addr().String(), "http", a.httpLis.Addr().String(),
		"debug", addrOf(a.debugLis), "prometheus", addrOf(a.promLis), "tls", a.cfg.GRPCTLS.enabled(),
		"config", a.configSource(), "mode", mode, "service", a.cfg.Service, "replica", a.cfg.ReplicaID)
	var runErr error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "timeout", a.cfg.ShutdownTimeout)
	case runErr = <-errs:
		a.log.Error("server failed", "err", runErr)
	}
	a.drain()
	cancelBG()
	wg.Wait()
	return runErr
}

// drain turns health NOT_SERVING, then lets in-flight calls finish within
// the shutdown timeout, then stops what is left.
func (a *app) drain() {
	a.health.Shutdown()
	a.draining.Store(true)
	deadline := time.Now().Add(a.cfg.ShutdownTimeout)
	done := make(chan struct{})
	go func() { a.grpc.GracefulStop(); close(done) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		a.log.Warn("shutdown timeout: cancelling in-flight calls")
		a.grpc.Stop()
		<-done
	}
	hctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, s := range a.httpServers() {
		if err := s.srv.Shutdown(hctx); err != nil {
			s.srv.Close()
		}
	}
}

type httpServer struct {
	srv *http.Server
	lis net.Listener
}

// httpServers are the HTTP servers that run: the HTTP port, and the
// Prometheus and debug ports when they are on.
func (a *app) httpServers() []httpServer {
	out := []httpServer{{a.http, a.httpLis}}
	if a.prom != nil {
		out = append(out, httpServer{a.prom, a.promLis})
	}
	if a.debug != nil {
		out = append(out, httpServer{a.debug, a.debugLis})
	}
	return out
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// registerGRPC puts RLS, ext_proc, health and reflection on one server;
// health answers st, overall and for every name of healthNames.
func registerGRPC(s *grpc.Server, rls *envoyapi.RLS, xp *envoyapi.ExtProc, h *health.Server,
	st healthpb.HealthCheckResponse_ServingStatus) {
	envoyapi.RegisterRLS(s, rls)
	envoyapi.RegisterExtProc(s, xp)
	healthpb.RegisterHealthServer(s, h)
	setHealth(h, st)
	reflection.Register(s)
}

// setHealth sets st overall and for every name of healthNames. After
// h.Shutdown (drain) it changes nothing.
func setHealth(h *health.Server, st healthpb.HealthCheckResponse_ServingStatus) {
	h.SetServingStatus("", st)
	for _, n := range healthNames {
		h.SetServingStatus(n, st)
	}
}

// hasConfig reports whether there is a config to serve.
func (a *app) hasConfig() bool {
	select {
	case <-a.configured:
		return true
	default:
		return false
	}
}

// awaitConfig turns health SERVING once the first config arrived, or
// returns when ctx ends first.
func (a *app) awaitConfig(ctx context.Context) {
	select {
	case <-a.configured:
		setHealth(a.health, healthpb.HealthCheckResponse_SERVING)
		a.log.Info("first config received: health SERVING", "config", a.configSource())
	case <-ctx.Done():
	}
}
