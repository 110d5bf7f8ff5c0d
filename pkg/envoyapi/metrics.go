package envoyapi

import (
	"context"
	"sync"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// Outcomes of one descriptor decision, the "outcome" label of
// ratelimit_decisions_total.
const (
	outcomeOK        = "ok"
	outcomeOver      = "over_limit"
	outcomeShadow    = "shadow_over_limit"
	outcomeUnlimited = "unlimited"
	outcomeNoMatch   = "no_match"
)

type rlsMetrics struct {
	decisions metric.Int64Counter
	requests  metric.Int64Counter
	attrs     sync.Map // domain + outcome → metric.MeasurementOption
}

func newRLSMetrics(m metric.Meter) *rlsMetrics {
	dec, _ := m.Int64Counter("ratelimit_decisions",
		metric.WithDescription("Descriptor decisions by domain, outcome and mode."))
	req, _ := m.Int64Counter("ratelimit_requests",
		metric.WithDescription("ShouldRateLimit calls by domain and overall code."))
	return &rlsMetrics{decisions: dec, requests: req}
}

// opt returns the cached attribute option for a label set, so steady-state
// recording allocates nothing.
func (m *rlsMetrics) opt(domain, name, value string) metric.MeasurementOption {
	k := domain + "\x00" + name + "\x00" + value
	if o, ok := m.attrs.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("domain", domain), attribute.String(name, value), attribute.String("mode", "local")))
	m.attrs.Store(k, o)
	return o
}

func (s *RLS) record(ctx context.Context, domain string, b *batch, resp *ratelimitv3.RateLimitResponse) {
	m := s.metrics
	for i := range b.plans {
		m.decisions.Add(ctx, 1, m.opt(domain, "outcome", outcomeOf(b, &b.plans[i])))
	}
	code := "ok"
	if resp.OverallCode == ratelimitv3.RateLimitResponse_OVER_LIMIT {
		code = "over_limit"
	}
	m.requests.Add(ctx, 1, m.opt(domain, "code", code))
}

func outcomeOf(b *batch, p *plan) string {
	switch p.kind {
	case unmatched, replaced:
		return outcomeNoMatch
	case unlimited:
		return outcomeUnlimited
	}
	r, req := b.results[p.batchIdx], b.reqs[p.batchIdx]
	switch {
	case r.Allowed || req.Op == limiter.Refund:
		return outcomeOK
	case req.Shadow:
		return outcomeShadow
	}
	return outcomeOver
}
