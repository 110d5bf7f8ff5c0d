package envoyapi

import (
	"context"
	"sync"
	"sync/atomic"

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

// rlsMetrics counts decisions in plain atomics, one per label set, and
// reports them to OTel from an observable callback at collection time: the
// request path pays an atomic add, not the SDK's attribute handling.
type rlsMetrics struct {
	decisions, requests, limitHits metric.Int64ObservableCounter
	mu                             sync.RWMutex
	counts                         map[labels]*counted
	names                          map[string]struct{} // limit labels in use
	maxNames                       int
}

// labels is one label set: the domain and up to two more name/value pairs.
type labels struct{ domain, k1, v1, k2, v2 string }

type counted struct {
	n     atomic.Int64
	attrs metric.ObserveOption
	inst  metric.Int64ObservableCounter
}

func newRLSMetrics(m metric.Meter, maxNames int) *rlsMetrics {
	if maxNames <= 0 {
		maxNames = DefaultMetricLimits
	}
	rm := &rlsMetrics{counts: make(map[labels]*counted), names: make(map[string]struct{}), maxNames: maxNames}
	dec, _ := m.Int64ObservableCounter("ratelimit_decisions",
		metric.WithDescription("Descriptor decisions by domain, outcome and mode."))
	req, _ := m.Int64ObservableCounter("ratelimit_requests",
		metric.WithDescription("ShouldRateLimit calls by domain and overall code."))
	hits, _ := m.Int64ObservableCounter("ratelimit_limit_hits",
		metric.WithDescription("Units decided per limit by domain, limit (bounded; see detailed_metric) and outcome."))
	rm.decisions, rm.requests, rm.limitHits = dec, req, hits
	m.RegisterCallback(rm.observe, dec, req, hits)
	return rm
}

func (m *rlsMetrics) observe(_ context.Context, o metric.Observer) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, c := range m.counts {
		o.ObserveInt64(c.inst, c.n.Load(), c.attrs)
	}
	return nil
}

// add counts one event of a label set on inst.
func (m *rlsMetrics) add(inst metric.Int64ObservableCounter, l labels) { m.addN(inst, l, 1) }

// addN counts n events of a label set on inst.
func (m *rlsMetrics) addN(inst metric.Int64ObservableCounter, l labels, n int64) {
	m.mu.RLock()
	c, ok := m.counts[l]
	m.mu.RUnlock()
	if !ok {
		c = m.create(inst, l)
	}
	c.n.Add(n)
}

func (m *rlsMetrics) create(inst metric.Int64ObservableCounter, l labels) *counted {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.counts[l]; ok {
		return c
	}
	attrs := []attribute.KeyValue{attribute.String("domain", l.domain), attribute.String(l.k1, l.v1)}
	if l.k2 != "" {
		attrs = append(attrs, attribute.String(l.k2, l.v2))
	}
	c := &counted{attrs: metric.WithAttributeSet(attribute.NewSet(attrs...)), inst: inst}
	m.counts[l] = c
	return c
}

func (s *RLS) record(domain string, b *batch, resp *ratelimitv3.RateLimitResponse) {
	m := s.metrics
	for i := range b.plans {
		p := &b.plans[i]
		mode := limiter.ModeLocal
		if p.kind == limited {
			mode = b.results[p.batchIdx].Mode
			s.recordLimit(domain, b, p)
		}
		m.add(m.decisions, labels{domain, "outcome", outcomeOf(b, p), "mode", mode.String()})
	}
	code := "ok"
	if resp.OverallCode == ratelimitv3.RateLimitResponse_OVER_LIMIT {
		code = "over_limit"
	}
	m.add(m.requests, labels{domain: domain, k1: "code", v1: code})
}

func outcomeOf(b *batch, p *plan) string {
	switch p.kind {
	case unmatched, replaced:
		return outcomeNoMatch
	case unlimited:
		return outcomeUnlimited
	}
	r := b.results[p.batchIdx]
	switch {
	case r.Allowed || p.op == limiter.Refund:
		return outcomeOK
	case p.shadow || b.shadow:
		return outcomeShadow
	}
	return outcomeOver
}
