package envoyapi

import (
	"context"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// choice is the outcome of walking a target's fallback chain.
type choice struct {
	hop  *policy.Target // the serving hop; nil when none was eligible
	slot *limiter.Slot  // the hop's concurrency slot, held until the stream ends
	rate limiter.Result // the hop's request-rate decision (limited: Limit > 0)
	walk resilience.WalkResult
	// denied is the first rate decision that refused a hop, for the
	// x-ratelimit-* headers of a local reply; tokens is set when the
	// token budget refused it.
	denied    limiter.Result
	hasDenied bool
	tokens    bool
}

// choose walks root's fallback chain depth first and takes the first hop
// whose breakers, concurrency cap and rate limit all admit it.
func (x *ExtProc) choose(ctx context.Context, snap *policy.Snapshot, root *policy.Target) (choice, error) {
	chain := resilience.Expand(root.Name, func(name string) []string {
		if t := snap.Target(name); t != nil {
			return t.Fallbacks
		}
		return nil
	})
	var c choice
	var failure error
	c.walk = resilience.Walk(ctx, chain, func(_ context.Context, name string) resilience.HopResult {
		r, err := x.admit(&c, snap.Target(name))
		if err != nil {
			failure = err
			return resilience.CallerFailed(err)
		}
		return r
	})
	switch {
	case failure != nil:
		return c, failure
	case c.walk.Outcome == resilience.OutcomeDeadline:
		return c, ctx.Err()
	}
	return c, nil
}

// admit checks one hop. What it takes (a breaker probe, a slot, a rate
// charge) is given back when a later check refuses the hop; the rate
// charge comes last, so a refused hop consumes no budget.
func (x *ExtProc) admit(c *choice, t *policy.Target) (resilience.HopResult, error) {
	if t == nil {
		return resilience.Skipped(resilience.SkipIneligible), nil
	}
	rt := breakerTarget(t)
	probe := false
	if br := x.deps.Breakers; br != nil {
		a := br.Allow(rt)
		if !a.Allowed {
			return resilience.HopResult{Status: resilience.HopSkipped, Reason: a.Reason, Wait: max(time.Until(a.Until), 0)}, nil
		}
		probe = a.Probe
	}
	undo := func(s *limiter.Slot) {
		s.Release()
		if probe {
			x.deps.Breakers.Release(rt)
		}
	}
	slot, ok := x.acquire(t)
	if !ok {
		undo(nil)
		return resilience.HopResult{Status: resilience.HopSkipped, Reason: resilience.SkipConcurrencyLimited,
			Wait: resilience.ConcurrencyWait}, nil
	}
	rate, wait, ok, err := x.admitRate(c, t)
	if err != nil || !ok {
		undo(slot)
		return resilience.RateLimited(wait), err
	}
	c.hop, c.slot, c.rate = t, slot, rate
	return resilience.Served(), nil
}

// acquire takes a slot of t's concurrency cap; targets without a cap
// (or a server without slots) need none.
func (x *ExtProc) acquire(t *policy.Target) (*limiter.Slot, bool) {
	if t.MaxConcurrent == 0 || x.deps.Slots == nil {
		return nil, true
	}
	return x.deps.Slots.Acquire(slotKey(t.Name), uint64(t.MaxConcurrent))
}

// admitRate charges one request to t's rate limit and checks that its
// token budget is not spent, together: a refusal charges nothing.
func (x *ExtProc) admitRate(c *choice, t *policy.Target) (limiter.Result, time.Duration, bool, error) {
	if x.deps.Limits == nil || (t.RateLimit == nil && t.TokenLimit == nil) {
		return limiter.Result{}, 0, true, nil
	}
	var reqs [2]limiter.Request
	var out [2]limiter.Result
	n, rateAt, tokenAt := 0, -1, -1
	if t.RateLimit != nil {
		reqs[n] = limiter.Request{Key: rateKey(t), Rule: t.RateLimit, Hits: 1, Op: limiter.Charge}
		rateAt, n = n, n+1
	}
	if t.TokenLimit != nil {
		reqs[n] = limiter.Request{Key: tokenKey(t), Rule: t.TokenLimit, Op: limiter.Check}
		tokenAt, n = n, n+1
	}
	ok, err := x.deps.Limits.Decide(reqs[:n], out[:n])
	if err != nil {
		return limiter.Result{}, 0, false, err
	}
	var rate limiter.Result
	if rateAt >= 0 {
		rate = out[rateAt]
	}
	if ok {
		return rate, 0, true, nil
	}
	var wait time.Duration
	for i := range n {
		if !out[i].Allowed {
			wait = max(wait, out[i].RetryAfter)
			if !c.hasDenied {
				c.denied, c.hasDenied, c.tokens = out[i], true, i == tokenAt
			}
		}
	}
	return rate, wait, false, nil
}

// breakerTarget names t for the breakers: its own tier and its provider's.
func breakerTarget(t *policy.Target) resilience.Target {
	return resilience.Target{Name: t.Name, Provider: t.Provider, APIHost: t.APIHost}
}

// Limiter keys of a target: "target|<name>|<fingerprint>" for its request
// rate, "target|<name>|tokens|<fingerprint>" for its token budget, and
// "target|<name>" for its concurrency slots. An RLS key's second part is a
// descriptor entry with an unescaped '=', so the two never collide.
func rateKey(t *policy.Target) []byte {
	return limiter.AppendPart(targetKey(t.Name), t.RateLimit.Fingerprint())
}

func tokenKey(t *policy.Target) []byte {
	return limiter.AppendPart(limiter.AppendPart(targetKey(t.Name), "tokens"), t.TokenLimit.Fingerprint())
}

func slotKey(name string) string { return string(targetKey(name)) }

func targetKey(name string) []byte {
	return limiter.AppendPart(limiter.AppendPart(make([]byte, 0, 64), "target"), name)
}

// SlotKey is the concurrency key of a target, as passed to
// SlotAcquirer.Acquire: operators and tests read InUse with it.
func SlotKey(target string) string { return slotKey(target) }
