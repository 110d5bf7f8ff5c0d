package limitertest

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// bucketShared is shared for a token bucket of w, whose capacity is its
// rate per period: n sharers of epoch e, of the next and of the one
// before (prev).
func bucketShared(key string, w limiter.Window, want uint64, n, prev int, e int64) limiter.SyncItem {
	it := shared(key, w, want, n, e)
	it.Algorithm, it.Replicas, it.SharersPrev = limiter.TokenBucket, max(n, 1), prev
	return it
}

// testBucketShares: a token bucket's shares of an epoch hold half its
// rate per period between them, and the store counts beside them the
// next epoch's, against what the bucket holds at that epoch's start. The
// first sync of an epoch charges the bucket with the shares of the epoch
// before that were not reported, once; their hits pushed later charge
// nothing. A bucket whose capacity is not its rate per period has no
// shares.
func testBucketShares(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour} // T = 36 s, S = ⌊50/4⌋ = 12
	e := epochOf(t, st, w)
	p := int64(time.Hour / time.Microsecond)
	T := p / 100
	k := bucketShared("k", w, 1000, 4, 0, e)
	k.Lease = 3 * time.Hour
	r := sync1(t, st, "a", k)
	// now: 100 − 48; at the next epoch's start: 100 − 48 − 48 = 4
	expect(t, "credit beside this epoch's and the next's shares", r.Credit, 1)
	expect(t, "others: this epoch's shares", r.Others, 48)
	expect(t, "no share of the epoch before to settle", r.Windows[0].TAT, 0)
	// The next epoch's 48, the most the one after's hold (50): 98 ≤ 100;
	// with the reservation, 99 ≤ 100 + 50, half an hour's refill: the
	// reservation may be spent in the first half of the next epoch.
	expect(t, "expires in the middle of the next epoch", r.Expires, (e+2)*p-p/2)

	wait := bucketShared("waiters", w, 10, 4, 0, e)
	wait.Waiting = 10
	r = sync1(t, st, "a", wait)
	expect(t, "waiters get what fits at the next epoch's start", r.Credit, 4)
	expect(t, "contended: the next epoch's shares hold the rest", r.Contended, true)

	// The shares of the epoch before, reported by nobody: settled at
	// the epoch's first sync, as if spent as that epoch ended.
	set := bucketShared("settle", w, 0, 4, 4, e)
	set.Waiting = 100
	r = sync1(t, st, "a", set)
	tat := e*p + 48*T
	expect(t, "the bucket charged with the epoch before's 48", r.Windows[0].TAT, tat)
	holds := func(at int64) uint64 { return uint64((at + 100*T - max(tat, at)) / T) }
	expect(t, "credit beside the settled shares", r.Credit, min(sat(holds(r.Now), 48), sat(holds((e+1)*p), 96)))
	set.Waiting = 0
	set.ShareHits = []limiter.Hit{{At: e*p - 1, N: 5}} // a's hits of the settled epoch
	r2 := sync1(t, st, "a", set)
	expect(t, "settled once, and its hits pushed late charge nothing", r2.Windows[0].TAT, tat)
	at := r2.Now
	set.ShareHits = []limiter.Hit{{At: at, N: 5}}
	r2 = sync1(t, st, "a", set)
	expect(t, "this epoch's share hits charge the bucket, at the instant they were admitted", r2.Windows[0].TAT, max(tat, at)+5*T)

	rel := bucketShared("rel", w, 0, 4, 0, e)
	for _, id := range []string{"b", "c", "d"} {
		rel.Release = (e + 1) * p // through the next epoch
		sync1(t, st, id, rel)
	}
	rel.Release, rel.Want, rel.Waiting = 0, 100, 100
	r = sync1(t, st, "a", rel)
	expect(t, "three shares released through the next epoch: 100 − 12 − 12", r.Credit, 76)

	// 7 an hour: T rounds up, so an hour refills 6 whole units, one short
	// of the capacity: the margin. Shares of ⌊3.5/4⌋ = 0 hold nothing.
	odd := limiter.Window{Limit: 7, Period: time.Hour}
	m := bucketShared("margin", odd, 0, 4, 0, epochOf(t, st, odd))
	m.Waiting = 7
	expect(t, "the margin held back for the next epoch's start", sync1(t, st, "a", m).Credit, 6)

	// A burst apart from the rate: no shares.
	big := limiter.Window{Limit: 100, Period: time.Hour, Burst: 200}
	b := bucketShared("burst", big, 0, 4, 4, epochOf(t, st, big))
	b.Waiting = 200
	r = sync1(t, st, "a", b)
	expect(t, "a bucket of another capacity holds no shares", r.Credit, 200)
	expect(t, "nor settles any", r.Windows[0].TAT, 0)
}

func sat(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}
