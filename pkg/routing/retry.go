package routing

import (
	"time"

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

// Next is what follows an attempt on a target.
type Next struct {
	// Step is the decision of the target's retry policy.
	Step resilience.Step
	// Retry asks for another attempt: on the same target after the
	// verdict's hint (or Envoy's backoff) when Alternative is nil, else
	// at once, on Alternative.
	Retry bool
	// Alternative is the hop the next attempt moves to when the step
	// fails over and one is eligible within the scope; nil otherwise.
	Alternative *policy.Target
	// SkipFor is how long requests skip the target: the step's skip, and
	// for a move to Alternative at least the wait a retry of the target
	// would have needed, so the next attempt's walk passes it by.
	SkipFor time.Duration
}

// Next plans what follows an attempt on t that ended with verdict v. A
// context-length error fails over only to a hop with a larger
// context_window than t's.
// retries counts the attempts t made for this request before this one;
// root is the target the request asked for (nil: t alone), whose chain,
// within scope, offers the alternatives an interactive target prefers
// to waiting, and that any target fails over to once it may not retry.
func (r *Router) Next(snap *policy.Snapshot, root, t *policy.Target, v resilience.Verdict, retries int, scope Scope) Next {
	var alt *policy.Target
	if v.Class == resilience.ClassContextLength {
		scope.AboveWindow = max(t.ContextWindow, 1) // only a larger window can take it
	}
	if v.Failed() && v.Failover && root != nil {
		alt, _ = r.Alternative(snap, root, t.Name, scope)
	}
	p := RetryPolicy(t)
	step := p.Plan(v, resilience.Attempt{Retries: retries, Now: r.deps.Now(), HasAlternative: alt != nil})
	n := Next{Step: step, SkipFor: step.SkipFor}
	switch {
	case step.Action == resilience.ActionRetry:
		n.Retry = true
	case step.Action == resilience.ActionFailover && alt != nil:
		n.Retry, n.Alternative = true, alt
		wait := p.Backoff(retries)
		if v.HasHint {
			wait = max(wait, min(v.Hint, resilience.MaxSkip))
		}
		n.SkipFor = max(n.SkipFor, wait)
	}
	return n
}

// Alternative reports the first hop of root's chain within scope, other
// than the target named current, that could serve now: its breakers
// admit it, its concurrency cap has room, and its rate limit and token
// budget have a unit left. It takes nothing (no probe, slot or charge);
// a limiter error counts as not eligible.
func (r *Router) Alternative(snap *policy.Snapshot, root *policy.Target, current string, scope Scope) (*policy.Target, bool) {
	for _, name := range chain(snap, root) {
		t := snap.Target(name)
		if name == current || !scope.keeps(t) || !scope.fits(t) {
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
	res, err := r.admitRate(&c, t, limiter.Check, 0)
	return err == nil && res.Status == resilience.HopServed
}

// NextCluster is the Envoy cluster the attempt after one on t should go
// to, decided before that attempt's outcome is known (Envoy re-selects a
// retry's cluster from request headers, which only the request side can
// write): the cluster of the first eligible alternative of root's chain
// (any cluster) when t's profile prefers failing over, t has no retry
// left (retries counts t's earlier attempts for this request) or t is
// not eligible now (skipped after a hint, its breaker open), else t's own
// cluster, where a retry of t or another hop of the cluster serves.
func (r *Router) NextCluster(snap *policy.Snapshot, root, t *policy.Target, retries int) string {
	prof := RetryPolicy(t).Profile()
	if root == nil || (!prof.PreferFailover && retries < prof.MaxRetries && r.eligible(t)) {
		return t.Cluster
	}
	if alt, ok := r.Alternative(snap, root, t.Name, Scope{}); ok {
		return alt.Cluster
	}
	return t.Cluster
}
