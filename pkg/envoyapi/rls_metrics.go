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

// Label values of the RLS counters. A decision's outcome (the "outcome"
// label of ratelimit_decisions) is one of the first five; the per-limit
// outcomes (ratelimit_limit_hits) and the overall code
// (ratelimit_requests) follow.
type labelValue uint8

const (
	outcomeOK labelValue = iota
	outcomeOver
	outcomeShadow
	outcomeUnlimited
	outcomeNoMatch
	limitWithin
	limitOver
	limitShadow
	codeOK
	codeOver
)

var labelValues = [...]string{
	outcomeOK: "ok", outcomeOver: "over_limit", outcomeShadow: "shadow_over_limit",
	outcomeUnlimited: "unlimited", outcomeNoMatch: "no_match",
	limitWithin: "within_limit", limitOver: "over_limit", limitShadow: "shadow_mode",
	codeOK: "ok", codeOver: "over_limit",
}

// instrument is which RLS counter a label set belongs to.
type instrument uint8

const (
	instDecisions instrument = iota // {domain, outcome, mode}
	instRequests                    // {domain, code}
	instLimitHits                   // {domain, limit, outcome}
)

// rlsMetrics counts decisions in plain atomics, one per label set, and
// reports them to OTel from an observable callback at collection time: the
// request path pays an atomic add, not the SDK's attribute handling. Label
// sets are never removed, so a batch remembers the counters it used last
// (counterMemo) and a run of calls with the same label sets looks none up.
type rlsMetrics struct {
	decisions, requests, limitHits metric.Int64ObservableCounter
	mu                             sync.RWMutex
	counts                         map[labels]*counted
	names                          map[string]struct{} // limit labels in use
	maxNames                       int
}

// labels is one label set of inst, kept small so a lookup hashes two
// strings: the domain, the limit label (limit hits only), the value and
// the mode (decisions only).
type labels struct {
	domain, limit string
	inst          instrument
	value         labelValue
	mode          limiter.Mode
}

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

// counterMemo holds the counters a batch used last, most recent first.
type counterMemo [8]struct {
	l labels
	c *counted
}

// add counts n events of a label set. A limit-hits label set names the
// limit by its metric name: the counter found is that of the label
// limitLabel gives it, which never changes once given.
func (m *rlsMetrics) add(memo *counterMemo, l labels, n int64) {
	for i := range memo {
		if memo[i].c != nil && memo[i].l == l {
			memo[i].c.n.Add(n)
			return
		}
	}
	c := m.counter(l)
	copy(memo[1:], memo[:len(memo)-1])
	memo[0].l, memo[0].c = l, c
	c.n.Add(n)
}

// counter finds or creates the counter of a label set.
func (m *rlsMetrics) counter(l labels) *counted {
	if l.inst == instLimitHits {
		l.limit = m.limitLabel(l.limit)
	}
	m.mu.RLock()
	c, ok := m.counts[l]
	m.mu.RUnlock()
	if ok {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.counts[l]; ok {
		return c
	}
	attrs := []attribute.KeyValue{attribute.String("domain", l.domain)}
	inst := m.decisions
	switch l.inst {
	case instDecisions:
		attrs = append(attrs, attribute.String("outcome", labelValues[l.value]), attribute.String("mode", l.mode.String()))
	case instRequests:
		attrs, inst = append(attrs, attribute.String("code", labelValues[l.value])), m.requests
	case instLimitHits:
		attrs = append(attrs, attribute.String("limit", l.limit), attribute.String("outcome", labelValues[l.value]))
		inst = m.limitHits
	}
	c = &counted{attrs: metric.WithAttributeSet(attribute.NewSet(attrs...)), inst: inst}
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
		m.add(&b.memo, labels{domain: domain, inst: instDecisions, value: outcomeOf(b, p), mode: mode}, 1)
	}
	code := codeOK
	if resp.OverallCode == ratelimitv3.RateLimitResponse_OVER_LIMIT {
		code = codeOver
	}
	m.add(&b.memo, labels{domain: domain, inst: instRequests, value: code}, 1)
}

func outcomeOf(b *batch, p *plan) labelValue {
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
