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
	if !r.ChargesTokens(t) || n == 0 {
		return nil
	}
	reqs := []limiter.Request{{Key: TokenKey(t), Rule: t.TokenLimit, Hits: n, Op: limiter.Charge}}
	out := make([]limiter.Result, 1)
	if _, err := r.deps.Limits.Decide(reqs, out); err != nil {
		return fmt.Errorf("charging %d tokens to target %s: %w", n, t.Name, err)
	}
	return nil
}
