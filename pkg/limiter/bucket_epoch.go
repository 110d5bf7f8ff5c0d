package limiter

import (
	"math/bits"
	"time"
)

// Token buckets of any burst, shared. A token bucket of Limit units a
// Period with capacity Burst refills a unit every T = Period/Limit (the
// store rounds T up to its µs: interval) and holds Burst units at most:
// it is the arrival-time arithmetic (GCRA) of T and tolerance Burst·T. So
// is the bucket of capacity Burst refilled Burst units every E = Burst·T,
// whose capacity is its rate per period: the same T, the same tolerance,
// the same answer to every request, instant by instant. The shared engine
// runs a bucket whose burst differs from its rate as that one
// (epochRule): it holds static shares of epochs of E (share_bucket.go)
// and its keys far below their rate are decided locally, where a bucket
// of any other shape would cost a round a request. Its keys, and so its
// counters in the store, stay the rule's own (Request.Key), and its
// results speak of the rule's own Limit and Period; only the windows the
// engine and the store reckon in are E's.
//
// E is kept within [minBucketEpoch, maxBucketEpoch]: a shorter epoch
// would hold shares of a few units for a few hundred ms, spent and
// released faster than the replicas' rounds come, and a longer one keeps
// share records for days. A bucket outside it is decided as before, by
// credit and probes.
//
// A replica of an earlier version reckons such a bucket in its own
// windows and counts no share of it: while one may be live, no replica
// holds shares of a sliding window or a token bucket (the registry's
// version mark, Member.Ahead, asks for this version).

const (
	minBucketEpoch = time.Second
	maxBucketEpoch = 24 * time.Hour
)

// epochRule returns the rule the shared engine runs r as: r itself, or
// for a token bucket whose burst differs from its rate and whose epoch
// E fits [minBucketEpoch, maxBucketEpoch], a copy of r whose one window
// is Burst units every E.
func epochRule(r *Rule) *Rule {
	if r.Algorithm != TokenBucket || len(r.Windows) != 1 {
		return r
	}
	w := r.Windows[0]
	if w.Burst == 0 || w.Burst == w.Limit || w.Limit == 0 || w.Period < time.Microsecond {
		return r
	}
	t := uint64(interval(storeWindows(r.Windows)[0])) // µs, as the store counts it
	hi, e := bits.Mul64(w.Burst, t)
	if hi != 0 || e > uint64(maxBucketEpoch/time.Microsecond) || e < uint64(minBucketEpoch/time.Microsecond) {
		return r
	}
	n := *r
	n.Windows = []Window{{Limit: w.Burst, Period: time.Duration(e) * time.Microsecond}}
	return &n
}

// sharedRule is epochRule(r), the same copy for every request of r while
// the engine's cache holds it. Rules of any other shape cost no lookup.
func (e *engine) sharedRule(r *Rule) *Rule {
	if r.Algorithm != TokenBucket || len(r.Windows) != 1 || r.Windows[0].Burst == 0 || r.Windows[0].Burst == r.Windows[0].Limit {
		return r
	}
	if n, ok := e.rules.Load(r); ok {
		return n.(*Rule)
	}
	n := epochRule(r)
	if e.rulesN.Add(1) > maxRuleWindows {
		e.rules.Clear()
		e.rulesN.Store(1)
	}
	e.rules.Store(r, n)
	return n
}

// sharedRequest returns r, or a copy of it for the engine's rule of
// r.Rule (sharedRule) in buf.
func (e *engine) sharedRequest(r *Request, buf *Request) *Request {
	n := e.sharedRule(r.Rule)
	if n == r.Rule {
		return r
	}
	*buf = *r
	buf.Rule = n
	return buf
}

// userResult speaks of rule's own window in res, decided by the engine
// for its epochRule: the same units remaining and the same times, but
// the rule's Limit and Period.
func userResult(res *Result, rule *Rule) {
	if res.Limit != 0 {
		res.Limit, res.Period = rule.Windows[0].Limit, rule.Windows[0].Period
	}
}
