package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
)

// tracing owns the trace provider when an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with
// the exporter's other standard variables); without one, no spans are made.
type tracing struct {
	provider *sdktrace.TracerProvider
}

func newTracing(ctx context.Context, getenv func(string) string, service, replica string) (*tracing, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return &tracing{}, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return newTracingWith(exp, service, replica), nil
}

// newTracingWith batches spans to exp.
func newTracingWith(exp sdktrace.SpanExporter, service, replica string) *tracing {
	res := resource.NewSchemaless(attribute.String("service.name", "ratelimit-svc"),
		attribute.String("service.namespace", service), attribute.String("service.instance.id", replica))
	return &tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}
}

// serverOptions instruments the gRPC server when tracing is on.
func (t *tracing) serverOptions() []grpc.ServerOption {
	if t.provider == nil {
		return nil
	}
	h := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	return []grpc.ServerOption{grpc.StatsHandler(h)}
}

// shutdown flushes pending spans.
func (t *tracing) shutdown(ctx context.Context) {
	if t.provider != nil {
		_ = t.provider.Shutdown(ctx)
	}
}
