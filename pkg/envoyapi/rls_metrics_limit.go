package envoyapi

import (
	"strings"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// Per-limit metrics, envoyproxy/ratelimit's per-key stats: the units each
// limit decided (ratelimit_limit_hits), by domain, limit and outcome
// (within_limit, over_limit, shadow_mode). The limit label is the
// limit's path ("domain.key_value.key"), or with detailed_metric the
// request's own entries ("domain.key_v1.key_v2"), or with value_to_metric
// the request's value at each level that sets it. Request values make
// the label set unbounded, so at most DefaultMetricLimits distinct limit
// labels are kept (WithMetricLimits); further ones count under
// "_overflow". An override's limit counts under "_override".
const (
	// DefaultMetricLimits caps the distinct limit labels.
	DefaultMetricLimits = 1000
	overflowMetric      = "_overflow"
	overrideMetric      = "_override"
)

// WithMetricLimits caps the distinct limit labels of the per-limit
// metrics; zero or less means DefaultMetricLimits.
func WithMetricLimits(n int) Option { return func(o *options) { o.metricLimits = n } }

// valueToMetric reports whether metrics name n's level by the request's
// value: value_to_metric, unless matching values share a counter.
func valueToMetric(n *policy.Node) bool { return n.ValueToMetric() && !n.ShareThreshold() }

// metricName is the limit label of a descriptor matched to l when l has
// detailed_metric or a level of its path value_to_metric: the tree is
// walked again from root.
func metricName(domain string, d *rlcommonv3.RateLimitDescriptor, root *policy.Node, l *policy.Limit) string {
	var sb strings.Builder
	sb.WriteString(domain)
	for n, i := root, 0; i < len(d.Entries); i++ {
		e := d.Entries[i]
		n = n.Child(e.Key, e.Value)
		sb.WriteByte('.')
		sb.WriteString(e.Key)
		v := e.Value
		if !l.DetailedMetric && !valueToMetric(n) {
			v = n.Value() // the configured value or pattern; "" when key-only
		}
		if v != "" {
			sb.WriteByte('_')
			sb.WriteString(v)
		}
	}
	return sb.String()
}

// limitLabel returns name, or overflowMetric once the cap of distinct
// names is reached by others.
func (m *rlsMetrics) limitLabel(name string) string {
	m.mu.RLock()
	_, seen := m.names[name]
	full := len(m.names) >= m.maxNames
	m.mu.RUnlock()
	if seen {
		return name
	}
	if full {
		return overflowMetric
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.names[name]; !seen {
		if len(m.names) >= m.maxNames {
			return overflowMetric
		}
		m.names[name] = struct{}{}
	}
	return name
}

// recordLimit counts the units a limited plan decided.
func (s *RLS) recordLimit(domain string, b *batch, p *plan) {
	if p.op != limiter.Charge {
		return // checks and refunds spend nothing
	}
	outcome := limitWithin
	if !b.results[p.batchIdx].Allowed {
		outcome = limitOver
		if p.shadow || b.shadow {
			outcome = limitShadow
		}
	}
	hits := int64(min(max(p.hits, 1), 1<<62))
	s.metrics.add(&b.memo, labels{domain: domain, limit: p.metric, inst: instLimitHits, value: outcome}, hits)
}
