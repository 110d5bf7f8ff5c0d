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
