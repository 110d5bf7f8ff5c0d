package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// telemetry owns the OTel meter provider and the Prometheus registry that
// /metrics serves. Only this command builds them.
type telemetry struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
	reloads  metric.Int64Counter
}

func newTelemetry(service string) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "ratelimit-svc"),
		attribute.String("service.namespace", service))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	reloads, err := mp.Meter("ratelimit-svc").Int64Counter("ratelimit_config_reloads",
		metric.WithDescription("Policy reloads by result (ok, error) and files rejected."))
	if err != nil {
		return nil, fmt.Errorf("reload counter: %w", err)
	}
	return &telemetry{provider: mp, registry: reg, reloads: reloads}, nil
}

func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

func (t *telemetry) shutdown() { _ = t.provider.Shutdown(context.Background()) }

// observeShed exports the connections the HTTP ports closed at once for
// being over their cap, by port: "http" (with Prometheus's) and "debug"
// (nil when off).
func (t *telemetry) observeShed(http, debug *connLimiter) error {
	shed, err := t.provider.Meter("ratelimit-svc").Int64ObservableCounter("ratelimit_http_connections_shed",
		metric.WithDescription("HTTP connections closed because the port held its maximum, by port (http, debug): new ones, and held ones in no handler that gave way to them."))
	if err != nil {
		return err
	}
	_, err = t.provider.Meter("ratelimit-svc").RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(shed, http.Shed(), metric.WithAttributes(attribute.String("port", "http")))
		if debug != nil {
			o.ObserveInt64(shed, debug.Shed(), metric.WithAttributes(attribute.String("port", "debug")))
		}
		return nil
	}, shed)
	return err
}

// observeEngine exports the limiter's engine counters: decisions by mode,
// sync round trips and failures, and the replicas seen.
func (t *telemetry) observeEngine(lim *limiter.Limiter) error {
	m := t.provider.Meter("ratelimit-svc")
	modes, err := m.Int64ObservableCounter("ratelimit_engine_decisions",
		metric.WithDescription("Decisions the engine made other than from local state, by mode (sync, cold, overrun, degraded)."))
	if err != nil {
		return err
	}
	rounds, err := m.Int64ObservableCounter("ratelimit_sync_round_trips",
		metric.WithDescription("Sync round trips to the store (one pipeline each)."))
	if err != nil {
		return err
	}
	failures, err := m.Int64ObservableCounter("ratelimit_sync_failures",
		metric.WithDescription("Store calls that failed (sync rounds and heartbeats)."))
	if err != nil {
		return err
	}
	replicas, err := m.Int64ObservableGauge("ratelimit_replicas",
		metric.WithDescription("Live replicas of this service seen in the store's registry."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := lim.Stats()
		for mode, n := range st.Decisions {
			if mode != "local" {
				o.ObserveInt64(modes, int64(n), metric.WithAttributes(attribute.String("mode", mode)))
			}
		}
		o.ObserveInt64(rounds, int64(st.Rounds))
		o.ObserveInt64(failures, int64(st.SyncFailures))
		o.ObserveInt64(replicas, int64(st.Replicas))
		return nil
	}, modes, rounds, failures, replicas)
	return err
}
