package envoyapi

import (
	"fmt"
	"slices"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// kind is how a descriptor was resolved.
type kind uint8

const (
	unmatched kind = iota // no rule: OK with no limit
	unlimited             // an unlimited rule: OK, remaining max
	replaced              // replaced by another matched limit: OK with no limit
	limited               // decided by the limiter
)

// plan is one descriptor's resolution.
type plan struct {
	kind     kind
	limit    *policy.Limit // matched configuration, nil for an override without a match
	rule     *limiter.Rule
	override *rlcommonv3.RateLimitDescriptor_RateLimitOverride
	key      []byte
	hits     uint64
	op       limiter.Op
	shadow   bool   // the descriptor's shadow_mode: never denies, status OK
	quota    bool   // the descriptor's quota_mode (see overallOver)
	group    string // its quota group (quotaGroupKey), when quota
	solo     bool   // decided alone, outside the request's atomic batch
	batchIdx int    // index into reqs/results when limited
	metric   string
}

// batch is the reusable working state of one ShouldRateLimit call.
type batch struct {
	plans    []plan
	reqs     []limiter.Request // the atomic batch [:main], then solo requests
	results  []limiter.Result
	main     int
	groups   []quotaGroup // scratch of overallOver
	charging Charging
	usage    bool // a usage report: every charge is recorded (see isUsageReport)
	shadow   bool // global shadow mode
	memo     counterMemo
	// maxOverride is the longest window an override may ask for.
	maxOverride time.Duration
}

func (b *batch) reset(n int, charging Charging) {
	b.plans = slices.Grow(b.plans[:0], n)[:n]
	for i := range b.plans {
		b.plans[i] = plan{key: b.plans[i].key[:0]}
	}
	b.reqs = b.reqs[:0]
	b.results = b.results[:0]
	b.main, b.charging, b.usage, b.shadow = 0, charging, false, false
}

// plan resolves descriptor i: the matching node along its entry path, the
// rule (configured or overridden), its counter key and its hits.
func (b *batch) plan(i int, req *ratelimitv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor, root *policy.Node) error {
	p := &b.plans[i]
	p.key = limiter.AppendPart(p.key, req.Domain)
	node, byValue := root, false
	for _, e := range d.Entries {
		node = node.Child(e.Key, e.Value)
		p.key = limiter.AppendEntry(p.key, e.Key, node.CounterValue(e.Value))
		byValue = byValue || valueToMetric(node)
	}
	p.limit = node.Limit()
	p.hits, p.op = hitsFor(req, d)
	if o := d.GetLimit(); o != nil {
		return b.planOverride(p, req, o)
	}
	switch {
	case p.limit == nil:
		p.kind = unmatched
	case p.limit.Unlimited || p.limit.Rule == nil:
		p.kind = unlimited
	default:
		p.kind, p.rule = limited, p.limit.Rule
		p.key = limiter.AppendPart(p.key, p.limit.Fingerprint)
		p.shadow, p.quota = p.limit.ShadowMode, p.limit.QuotaMode
		if p.quota {
			p.group = quotaGroupKey(d)
		}
		p.metric = p.limit.Path
		if p.limit.DetailedMetric || byValue {
			p.metric = metricName(req.Domain, d, root, p.limit)
		}
		b.chargeRule(p)
	}
	return nil
}

// planOverride applies a descriptor's limit override: it replaces the
// configured limit, also when nothing matched.
func (b *batch) planOverride(p *plan, req *ratelimitv3.RateLimitRequest, o *rlcommonv3.RateLimitDescriptor_RateLimitOverride) error {
	mult := uint32(1)
	if o.UnitMultiplier != nil {
		mult = o.UnitMultiplier.Value
	}
	rule, err := policy.RuleFromOverride(o.RequestsPerUnit, policy.Unit(o.Unit), mult, p.limit)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if period := rule.Windows[0].Period; period > b.maxOverride {
		return fmt.Errorf("%w: limit override: a window of %v, longer than the longest an override may ask for (%v)",
			errBadRequest, period, b.maxOverride)
	}
	p.kind, p.rule, p.override = limited, rule, o
	p.key = limiter.AppendPart(p.key, rule.Fingerprint())
	p.metric = overrideMetric
	b.chargeRule(p)
	return nil
}

// applyReplaces drops the limits that another matched limit replaces.
func (b *batch) applyReplaces() {
	for i := range b.plans {
		l := b.plans[i].limit
		if l == nil || len(l.Replaces) == 0 || b.plans[i].kind != limited {
			continue
		}
		for j := range b.plans {
			o := &b.plans[j]
			if j != i && o.kind == limited && o.override == nil && o.limit != nil &&
				o.limit.Name != "" && slices.Contains(l.Replaces, o.limit.Name) {
				o.kind = replaced
			}
		}
	}
}

// collect builds the limiter requests from the limited plans: first the
// atomic batch, then the requests decided alone. Shadow, quota-mode and
// globally shadowed requests never deny the batch: overallOver decides.
func (b *batch) collect() {
	for _, solo := range []bool{false, true} {
		for i := range b.plans {
			p := &b.plans[i]
			if p.kind != limited || p.solo != solo {
				continue
			}
			p.batchIdx = len(b.reqs)
			b.reqs = append(b.reqs, limiter.Request{
				Key: p.key, Rule: p.rule, Hits: p.hits, Op: p.op,
				Shadow: p.shadow || p.quota || b.shadow,
			})
		}
		if !solo {
			b.main = len(b.reqs)
		}
	}
	b.results = slices.Grow(b.results[:0], len(b.reqs))[:len(b.reqs)]
}
