package redisstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// Real-time tests of token buckets with static shares (share_bucket.go).

// rtBucketOver replays each key's admitted calls, in the order they
// returned and at the instant each did (the latest it can have been
// admitted at: a bucket that refills longer holds no less), through a
// token bucket of rule's rate and capacity, refilling a unit every
// period/limit (a whole number of ns here). It returns the keys whose
// admits emptied it even so, the most units any went over by, and the
// first few.
func rtBucketOver(calls []rtCall, rule *limiter.Rule) (keys, most int, worst []string) {
	w := rule.Windows[0]
	T := int64(w.Period) / int64(w.Limit)
	tol := int64(w.Capacity(limiter.TokenBucket)) * T
	byKey := map[int][]int64{}
	for _, c := range calls {
		if c.ok {
			byKey[c.key] = append(byKey[c.key], c.end)
		}
	}
	for key, at := range byKey {
		slices.Sort(at)
		var tat int64
		over := 0
		for _, a := range at {
			tat = max(tat, a) + T
			if tat-a > tol {
				over = max(over, int((tat-a-tol+T-1)/T))
			}
		}
		if over > 0 {
			keys++
			most = max(most, over)
			if len(worst) < 3 {
				worst = append(worst, fmt.Sprintf("key %d: %d admitted, %d units beyond the bucket", key, len(at), over))
			}
		}
	}
	return keys, most, worst
}

// rtAssertBucket is rtAssertWithinStalled for a token bucket: keys whose
// admits emptied the bucket by at most n units are logged, not failed,
// if the scheduler stalled for rtStalledTolerance or more.
func rtAssertBucket(t *testing.T, calls []rtCall, rule *limiter.Rule, n int, stalls *rtStalls) {
	t.Helper()
	keys, most, worst := rtBucketOver(calls, rule)
	if keys == 0 {
		return
	}
	msg := fmt.Sprintf("%d keys' admits emptied the bucket, by %d units at most: %s", keys, most, strings.Join(worst, "; "))
	if most <= n && stalls != nil && stalls.longest() >= rtStalledTolerance {
		t.Logf("%s (the scheduler stalled up to %v)", msg, stalls.longest())
		return
	}
	t.Error(msg)
}

// TestRealtimeManyKeysFarBelowBucket is TestRealtimeManyKeysFarBelowLimit
// of a token bucket of 100 per rtPeriod: from the window its shares
// begin, every decision is local and no admit empties a bucket.
func TestRealtimeManyKeysFarBelowBucket(t *testing.T) {
	rtSkipShort(t)
	t.Parallel()
	rule := rtPer(100, rtPeriod)
	rule.Algorithm = limiter.TokenBucket
	rtManyKeysOn(t, rule, "realtime-bucket-")
}

// TestRealtimeSkewedManyKeysBucket is TestRealtimeSkewedManyKeys of a
// token bucket of 10 a second: no admit empties a bucket, and Redis
// answers every round as the Go reference does (replayed).
func TestRealtimeSkewedManyKeysBucket(t *testing.T) {
	rtSkipShort(t)
	rule := rtPerSecond(10)
	rule.Algorithm = limiter.TokenBucket
	rtSkewedManyKeys(t, rule)
}

// rtSharesFrom is when a run of rule from start holds static shares: an
// epoch later for a sliding window or a token bucket, whose sharers of
// an epoch are those of the one before.
func rtSharesFrom(rule *limiter.Rule, start time.Time) time.Time {
	if rule.Algorithm == limiter.FixedWindow {
		return start
	}
	p := rtEpoch(rule)
	return start.Truncate(p).Add(p)
}

// rtEpoch is the epoch of rule's static shares: its window's period, or
// for a token bucket whose burst differs from its rate, the time it
// takes to refill its burst, its refill interval in whole µs
// (bucket_epoch.go).
func rtEpoch(rule *limiter.Rule) time.Duration {
	w := rule.Windows[0]
	if rule.Algorithm != limiter.TokenBucket || w.Burst == 0 || w.Burst == w.Limit {
		return w.Period
	}
	us := int64(w.Period / time.Microsecond)
	return time.Duration(int64(w.Burst)*((us+int64(w.Limit)-1)/int64(w.Limit))) * time.Microsecond
}

// TestRealtimeManyKeysFarBelowBurstBucket is TestRealtimeManyKeysFarBelowBucket
// of a token bucket of 100 per rtPeriod with a burst of 50, run as 50
// every half rtPeriod: every decision from its shares is local, and no
// admit empties a bucket of the rule's own rate and burst.
func TestRealtimeManyKeysFarBelowBurstBucket(t *testing.T) {
	rtSkipShort(t)
	t.Parallel()
	rule := rtPer(100, rtPeriod)
	rule.Algorithm = limiter.TokenBucket
	rule.Windows[0].Burst = 50
	rtManyKeysOn(t, rule, "realtime-burst-")
}
