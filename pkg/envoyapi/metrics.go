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
	mu        sync.RWMutex
	attrs     map[labels]metric.MeasurementOption
}

// labels is one label set: the domain and up to two more name/value pairs.
type labels struct{ domain, k1, v1, k2, v2 string }

func newRLSMetrics(m metric.Meter) *rlsMetrics {
	dec, _ := m.Int64Counter("ratelimit_decisions",
		metric.WithDescription("Descriptor decisions by domain, outcome and mode."))
	req, _ := m.Int64Counter("ratelimit_requests",
		metric.WithDescription("ShouldRateLimit calls by domain and overall code."))
	return &rlsMetrics{decisions: dec, requests: req, attrs: make(map[labels]metric.MeasurementOption)}
}

// opt returns the cached attribute option for a label set, so steady-state
// recording allocates nothing.
func (m *rlsMetrics) opt(l labels) metric.MeasurementOption {
	m.mu.RLock()
	o, ok := m.attrs[l]
	m.mu.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{attribute.String("domain", l.domain), attribute.String(l.k1, l.v1)}
	if l.k2 != "" {
		attrs = append(attrs, attribute.String(l.k2, l.v2))
	}
	o = metric.WithAttributeSet(attribute.NewSet(attrs...))
	m.mu.Lock()
	m.attrs[l] = o
	m.mu.Unlock()
	return o
}

func (s *RLS) record(ctx context.Context, domain string, b *batch, resp *ratelimitv3.RateLimitResponse) {
	m := s.metrics
	for i := range b.plans {
		p := &b.plans[i]
		mode := limiter.ModeLocal
		if p.kind == limited {
			mode = b.results[p.batchIdx].Mode
		}
		m.decisions.Add(ctx, 1, m.opt(labels{domain, "outcome", outcomeOf(b, p), "mode", mode.String()}))
	}
	code := "ok"
	if resp.OverallCode == ratelimitv3.RateLimitResponse_OVER_LIMIT {
		code = "over_limit"
	}
	m.requests.Add(ctx, 1, m.opt(labels{domain: domain, k1: "code", v1: code}))
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
