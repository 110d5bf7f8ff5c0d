package resilience

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// maxFallbacks is the most fallbacks of one target a chain takes.
const maxFallbacks = 5

// Expand lists the fallback chain of root, depth first: root, then its
// first fallback and that fallback's own chain, then the next fallback,
// and so on. Only the first maxFallbacks fallbacks of each target count,
// and a target already listed is skipped, which also breaks cycles.
// fallbacks returns a target's configured fallbacks; it may return nil.
func Expand(root string, fallbacks func(target string) []string) []string {
	var chain []string
	seen := map[string]bool{}
	stack := []string{root}
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[t] {
			continue
		}
		seen[t] = true
		chain = append(chain, t)
		var next []string
		if fallbacks != nil {
			next = fallbacks(t)
		}
		if len(next) > maxFallbacks {
			next = next[:maxFallbacks]
		}
		for i := len(next) - 1; i >= 0; i-- {
			if !seen[next[i]] {
				stack = append(stack, next[i])
			}
		}
	}
	return chain
}

// SkipReason says why a hop was skipped.
type SkipReason string

// The skip reasons.
const (
	SkipNone               SkipReason = ""
	SkipBreakerOpen        SkipReason = "breaker_open"
	SkipRateLimited        SkipReason = "rate_limited"
	SkipConcurrencyLimited SkipReason = "concurrency_limited"
	SkipIneligible         SkipReason = "ineligible"
)

// HopStatus is what happened at one hop.
type HopStatus uint8

// The hop statuses.
const (
	HopServed HopStatus = iota + 1
	HopSkipped
	HopFailed
)

var hopStatusNames = [...]string{"", "served", "skipped", "failed"}

// String returns the status's name.
func (s HopStatus) String() string {
	if int(s) < len(hopStatusNames) && s > 0 {
		return hopStatusNames[s]
	}
	return "hop(" + strconv.Itoa(int(s)) + ")"
}

// HopResult is a hop check's answer. Build it with Served, Skipped,
// RateLimited, Failed or CallerFailed.
type HopResult struct {
	Status      HopStatus
	Reason      SkipReason    // HopSkipped: why
	Wait        time.Duration // SkipRateLimited: how long until the hop admits
	Err         error         // HopFailed: the failure
	CallerError bool          // HopFailed: the caller's own error; the walk stops
}

// Served: the hop serves the request.
func Served() HopResult { return HopResult{Status: HopServed} }

// Skipped: the hop was not tried, for reason.
func Skipped(reason SkipReason) HopResult { return HopResult{Status: HopSkipped, Reason: reason} }

// RateLimited: the hop was skipped by a rate limit that admits again
// after wait.
func RateLimited(wait time.Duration) HopResult {
	return HopResult{Status: HopSkipped, Reason: SkipRateLimited, Wait: max(wait, 0)}
}

// Failed: the hop was tried and failed; the walk moves on.
func Failed(err error) HopResult { return HopResult{Status: HopFailed, Err: err} }

// CallerFailed: the hop failed because of the request itself; the walk
// ends and the error goes back to the caller.
func CallerFailed(err error) HopResult {
	return HopResult{Status: HopFailed, Err: err, CallerError: true}
}

// HopReport is one hop of a walk.
type HopReport struct {
	Target string
	HopResult
}

// Outcome is how a walk ended.
type Outcome uint8

// The walk outcomes.
const (
	OutcomeServed      Outcome = iota + 1 // a hop serves
	OutcomeCallerError                    // a hop failed with the caller's own error
	OutcomeExhausted                      // every hop was skipped or failed
	OutcomeDeadline                       // the shared deadline passed
)

// Errors of a walk that did not end with a serving hop.
var (
	ErrChainExhausted = errors.New("fallback chain exhausted")
	ErrChainDeadline  = errors.New("fallback chain deadline exceeded")
)

// WalkResult is the end of a walk. A caller that only admits hops reads
// the outcome and the hops; the failures, the smallest wait and Err serve
// a caller whose check tries each hop and reports it with Failed or
// RateLimited.
type WalkResult struct {
	Outcome Outcome
	Hop     string      // OutcomeServed: the serving hop
	Hops    []HopReport // every hop visited, in order
	// FirstFailure and LastFailure are the first and last failed hops
	// (zero Target when none failed).
	FirstFailure, LastFailure HopReport
	// Wait is the smallest wait when every hop was rate limited (HasWait).
	Wait    time.Duration
	HasWait bool
	// Err is nil when served; else it wraps the caller's error, or
	// ErrChainExhausted and the last failure, or ErrChainDeadline and the
	// context's error.
	Err error
}

// Walk tries hops in order, asking check about each, until one serves,
// one fails with the caller's error, the hops run out, or ctx ends (it is
// checked before every hop).
func Walk(ctx context.Context, hops []string, check func(ctx context.Context, hop string) HopResult) WalkResult {
	var res WalkResult
	allRate := len(hops) > 0
	for _, hop := range hops {
		if err := ctx.Err(); err != nil {
			res.Outcome, res.Err = OutcomeDeadline, fmt.Errorf("%w: %w", ErrChainDeadline, err)
			return res
		}
		r := check(ctx, hop)
		rep := HopReport{Target: hop, HopResult: r}
		res.Hops = append(res.Hops, rep)
		switch r.Status {
		case HopServed:
			res.Outcome, res.Hop = OutcomeServed, hop
			return res
		case HopFailed:
			if res.FirstFailure.Target == "" {
				res.FirstFailure = rep
			}
			res.LastFailure = rep
			if r.CallerError {
				res.Outcome, res.Err = OutcomeCallerError, r.Err
				return res
			}
		}
		if r.Status != HopSkipped || r.Reason != SkipRateLimited {
			allRate = false
		} else if !res.HasWait || r.Wait < res.Wait {
			res.Wait, res.HasWait = r.Wait, true
		}
	}
	if !allRate {
		res.Wait, res.HasWait = 0, false
	}
	res.Outcome, res.Err = OutcomeExhausted, ErrChainExhausted
	if res.LastFailure.Target != "" && res.LastFailure.Err != nil {
		res.Err = fmt.Errorf("%w: %w", ErrChainExhausted, res.LastFailure.Err)
	}
	return res
}
