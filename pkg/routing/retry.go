package routing

import (
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// RetryPolicy is t's retry_config as a policy: its profile, with
// num_retries as the retry budget and max_delay_s lowering the backoff
// cap. A target without retry_config gets the standard profile. The
// policy has no jitter: Envoy jitters the waits it is told.
func RetryPolicy(t *policy.Target) *resilience.Policy {
	prof := resilience.Standard()
	if rc := t.Retry; rc != nil {
		if rc.Profile == "interactive" {
			prof = resilience.Interactive()
		}
		prof.MaxRetries = min(int(rc.NumRetries), resilience.MaxRetries)
		if rc.MaxDelay > 0 && rc.MaxDelay < prof.Cap {
			prof.Cap = max(rc.MaxDelay, prof.Base)
		}
	}
	p, err := resilience.NewPolicy(prof, nil)
	if err != nil {
		p, _ = resilience.NewPolicy(resilience.Standard(), nil)
	}
	return p
}

// Plan decides what follows attempt number attempt (1 for the first) on
// t that ended with verdict v: t's retry policy, with alternative set
// when another hop could serve the request now (see Alternative), which
// an interactive target prefers to waiting.
func (r *Router) Plan(t *policy.Target, v resilience.Verdict, attempt int, alternative bool) resilience.Step {
	return RetryPolicy(t).Plan(v, resilience.Attempt{
		Retries: max(attempt-1, 0), Now: r.deps.Now(), HasAlternative: alternative,
	})
}

// Alternative reports the first hop of root's chain, other than the
// target named current, that keep allows and that could serve now: its
// breakers admit it, its concurrency cap has room, and its rate limit
// and token budget have a unit left. It takes nothing (no probe, slot or
// charge); a limiter error counts as not eligible.
func (r *Router) Alternative(snap *policy.Snapshot, root *policy.Target, current string, keep Keep) (*policy.Target, bool) {
	for _, name := range chain(snap, root) {
		t := snap.Target(name)
		if name == current || t == nil || (keep != nil && !keep(t)) {
			continue
		}
		if r.eligible(t) {
			return t, true
		}
	}
	return nil, false
}

// eligible is admit that only looks.
func (r *Router) eligible(t *policy.Target) bool {
	if br := r.deps.Breakers; br != nil && !br.Status(BreakerTarget(t)).Allowed {
		return false
	}
	if s := r.deps.Slots; s != nil && t.MaxConcurrent > 0 && s.InUse(SlotKey(t.Name)) >= uint64(t.MaxConcurrent) {
		return false
	}
	var c Choice
	res, err := r.admitRate(&c, t, limiter.Check)
	return err == nil && res.Status == resilience.HopServed
}
