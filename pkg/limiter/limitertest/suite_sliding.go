package limitertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testSlidingShares: a sliding window's shares of an epoch hold half the
// limit between them, and the store counts beside them the shares of the
// epoch before, weighted as the window's previous count, and those of
// the next epoch, which the window counts whole at that epoch's start
// with what this one admitted. A replica that releases its share of the
// next epoch frees it for credit; an item of the epoch before the
// store's, which does not say the next epoch's sharers, counts half the
// limit for them.
func testSlidingShares(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	p := int64(time.Hour / time.Microsecond)
	it := shared("k", w, 1000, 4, e) // S = ⌊50/4⌋ = 12
	it.Algorithm, it.Replicas, it.SharersPrev = limiter.SlidingWindow, 4, 0
	r := sync1(t, st, "a", it)
	// now: 100 − 4·12 = 52; at the next epoch's start: 100 − 48 − 48 = 4
	expect(t, "credit beside this epoch's and the next's shares", r.Credit, 1)
	expect(t, "others: this epoch's shares", r.Others, 48)
	// 1 reserved + the next epoch's 48 + the most the one after's hold
	// (50) fit in 100: the reservation may be spent in the next epoch.
	expect(t, "expires within the next epoch", r.Expires, min(r.Now+minute, (e+2)*p))

	it.Key, it.Want, it.Waiting = "waiters", 10, 10
	r = sync1(t, st, "a", it)
	expect(t, "waiters get what fits at the next epoch's start", r.Credit, 4)
	expect(t, "contended: the next epoch's shares hold the rest", r.Contended, true)
	expect(t, "4 + 48 + 50 > 100: expires with the epoch", r.Expires, min(r.Now+minute, (e+1)*p))

	rel := shared("rel", w, 0, 4, e)
	rel.Algorithm, rel.Replicas = limiter.SlidingWindow, 4
	for _, id := range []string{"b", "c", "d"} {
		rel.Release = (e + 1) * p // through the next epoch
		sync1(t, st, id, rel)
	}
	rel.Release, rel.Want, rel.Waiting = 0, 100, 100
	r = sync1(t, st, "a", rel)
	expect(t, "three shares released through the next epoch: 100 − 12 − 12", r.Credit, 76)
	expect(t, "a's others: its own share, which it never reported", r.Others, 12)

	prev := shared("prev", w, 0, 4, e)
	prev.Algorithm, prev.Replicas, prev.SharersPrev = limiter.SlidingWindow, 4, 4
	prev.ShareHits = []limiter.Hit{{At: e*p - 1, N: 5}} // a's of the epoch before
	prev.Waiting, prev.Want = 100, 100
	r = sync1(t, st, "a", prev)
	// the epoch before: 5 pushed, and 12 − 5 + 3·12 = 43 held, weighted
	left := uint64(p - (r.Now - e*p))
	weighted := ((5+43)*left + uint64(p) - 1) / uint64(p)
	expect(t, "the epoch before's shares and hits, weighted", r.Credit, min(100-48-weighted, 4))
	expect(t, "the previous count", r.Windows[0].Prev, 5)

	late := shared("late", w, 0, 4, e-1) // an item of the epoch before the store's
	late.Algorithm, late.Replicas, late.Waiting, late.Want = limiter.SlidingWindow, 4, 100, 100
	r = sync1(t, st, "a", late)
	expect(t, "the next epoch's sharers not known: half the limit", r.Credit, min(100-48-(48*left+uint64(p)-1)/uint64(p), 100-48-50))
}

// testSlidingShareShrink: a sliding window's sharers, and a token
// bucket's, shrink their shares of an epoch for the replicas that joined
// in it, as a fixed window's do: a newcomer's borrow that finds the
// epoch's shares and the next one's holding all is published to shrink,
// not to release, and each sharer's shrink frees a whole loan.
func testSlidingShareShrink(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 200, Period: time.Hour}
	e := epochOf(t, st, w)
	_, cursor, err := st.Contention(context.Background(), "reader", "")
	if err != nil {
		t.Fatalf("contention: %v", err)
	}
	for _, a := range []limiter.Algorithm{limiter.SlidingWindow, limiter.TokenBucket} {
		key := "k-" + a.String()
		item := func() limiter.SyncItem {
			it := shared(key, w, 0, 2, e) // S = ⌊100/2⌋ = 50; at 4, 25
			it.Algorithm, it.Replicas = a, 4
			return it
		}
		borrow := func() limiter.SyncItem {
			it := item()
			it.Borrow, it.Waiting = true, 1
			return it
		}
		shrink := func() limiter.SyncItem {
			it := item()
			it.Shrink = 4
			return it
		}
		r := sync1(t, st, "c", borrow())
		expect(t, a.String()+": lent beside this epoch's shares and the next's", r.Lent, 0)
		expect(t, a.String()+": contended", r.Contended, true)
		expect(t, a.String()+": to shrink", r.Shrink, true)
		expect(t, a.String()+": the feed's entry: to shrink to a share at 4", feedShrink(t, st, cursor, key, "c"), 4)

		sync1(t, st, "a", shrink())
		r = sync1(t, st, "c", borrow())
		expect(t, a.String()+": lent: what a's shrink freed, 200 − (25 + 50) − 100 next", r.Lent, 25)
		r = sync1(t, st, "d", borrow())
		expect(t, a.String()+": lent to d before b shrinks", r.Lent, 0)
		expect(t, a.String()+": d's borrow: to shrink, b has not", r.Shrink, true)
		sync1(t, st, "b", shrink())
		r = sync1(t, st, "d", borrow())
		expect(t, a.String()+": lent to d after b's shrink", r.Lent, 25)
	}
}

// testSlidingReleasePrev: a sliding window's shares of the epoch before
// that no sharer reported count, weighted, as held, until each sharer
// says it pushed every share hit of that epoch (ReleasePrev). A key quiet
// in the epoch before, busy in this one, then has the whole of the limit
// once every sharer has released its shares of this epoch and the next:
// counted held, the epoch before's shares left it little more than half,
// for the whole epoch. A fixed window counts none of them.
func testSlidingReleasePrev(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	p := int64(time.Hour / time.Microsecond)
	quiet := func(key string, said bool) limiter.SyncItem {
		it := shared(key, w, 0, 4, e) // S = ⌊50/4⌋ = 12
		it.Algorithm, it.Replicas, it.SharersPrev = limiter.SlidingWindow, 4, 4
		it.Release, it.ReleasePrev = (e+1)*p, said // this epoch's share and the next's given up
		return it
	}
	for _, said := range []bool{false, true} {
		key := fmt.Sprint("quiet ", said)
		for _, id := range []string{"b", "c", "d"} {
			sync1(t, st, id, quiet(key, said))
		}
		it := quiet(key, said)
		it.Want, it.Waiting = 100, 100
		r := sync1(t, st, "a", it)
		if !said {
			left := uint64(p - (r.Now - e*p))
			expect(t, "the epoch before's 48 unreported, weighted", r.Credit, 100-(48*left+uint64(p)-1)/uint64(p))
			continue
		}
		expect(t, "every sharer pushed the epoch before's hits: the whole limit", r.Credit, 100)
	}

	fixed := shared("fixed", w, 0, 4, e)
	fixed.Release, fixed.ReleasePrev = (e+1)*p, true
	for _, id := range []string{"b", "c", "d"} {
		sync1(t, st, id, fixed)
	}
	fixed.Want, fixed.Waiting = 100, 100
	r := sync1(t, st, "a", fixed)
	expect(t, "a fixed window: nothing of the epoch before held", r.Credit, 100)
}
