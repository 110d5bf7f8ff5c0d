package envoyapi

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// extProcMetrics counts ext_proc verdicts: extproc_verdicts{role, outcome}
// and, for the upstream role, the failure class.
//
// Downstream outcomes: served, fallback, passthrough (not a known target),
// rate_limited, concurrency_limited, context_window, unavailable (the
// refusals), and, on the response, stream_error (an error event in a
// streamed 200) and transport_failure (the router's own reply for an
// upstream that never answered). Upstream outcomes:
// success, retry (Envoy is asked to retry the target), fallback (to retry
// at once on another hop of the cluster), failure, unknown_target, and
// no_eligible_hop (a retry found no hop of its cluster that could serve,
// and went as it was). Either role: stream_idle (Envoy sent nothing for
// the stream idle timeout, and the stream was ended).
type extProcMetrics struct {
	verdicts metric.Int64Counter
	attrs    sync.Map // label values → metric.MeasurementOption
}

func newExtProcMetrics(m metric.Meter) *extProcMetrics {
	c, _ := m.Int64Counter("extproc_verdicts",
		metric.WithDescription("ext_proc decisions by role, outcome and failure class."))
	return &extProcMetrics{verdicts: c}
}

func (m *extProcMetrics) verdict(ctx context.Context, role, outcome string) {
	m.add(ctx, role, outcome, "")
}

func (m *extProcMetrics) upstreamVerdict(ctx context.Context, outcome, class string) {
	m.add(ctx, roleUpstream, outcome, class)
}

// add records one verdict with a cached attribute set, so steady-state
// recording allocates nothing.
func (m *extProcMetrics) add(ctx context.Context, role, outcome, class string) {
	k := role + "\x00" + outcome + "\x00" + class
	o, ok := m.attrs.Load(k)
	if !ok {
		kv := []attribute.KeyValue{attribute.String("role", role), attribute.String("outcome", outcome)}
		if role == roleUpstream {
			kv = append(kv, attribute.String("class", class))
		}
		o, _ = m.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
	m.verdicts.Add(ctx, 1, o.(metric.MeasurementOption))
}

// BreakerTransitions returns a callback for resilience.WithStateChange
// that counts breaker state changes in breaker_transitions{tier, name,
// from, to}. A nil provider means the OTel global one.
func BreakerTransitions(mp metric.MeterProvider) func(resilience.BreakerEvent) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, _ := mp.Meter(meterName).Int64Counter("breaker_transitions",
		metric.WithDescription("Circuit breaker state changes by tier, name and states."))
	return func(e resilience.BreakerEvent) {
		c.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("tier", e.Tier.String()),
			attribute.String("name", e.Name),
			attribute.String("from", e.From.String()),
			attribute.String("to", e.To.String()),
		))
	}
}
