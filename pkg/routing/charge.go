package routing

import (
	"fmt"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// ChargesTokens reports whether t has a token budget to charge.
func (r *Router) ChargesTokens(t *policy.Target) bool {
	return t != nil && t.TokenLimit != nil && r.deps.Limits != nil
}

// ChargeTokens charges n tokens a response reported to t's token budget.
// The tokens were spent: the charge is recorded even past the limit (the
// rule charges always), as debt later requests pay back.
func (r *Router) ChargeTokens(t *policy.Target, n uint64) error {
	return r.tokens(t, n, limiter.Charge)
}

// RefundTokens gives n tokens back to t's token budget: a reservation
// larger than the usage reported.
func (r *Router) RefundTokens(t *policy.Target, n uint64) error {
	return r.tokens(t, n, limiter.Refund)
}

// Reconcile settles a reservation of reserved tokens on t with the
// actual usage: it charges the difference, or refunds it when the usage
// is smaller.
func (r *Router) Reconcile(t *policy.Target, reserved, actual uint64) error {
	if actual >= reserved {
		return r.ChargeTokens(t, actual-reserved)
	}
	return r.RefundTokens(t, reserved-actual)
}

func (r *Router) tokens(t *policy.Target, n uint64, op limiter.Op) error {
	if !r.ChargesTokens(t) || n == 0 {
		return nil
	}
	reqs := []limiter.Request{{Key: TokenKey(t), Rule: t.TokenLimit, Hits: n, Op: op}}
	out := make([]limiter.Result, 1)
	if _, err := r.deps.Limits.Decide(reqs, out); err != nil {
		verb := "charging"
		if op == limiter.Refund {
			verb = "refunding"
		}
		return fmt.Errorf("%s %d tokens of target %s: %w", verb, n, t.Name, err)
	}
	return nil
}

// reservation is a token budget's rule for a reservation: the same
// windows on the same key, but a reservation the budget cannot take is
// denied and leaves nothing behind (the budget's own rule records
// denied charges, since usage reports are spent tokens).
func reservation(rule *limiter.Rule) *limiter.Rule {
	if !rule.AlwaysCharge {
		return rule
	}
	cp := *rule
	cp.AlwaysCharge = false
	return &cp
}
