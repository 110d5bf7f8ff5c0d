package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testShareShrink: two sharers of 100 an hour (S = 50) and four replicas
// live, two of them added after the epoch began. A newcomer's borrow
// finds nothing free and is contended, marked to shrink. Once a sharer
// shrinks its share to a share at four (25, keeping what it spent), a
// newcomer borrows what that freed; once both have, the next contention
// is a plain one (a release). A shrink never grows a share again, and a
// sharer that spent more than the smaller share holds nothing more.
func testShareShrink(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	borrow := func(key string) limiter.SyncItem {
		it := shared(key, w, 0, 2, e)
		it.Borrow, it.Waiting, it.Replicas = true, 1, 4
		return it
	}
	shrink := func(key string, to int, hits uint64, at int64) limiter.SyncItem {
		it := shared(key, w, 0, 2, e)
		it.Shrink, it.Replicas = to, 4
		if hits > 0 {
			it.ShareHits = []limiter.Hit{{At: at, N: int64(hits)}}
		}
		return it
	}
	feed := func(cursor, key, replica string) int { return feedShrink(t, st, cursor, key, replica) }
	_, cursor, err := st.Contention(context.Background(), "reader", "")
	if err != nil {
		t.Fatalf("contention: %v", err)
	}
	r := sync1(t, st, "c", borrow("k"))
	expect(t, "lent with both sharers holding all", r.Lent, 0)
	expect(t, "contended", r.Contended, true)
	expect(t, "to shrink", r.Shrink, true)
	expect(t, "the feed's entry: to shrink to a share at 4", feed(cursor, "k", "c"), 4)

	r = sync1(t, st, "a", shrink("k", 4, 10, r.Now))
	expect(t, "a's others: b's share", r.Others, 50)
	expect(t, "a's credit beside its shrunk share and b's", r.Credit, 0)
	r = sync1(t, st, "c", borrow("k"))
	expect(t, "lent: what a's shrink freed", r.Lent, 25)
	expect(t, "c's others: a's 15 left and b's 50", r.Others, 65)
	r = sync1(t, st, "d", borrow("k"))
	expect(t, "lent to d before b shrinks", r.Lent, 0)
	expect(t, "d's borrow: to shrink, b has not", r.Shrink, true)

	r = sync1(t, st, "a", shrink("k", 3, 0, 0))
	expect(t, "a's others after a shrink to 3 (ignored: 4 stands)", r.Others, 75)
	r = sync1(t, st, "b", shrink("k", 4, 0, 0))
	expect(t, "b's others: a's 15 and c's loan", r.Others, 40)
	r = sync1(t, st, "d", borrow("k"))
	expect(t, "lent to d after b's shrink", r.Lent, 25)
	r = sync1(t, st, "f", borrow("k"))
	expect(t, "lent to f with every share shrunk", r.Lent, 0)
	expect(t, "f's borrow: contended", r.Contended, true)
	expect(t, "f's borrow: a release now, not a shrink", r.Shrink, false)
	expect(t, "the feed's entry of f's borrow: a release", feed(cursor, "k", "f"), 0)

	r = sync1(t, st, "a", shrink("spent", 4, 40, r.Now))
	expect(t, "a's others: b's share", r.Others, 50)
	r = sync1(t, st, "c", borrow("spent"))
	expect(t, "lent: a spent 40 of its 50, nothing more held", r.Lent, 10)

	few := borrow("few")
	few.Replicas = 2
	r = sync1(t, st, "c", few)
	expect(t, "with no more replicas live than sharers: contended", r.Contended, true)
	expect(t, "not to shrink", r.Shrink, false)
}

// feedShrink is the live count the contention feed's entry after cursor
// of key by replica asks to shrink to (one of them must be there; 0: a
// release).
func feedShrink(t *testing.T, st limiter.Store, cursor, key, replica string) int {
	t.Helper()
	cs, _, err := st.Contention(context.Background(), "reader", cursor)
	if err != nil {
		t.Fatalf("contention: %v", err)
	}
	for _, c := range cs {
		if c.Key == key && c.Replica == replica {
			return c.Shrink
		}
	}
	t.Fatalf("no entry of %q by %s in %+v", key, replica, cs)
	return 0
}
