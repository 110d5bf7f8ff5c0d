package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig"
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
	if err := a.openPolicies(); err != nil {
		return nil, err
	}
	pol := a.pol
	limOpts := []limiter.Option{limiter.WithLogger(log.With("component", "limiter")),
		limiter.WithMeterProvider(tel.provider), limiter.WithMaxKeys(cfg.MaxKeys)}
	if cfg.RedisURL != "" {
		client, err := newRedisClient(cfg.RedisURL, cfg.RedisTLS)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.src("redis-url"), err)
		}
		a.redis = client
		setRedisLog(log)
		limOpts = append(limOpts, limiter.WithStore(redisstore.New(client, cfg.Service, redisstore.WithKeyPrefix(cfg.RedisKeyPrefix)), cfg.ReplicaID))
	}
	a.lim = limiter.New(limOpts...)
	if err := tel.observeEngine(a.lim); err != nil {
		return nil, fmt.Errorf("engine metrics: %w", err)
	}
	charging := envoyapi.ChargeAdmitted
	if cfg.Charging == "upstream" {
		charging = envoyapi.ChargingFor(cfg.StopIncrementWhenOverLimit)
	}
	a.rls = envoyapi.NewRLS(pol, a.lim, envoyapi.WithLogger(log.With("component", "rls")),
		envoyapi.WithMeterProvider(tel.provider), envoyapi.WithResponseHeaders(headers),
		envoyapi.WithHeaderNames(cfg.HeaderNames[0], cfg.HeaderNames[1], cfg.HeaderNames[2]),
		envoyapi.WithCharging(charging), envoyapi.WithDynamicMetadata(cfg.DynamicMetadata),
		envoyapi.WithRequestBounds(cfg.RLS))
	breakers := resilience.NewRegistry(resilience.WithStateChange(envoyapi.BreakerTransitions(tel.provider)))
	xp := envoyapi.NewExtProc(pol, envoyapi.ExtProcDeps{Limits: a.lim, Slots: a.lim, Breakers: breakers,
		StreamIdleTimeout: cfg.ExtProcStreamIdle},
		envoyapi.WithLogger(log.With("component", "extproc")), envoyapi.WithMeterProvider(tel.provider))
	a.health = health.NewServer()
	opts := append(grpcServerOptions(), tr.serverOptions()...)
	opts = append(opts, cfg.bounds.grpcOptions()...)
	if cfg.GRPCTLS.enabled() {
		rel, err := newCertReloader(cfg.GRPCTLS, log.With("component", "grpc-tls"))
		if err != nil {
			a.close()
			return nil, fmt.Errorf("%s: %w", cfg.src("grpc-tls-cert"), err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(rel.serverConfig())))
	}
	a.grpc = grpc.NewServer(opts...)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if a.hasConfig() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	registerGRPC(a.grpc, a.rls, xp, a.health, st)
	if err := a.listen(); err != nil {
		a.close()
		return nil, err
	}
	if err := tel.observeShed(a.httpConns, a.debugConns); err != nil {
		a.closeListeners()
		a.close()
		return nil, fmt.Errorf("connection metrics: %w", err)
	}
	return a, nil
}

// policySource keeps the policy snapshot in force current: the file
// Watcher, or the xDS client with CONFIG_TYPE=GRPC_XDS_SOTW. Both are
// safe for concurrent use; Run owns their background work until its
// context ends.
type policySource interface {
	Current() *policy.Snapshot
	Run(ctx context.Context) error
}

// alwaysReady is a closed channel: a config that is there from the start.
var alwaysReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// openPolicies builds the source the configuration names, with the load
// options the service runs with (MERGE_DOMAIN_CONFIG, SHADOW_MODE); every
// load it makes, from files or from xDS, is counted in
// ratelimit_config_reloads.
func (a *app) openPolicies() error {
	cfg := a.cfg
	if !cfg.Xds.Enabled {
		w, err := policy.NewWatcher(cfg.ConfigPath, policy.WatcherOptions{
			Logger: a.log.With("component", "policy"), OnReload: a.countReload, Load: cfg.loadOptions(),
		})
		if err != nil {
			return fmt.Errorf("loading policies from %s: %w", cfg.ConfigPath, err)
		}
		a.pol, a.configured = w, alwaysReady
		return nil
	}
	o := cfg.Xds.Options
	o.Load = cfg.loadOptions()
	o.Logger = a.log.With("component", "xds")
	o.OnUpdate = func(u xdsconfig.Update) { a.countReload(u.Result) }
	c, err := xdsconfig.New(o)
	if err != nil {
		return fmt.Errorf("CONFIG_TYPE=GRPC_XDS_SOTW: %w", err)
	}
	a.pol, a.xds, a.configured = c, c, c.Ready()
	if cfg.Xds.ForceStart {
		a.configured = alwaysReady
	}
	return nil
}

// configSource names where the policies come from, for logs.
func (a *app) configSource() string {
	if a.xds != nil {
		return xdsconfig.SourceType + " " + a.cfg.Xds.ServerURL + " node " + a.cfg.Xds.NodeID
	}
	return a.cfg.ConfigPath
}

// listen binds every port. The gRPC, HTTP and Prometheus ports must bind;
// the debug port is for operators, so when it is taken the service warns
// and runs without it. The HTTP ports' connections are capped
// (httpConnCap), the debug port's too.
func (a *app) listen() error {
	cfg := a.cfg
	a.http = cfg.httpServer(a.routes(), cfg.HTTPWriteTimeout)
	binds := []struct {
		name, addr string
		lis        *net.Listener
	}{{"grpc-addr", cfg.GRPCAddr, &a.grpcLis}, {"http-addr", cfg.HTTPAddr, &a.httpLis}, {"prometheus-addr", cfg.PrometheusAddr, &a.promLis}}
	for _, b := range binds {
		if b.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", b.addr)
		if err != nil {
			a.closeListeners()
			return fmt.Errorf("%s: %w", cfg.src(b.name), err)
		}
		*b.lis = l
	}
	nofile := fileLimit()
	a.httpConns = newConnLimiter(httpConnCap(cfg.HTTPMaxConns, nofile))
	a.log.Info("HTTP connections capped", "max_conns", a.httpConns.Cap(), "requested", cfg.HTTPMaxConns,
		"from", cfg.src("http-max-conns"), "rlimit_nofile", nofile)
	a.httpLis = a.httpConns.wrap(a.httpLis)
	a.http.ConnState = a.httpConns.track
	if a.promLis != nil {
		a.promLis = a.httpConns.wrap(a.promLis)
		a.prom = cfg.httpServer(a.metricsRoutes(), cfg.HTTPWriteTimeout)
		a.prom.ConnState = a.httpConns.track
	}
	if cfg.DebugAddr == "" {
		return nil
	}
	l, err := net.Listen("tcp", cfg.DebugAddr)
	if err != nil {
		a.log.Warn("debug listener not started: serving without it", "addr", cfg.DebugAddr, "err", err)
		return nil
	}
	a.debugConns = newConnLimiter(cfg.DebugMaxConns)
	a.debugLis = a.debugConns.wrap(l)
	a.debug = cfg.httpServer(a.debugRoutes(), cfg.DebugWriteTimeout)
	a.debug.ConnState = a.debugConns.track
	return nil
}

// closeListeners closes the listeners bound so far (before serve owns them).
func (a *app) closeListeners() {
	for _, l := range []net.Listener{a.grpcLis, a.httpLis, a.promLis, a.debugLis} {
		if l != nil {
			l.Close()
		}
	}
}

// close releases what wire opened beyond the listeners (serve closes those).
func (a *app) close() {
	if a.redis != nil {
		a.redis.Close()
	}
}

// streamWorkersPerCore sizes the gRPC server's pool of stream workers.
// A call that finds no idle worker runs on a new goroutine whose stack
// grows by copying as the call goes deeper: with one worker per core,
// 64 callers spread over four replicas on two cores spent 9 % of a
// replica's CPU growing stacks, and a call that waits for a Redis round
// holds its worker. Sixteen per core served 10–11 % more calls on one
// and on four replicas (scripts/many-keys.sh's workload A).
const streamWorkersPerCore = 16

// grpcServerOptions tunes the gRPC server for many short calls: a fixed
// pool of stream workers serves calls on goroutines whose stacks have
// already grown, instead of a new goroutine per call.
func grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(uint32(streamWorkersPerCore * runtime.GOMAXPROCS(0)))}
}

// countReload records a policy load in ratelimit_config_reloads.
func (a *app) countReload(r policy.Result) {
	result := "ok"
	if r.Err != nil || len(r.Stale) > 0 || r.Errors() > 0 {
		result = "error"
	}
	a.tel.reloads.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// routes is the HTTP port, meant to be exposed: health, metrics and the
// JSON twin of ShouldRateLimit. Nothing on it lists keys or policies.
func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", a.healthcheck)
	mux.Handle("GET /metrics", a.tel.handler())
	mux.Handle("/json", envoyapi.JSONHandler(a.rls))
	return mux
}

// metricsRoutes is the Prometheus port (PROMETHEUS_ADDR): /metrics only.
func (a *app) metricsRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.tel.handler())
	return mux
}

func (a *app) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if a.draining.Load() {
		http.Error(w, "draining", http.StatusInternalServerError)
		return
	}
	if !a.hasConfig() {
		http.Error(w, "no config yet", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK\n"))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
