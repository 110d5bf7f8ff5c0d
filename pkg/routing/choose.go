package routing

import (
	"context"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// Skip reasons of this package's own checks.
const (
	// SkipTokenLimited is the reason of a hop whose token budget cannot
	// take the request's estimate while its request rate would have
	// admitted it.
	SkipTokenLimited resilience.SkipReason = "token_limit"
	// SkipContextWindow is the reason of a hop whose context_window is
	// smaller than the request's estimate, or not larger than the window
	// a context-length error came from (Scope.AboveWindow).
	SkipContextWindow resilience.SkipReason = "context_window"
)

// Choice is the outcome of walking a target's fallback chain.
type Choice struct {
	// Hop is the serving hop; nil when none was eligible.
	Hop *policy.Target
	// Slot is the hop's concurrency slot, held until the request ends
	// (Release); nil when the hop has no cap.
	Slot *limiter.Slot
	// Rate is the hop's request-rate decision (limited: Limit > 0).
	Rate limiter.Result
	// Walk reports every hop visited, with the reason of each skip.
	Walk resilience.WalkResult
	// Denied is the first limit decision that refused a hop (HasDenied),
	// for the x-ratelimit-* headers of a refusal.
	Denied    limiter.Result
	HasDenied bool
	// Reserved is the estimate taken from Hop's token budget (Scope.Tokens
	// when the hop has one); Reconcile settles it with the usage reported.
	Reserved uint64
}

// Release gives back what the serving hop holds until the request ends.
func (c *Choice) Release() { c.Slot.Release() }

// Scope narrows a walk. The zero Scope walks the whole chain.
type Scope struct {
	// Cluster keeps only the hops served by this Envoy cluster (an
	// attempt cannot change its cluster); "" keeps every hop.
	Cluster string
	// Held names the hop the request is routed to already, admitted when
	// it was routed: it is asked only its breakers and takes no slot or
	// rate again.
	Held string
	// Tokens is the request's token estimate: a hop whose context_window
	// is smaller is skipped.
	Tokens uint64
	// Reserve takes Tokens from the serving hop's token budget (a hop
	// whose budget cannot take them is skipped); otherwise a walk only
	// checks that a budget is not spent.
	Reserve bool
	// AboveWindow, when set, keeps only the hops whose context_window is
	// larger: a context-length error moves a request to a larger window.
	AboveWindow uint32
}

// keeps reports whether t may serve within the scope.
func (s Scope) keeps(t *policy.Target) bool {
	return t != nil && (s.Cluster == "" || t.Cluster == s.Cluster)
}

// fits reports whether t's context window can take the request.
func (s Scope) fits(t *policy.Target) bool {
	w := uint64(t.ContextWindow)
	if s.AboveWindow > 0 && w <= uint64(s.AboveWindow) {
		return false
	}
	return w == 0 || s.Tokens <= w
}

// Choose walks root's fallback chain depth first and takes the first hop
// within scope whose breakers, concurrency cap, rate limit and token
// budget all admit it. A hop outside the scope is skipped as ineligible.
// The error is the limiter's, or ctx's when it ended during the walk.
func (r *Router) Choose(ctx context.Context, snap *policy.Snapshot, root *policy.Target, scope Scope) (Choice, error) {
	var c Choice
	var failure error
	c.Walk = resilience.Walk(ctx, chain(snap, root), func(_ context.Context, name string) resilience.HopResult {
		t := snap.Target(name)
		if !scope.keeps(t) {
			return resilience.Skipped(resilience.SkipIneligible)
		}
		if !scope.fits(t) {
			return resilience.Skipped(SkipContextWindow)
		}
		if name == scope.Held {
			return r.admitHeld(&c, t)
		}
		var reserve uint64
		if scope.Reserve {
			reserve = scope.Tokens
		}
		res, err := r.admit(&c, t, reserve)
		if err != nil {
			failure = err
			return resilience.CallerFailed(err)
		}
		return res
	})
	switch {
	case failure != nil:
		return c, failure
	case c.Walk.Outcome == resilience.OutcomeDeadline:
		return c, ctx.Err()
	}
	return c, nil
}

// chain lists root's fallback chain by name.
func chain(snap *policy.Snapshot, root *policy.Target) []string {
	return resilience.Expand(root.Name, func(name string) []string {
		if t := snap.Target(name); t != nil {
			return t.Fallbacks
		}
		return nil
	})
}

// admit checks one hop. What it takes (a breaker probe, a slot, a rate
// charge) is given back when a later check refuses the hop; the rate
// charge comes last, so a refused hop consumes no budget.
func (r *Router) admit(c *Choice, t *policy.Target, tokens uint64) (resilience.HopResult, error) {
	bt := BreakerTarget(t)
	probe := false
	if br := r.deps.Breakers; br != nil {
		a := br.Allow(bt)
		if !a.Allowed {
			return breakerSkip(a), nil
		}
		probe = a.Probe
	}
	undo := func(s *limiter.Slot) {
		s.Release()
		if probe {
			r.deps.Breakers.Release(bt)
		}
	}
	slot, ok := r.acquire(t)
	if !ok {
		undo(nil)
		return concurrencySkip(), nil
	}
	res, err := r.admitRate(c, t, limiter.Charge, tokens)
	if err != nil || res.Status != resilience.HopServed {
		undo(slot)
		return res, err
	}
	c.Hop, c.Slot = t, slot
	if t.TokenLimit != nil && r.deps.Limits != nil {
		c.Reserved = tokens
	}
	return res, nil
}

// admitHeld checks a hop the request holds already: its breakers alone.
func (r *Router) admitHeld(c *Choice, t *policy.Target) resilience.HopResult {
	if br := r.deps.Breakers; br != nil {
		if a := br.Allow(BreakerTarget(t)); !a.Allowed {
			return breakerSkip(a)
		}
	}
	c.Hop = t
	return resilience.Served()
}

func breakerSkip(a resilience.Admission) resilience.HopResult {
	return resilience.HopResult{Status: resilience.HopSkipped, Reason: a.Reason, Wait: max(time.Until(a.Until), 0)}
}

func concurrencySkip() resilience.HopResult {
	return resilience.HopResult{Status: resilience.HopSkipped, Reason: resilience.SkipConcurrencyLimited,
		Wait: resilience.ConcurrencyWait}
}

// acquire takes a slot of t's concurrency cap; targets without a cap
// (or a router without slots) need none.
func (r *Router) acquire(t *policy.Target) (*limiter.Slot, bool) {
	if t.MaxConcurrent == 0 || r.deps.Slots == nil {
		return nil, true
	}
	return r.deps.Slots.Acquire(SlotKey(t.Name), uint64(t.MaxConcurrent))
}

// admitRate decides one request of t's rate limit (op Charge takes it,
// Check only looks) and its token budget (op Charge with tokens > 0
// reserves them, else it checks that the budget is not spent), together:
// a refusal charges nothing. The served hop's rate decision goes to
// c.Rate; the first refusal to c.Denied.
func (r *Router) admitRate(c *Choice, t *policy.Target, op limiter.Op, tokens uint64) (resilience.HopResult, error) {
	if r.deps.Limits == nil || (t.RateLimit == nil && t.TokenLimit == nil) {
		return resilience.Served(), nil
	}
	var reqs [2]limiter.Request
	var out [2]limiter.Result
	n, rateAt := 0, -1
	if t.RateLimit != nil {
		reqs[n] = limiter.Request{Key: RateKey(t), Rule: t.RateLimit, Hits: 1, Op: op}
		if op == limiter.Check {
			reqs[n].Hits = 0
		}
		rateAt, n = n, n+1
	}
	if t.TokenLimit != nil {
		reqs[n] = limiter.Request{Key: TokenKey(t), Rule: t.TokenLimit, Op: limiter.Check}
		if op == limiter.Charge && tokens > 0 {
			reqs[n] = limiter.Request{Key: TokenKey(t), Rule: reservation(t.TokenLimit), Hits: tokens, Op: limiter.Charge}
		}
		n++
	}
	ok, err := r.deps.Limits.Decide(reqs[:n], out[:n])
	if err != nil {
		return resilience.HopResult{}, err
	}
	if ok {
		if rateAt >= 0 {
			c.Rate = out[rateAt]
		}
		return resilience.Served(), nil
	}
	res := resilience.HopResult{Status: resilience.HopSkipped, Reason: SkipTokenLimited}
	for i := range n {
		if out[i].Allowed {
			continue
		}
		res.Wait = max(res.Wait, out[i].RetryAfter)
		if i == rateAt {
			res.Reason = resilience.SkipRateLimited
		}
		if !c.HasDenied {
			c.Denied, c.HasDenied = out[i], true
		}
	}
	return res, nil
}
