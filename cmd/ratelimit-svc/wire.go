package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// wire builds every part of the service and binds its ports; nothing runs
// until serve.
func wire(cfg config, log *slog.Logger, tel *telemetry, tr *tracing, headers envoyapi.HeaderMode) (*app, error) {
	a := &app{cfg: cfg, log: log, tel: tel}
	pol, err := policy.NewWatcher(cfg.ConfigPath, policy.WatcherOptions{
		Logger:   log.With("component", "policy"),
		OnReload: a.countReload,
	})
	if err != nil {
		return nil, fmt.Errorf("loading policies from %s: %w", cfg.ConfigPath, err)
	}
	a.pol = pol
	limOpts := []limiter.Option{limiter.WithLogger(log.With("component", "limiter")),
		limiter.WithMeterProvider(tel.provider)}
	if cfg.RedisURL != "" {
		client, err := newRedisClient(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		a.redis = client
		limOpts = append(limOpts, limiter.WithStore(redisstore.New(client, cfg.Service), cfg.ReplicaID))
	}
	a.lim = limiter.New(limOpts...)
	if err := tel.observeEngine(a.lim); err != nil {
		return nil, fmt.Errorf("engine metrics: %w", err)
	}
	a.rls = envoyapi.NewRLS(pol, a.lim, envoyapi.WithLogger(log.With("component", "rls")),
		envoyapi.WithMeterProvider(tel.provider), envoyapi.WithResponseHeaders(headers))
	breakers := resilience.NewRegistry(resilience.WithStateChange(envoyapi.BreakerTransitions(tel.provider)))
	xp := envoyapi.NewExtProc(pol, envoyapi.ExtProcDeps{Limits: a.lim, Slots: a.lim, Breakers: breakers},
		envoyapi.WithLogger(log.With("component", "extproc")), envoyapi.WithMeterProvider(tel.provider))
	a.health = health.NewServer()
	a.grpc = grpc.NewServer(append(grpcServerOptions(), tr.serverOptions()...)...)
	registerGRPC(a.grpc, a.rls, xp, a.health)
	a.http = &http.Server{Handler: a.routes(), ReadHeaderTimeout: httpHeaderTimeout}
	if a.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		a.close()
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	if a.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		a.grpcLis.Close()
		a.close()
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	return a, nil
}

// close releases what wire opened beyond the listeners (serve closes those).
func (a *app) close() {
	if a.redis != nil {
		a.redis.Close()
	}
}

// grpcServerOptions tunes the gRPC server for many short calls: a fixed
// pool of stream workers (one per core) serves calls on goroutines whose
// stacks have already grown, instead of a new goroutine per call.
func grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}
}

// countReload records a policy load in ratelimit_config_reloads.
func (a *app) countReload(r policy.Result) {
	result := "ok"
	if r.Err != nil || len(r.Stale) > 0 || r.Errors() > 0 {
		result = "error"
	}
	a.tel.reloads.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// routes is the HTTP port: health, metrics, the JSON twin of
// ShouldRateLimit and the operators' debug views.
func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", a.healthcheck)
	mux.Handle("GET /metrics", a.tel.handler())
	mux.Handle("/json", envoyapi.JSONHandler(a.rls))
	mux.HandleFunc("GET /debug/config", a.debugConfig)
	mux.HandleFunc("GET /debug/keys", a.debugKeys)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func (a *app) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if a.draining.Load() {
		http.Error(w, "draining", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK\n"))
}

func (a *app) debugConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, a.pol.Current())
}

// debugKeys shows the live state of keys starting with ?prefix= (at most
// ?limit=, default 100).
func (a *app) debugKeys(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			http.Error(w, "limit must be a positive integer", http.StatusBadRequest)
			return
		}
		limit = n
	}
	keys := a.lim.Snapshot(r.URL.Query().Get("prefix"), limit)
	mode := "local"
	if a.lim.Shared() {
		mode = "redis"
	}
	writeJSON(w, map[string]any{"mode": mode, "replica": a.cfg.ReplicaID, "keys": keys, "total_keys": a.lim.Keys(), "engine": a.lim.Stats()})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
