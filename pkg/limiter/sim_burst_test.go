package limiter_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// Simulations of token buckets whose burst differs from their rate: the
// engine runs them as buckets of Burst units every Burst·T, which hold
// static shares (bucket_epoch.go). The checks replay every admit through
// a bucket of the rule's own rate and burst (checkBucket).

// burstRule is a token bucket of limit a period with capacity burst.
func burstRule(limit uint64, period time.Duration, burst uint64) *limiter.Rule {
	return &limiter.Rule{Algorithm: limiter.TokenBucket, Windows: []limiter.Window{{Limit: limit, Period: period, Burst: burst}}}
}

// TestSimManyKeysFarBelowBurstBucket: TestSimManyKeysFarBelowLimit of a
// token bucket of 600 a minute with a burst of 300 (run as 300 every 30
// s): once the replicas hold their static shares, from the second 30 s
// that begins a lease after they joined, nothing is denied, no decision
// waits for the store, no key syncs and no admit finds the bucket empty.
// Before, every such request was a round (a probe).
func TestSimManyKeysFarBelowBurstBucket(t *testing.T) {
	simManyKeysFarBelow(t, burstRule(600, time.Minute, 300), warmUp+30*time.Second)
}

// TestSimManyKeysFarBelowBigBurst: the same of a token bucket of 100 a
// minute with a burst of 200 (run as 200 every 2 minutes). The run
// starts warmUp before a minute, which may be the middle of an epoch:
// the second epoch that begins a lease later begins 2 or 3 minutes on.
func TestSimManyKeysFarBelowBigBurst(t *testing.T) {
	simManyKeysFarBelow(t, burstRule(100, time.Minute, 200), warmUp+3*time.Minute)
}

// TestSimSkewedManyKeysBurstBucket: TestSimSkewedManyKeysBucket of a
// token bucket of 10 a second with a burst of 20: no admit finds the
// bucket empty, and a key sent at most half its rate in a second, and in
// the second before, is never denied.
func TestSimSkewedManyKeysBurstBucket(t *testing.T) {
	largeSim(t)
	t.Parallel()
	r := keySim{rule: burstRule(10, time.Second, 20), replicas: 4, keys: 1000, zipf: 1.1, rate: 3000,
		duration: 20 * time.Second, measureFrom: 5 * time.Second}.run(t)
	over, most := r.checkBucket(t)
	quiet, denied := r.quietDenials(t, 2)
	t.Logf("%d requests; %d denied after 5 s; %d admits over, by %d at most; %d quiet key windows with denials; %d decisions waited for the store, the longest %v",
		r.requests, denied, over, most, quiet, r.waited, r.longest)
}

// TestSimBurstBucketAfterIdle: a key of a token bucket of 100 a minute
// with a burst of 20, never used, gets 25 requests at once on one of 1,
// 2 or 4 replicas, once they hold static shares: the 20 of a full
// bucket are admitted, not one more, and the answers speak of the rule's
// own limit and period.
func TestSimBurstBucketAfterIdle(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		synctest.Test(t, func(t *testing.T) {
			rule := burstRule(100, time.Minute, 20)
			ls := runReplicas(t, memstore.New(nil), []string{"a", "b", "c", "d"}[:n]...)
			key := []byte("burst|" + rule.Fingerprint())
			time.Sleep(time.Until(time.Now().Truncate(12 * time.Second).Add(2*time.Minute + 5*time.Second)))
			out := make([]limiter.Result, 1)
			admitted, local := 0, 0
			for range 25 {
				ok, err := ls[0].Decide([]limiter.Request{{Key: key, Rule: rule}}, out)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
				if out[0].Mode == limiter.ModeLocal {
					local++
				}
				if out[0].Limit != 100 || out[0].Period != time.Minute {
					t.Fatalf("%d replicas: a result of limit %d per %v, want 100 per minute", n, out[0].Limit, out[0].Period)
				}
			}
			if admitted != 20 {
				t.Errorf("%d replicas: %d of 25 admitted by a full bucket of 20", n, admitted)
			}
			if local == 0 {
				t.Errorf("%d replicas: no decision from the static share", n)
			}
		})
	}
}
