package envoyapi

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// Charging says what a request charges when a descriptor is over its
// limit. Whatever the mode, a descriptor of a sliding window or a token
// bucket that is over its limit records nothing (recording it would keep
// a client that never stops sending locked out for ever), rules with
// always_charge record every charge, and so does a usage report (see
// isUsageReport).
type Charging uint8

const (
	// ChargeAdmitted is this service's default (the zero value): a
	// denied request consumes nothing; an admitted one charges every
	// descriptor that admitted it (a quota-mode descriptor over its
	// limit records nothing).
	ChargeAdmitted Charging = iota
	// ChargeAll is envoyproxy/ratelimit's default
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false): every descriptor
	// is charged, allowed or not, each on its own; a fixed window over
	// its limit records the hits that went over.
	ChargeAll
	// ChargeOverLimit is envoyproxy/ratelimit with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: when a descriptor
	// goes over, it alone records its hits (a fixed window) and the
	// request's other descriptors are not charged, even when the request
	// is admitted (a quota-mode or shadow descriptor went over);
	// otherwise every descriptor is charged.
	ChargeOverLimit
)

// ChargingFor maps envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT to its charging mode.
func ChargingFor(stopIncrementWhenOverLimit bool) Charging {
	if stopIncrementWhenOverLimit {
		return ChargeOverLimit
	}
	return ChargeAll
}

// isUsageReport reports whether a request reports usage rather than asks
// to be admitted: every descriptor sets its own hits_addend and none is a
// refund. That is the shape of the call Envoy makes at stream end for
// rate limits with apply_on_stream_done (hits_addend from a format such
// as %DYNAMIC_METADATA(ns:key)%), whose answer it ignores and which
// carries no other mark. Its charges are recorded in full, whatever the
// limits say, so tokens already consumed are never lost, also from
// configs (xDS) that cannot set always_charge. Request-time calls carry
// at least one descriptor without its own hits_addend unless every one
// of their rate limits sets one.
func isUsageReport(req *ratelimitv3.RateLimitRequest) bool {
	for _, d := range req.Descriptors {
		if d.GetHitsAddend() == nil || d.GetIsNegativeHits() {
			return false
		}
	}
	return true
}

// chargeRule decides how a limited plan is charged: alone, and with a
// rule that records over-limit hits, for usage reports and ChargeAll.
func (b *batch) chargeRule(p *plan) {
	switch {
	case b.usage && p.op == limiter.Charge:
		p.solo, p.rule = true, charged(p)
	case b.charging == ChargeAll:
		p.solo = true
		if p.op == limiter.Charge && p.rule.Algorithm == limiter.FixedWindow {
			p.rule = charged(p)
		}
	}
}

// charged is the plan's rule with AlwaysCharge, on the same counters.
func charged(p *plan) *limiter.Rule {
	if p.override == nil && p.limit.Charged != nil {
		return p.limit.Charged
	}
	return policy.ChargedRule(p.rule)
}

// over reports whether a plan's status is OVER_LIMIT: its limit refused
// it, and it is not a refund or in the descriptor's shadow mode. Global
// shadow mode and quota mode keep the status (as envoyproxy/ratelimit).
func (b *batch) over(p *plan) bool {
	return p.kind == limited && !b.results[p.batchIdx].Allowed && !p.shadow && p.op != limiter.Refund
}

// overallOver is the overall code: OVER_LIMIT iff a descriptor not in
// quota mode is over, or every quota group of the request is (the one
// exception to "any status over"); never under global shadow. A quota
// group (quotaGroupKey) is over when any of its descriptors is.
func (b *batch) overallOver() bool {
	b.groups = b.groups[:0]
	over := false
	for i := range b.plans {
		p := &b.plans[i]
		switch {
		case p.quota && p.kind == limited:
			b.addToGroup(p.group, b.over(p))
		case b.over(p):
			over = true
		}
	}
	if !over && len(b.groups) > 0 {
		over = true
		for _, g := range b.groups {
			over = over && g.over
		}
	}
	return over && !b.shadow
}

// decide runs the limiter and applies the charging mode: the atomic
// batch first, then the requests decided alone, then corrections.
func (s *RLS) decide(b *batch) error {
	main := b.reqs[:b.main]
	allowed, err := s.decider.Decide(main, b.results[:b.main])
	if err != nil {
		return err
	}
	if !allowed {
		if err := s.chargeAfterDenial(b); err != nil {
			return err
		}
	}
	for i := b.main; i < len(b.reqs); i++ {
		if _, err := s.decider.Decide(b.reqs[i:i+1], b.results[i:i+1]); err != nil {
			return err
		}
	}
	switch {
	case b.charging == ChargeOverLimit && anyOver(main, b.results):
		if allowed {
			if err := s.takeBack(b); err != nil {
				return err
			}
		}
		return s.recordOver(b)
	case allowed && b.overallOver():
		return s.takeBack(b) // every quota-mode descriptor was over
	}
	return nil
}

// chargeAfterDenial records the always_charge requests that a denied
// batch decided after its first denial: the limiter charges nothing
// after it.
func (s *RLS) chargeAfterDenial(b *batch) error {
	seen := false
	for i := range b.main {
		r := &b.reqs[i]
		if !seen {
			seen = !b.results[i].Allowed && !r.Shadow
			continue
		}
		if r.Op == limiter.Charge && r.Rule.AlwaysCharge {
			if _, err := s.decider.Decide(b.reqs[i:i+1], b.results[i:i+1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeBack refunds what the atomic batch charged, but always_charge
// rules, when the request turns out denied or ChargeOverLimit says so.
func (s *RLS) takeBack(b *batch) error {
	for i := range b.main {
		r := b.reqs[i]
		if r.Op != limiter.Charge || !b.results[i].Allowed || r.Rule.AlwaysCharge {
			continue
		}
		r.Op, r.Hits = limiter.Refund, max(r.Hits, 1)
		if _, err := s.decider.Decide([]limiter.Request{r}, b.results[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// recordOver charges, alone and in full, the fixed windows of the
// atomic batch that went over (ChargeOverLimit).
func (s *RLS) recordOver(b *batch) error {
	for i := range b.plans {
		p := &b.plans[i]
		if p.kind != limited || p.solo || p.op != limiter.Charge || b.results[p.batchIdx].Allowed ||
			p.rule.Algorithm != limiter.FixedWindow || p.rule.AlwaysCharge {
			continue
		}
		r := b.reqs[p.batchIdx]
		r.Rule = charged(p)
		if _, err := s.decider.Decide([]limiter.Request{r}, b.results[p.batchIdx:p.batchIdx+1]); err != nil {
			return err
		}
	}
	return nil
}

func anyOver(reqs []limiter.Request, results []limiter.Result) bool {
	for i := range reqs {
		if reqs[i].Op == limiter.Charge && !results[i].Allowed {
			return true
		}
	}
	return false
}
