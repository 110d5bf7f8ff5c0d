package limitertest

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testShareLoans: a replica that is not a sharer of the epoch borrows a
// share of it (SyncItem.Borrow) out of the budget no reservation or share
// holds, and the loan counts as held, less its share hits, until the
// replica releases it. Two sharers of 100 an hour (S = 50), b gone: j
// borrows b's 50, and asks again to be told the same 50; a's own share
// and the loan then hold everything. With both sharers live nothing is
// left to lend; with a reserving 30 first, 20 is. With two replicas
// live and one of them having released its share, a loan is at most the
// borrower's half of what is left. A
// founding epoch's loan is a founder's share; an epoch without sharers
// lends none.
func testShareLoans(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	borrow := func(key string, gone ...string) limiter.SyncItem {
		it := shared(key, w, 0, 2, e)
		it.Gone, it.Borrow = gone, true
		return it
	}
	r := sync1(t, st, "j", borrow("k", "b"))
	expect(t, "lent: b's share", r.Lent, 50)
	expect(t, "credit beside the loan", r.Credit, 0)
	r = sync1(t, st, "j", borrow("k", "b"))
	expect(t, "lent again: the same loan", r.Lent, 50)

	a := shared("k", w, 1000, 2, e)
	a.Gone = []string{"b"}
	r = sync1(t, st, "a", a)
	expect(t, "a's credit beside its share and the loan", r.Credit, 0)
	expect(t, "a's others", r.Others, 100)
	expect(t, "a lent nothing unasked", r.Lent, 0)

	spent := shared("k", w, 0, 2, e)
	spent.Gone, spent.Lent = []string{"b"}, 50
	spent.ShareHits = []limiter.Hit{{At: r.Now, N: 10}}
	r = sync1(t, st, "j", spent)
	expect(t, "usage", r.Windows[0].Cur, 10)
	expect(t, "j's others: a's share", r.Others, 50)
	r = sync1(t, st, "a", a)
	expect(t, "a's credit with 10 of the loan spent", r.Credit, 0)
	expect(t, "a's others: the loan's 40 and its own unreported share", r.Others, 90)

	rel := shared("k", w, 0, 2, e)
	rel.Gone, rel.Lent, rel.Release = []string{"b"}, 50, r.Now
	sync1(t, st, "j", rel)
	r = sync1(t, st, "a", a)
	expect(t, "a's credit: the loan's released 40", r.Credit, 40)
	r = sync1(t, st, "j", borrow("k", "b"))
	expect(t, "no loan again after a release", r.Lent, 0)

	r = sync1(t, st, "j", borrow("full"))
	expect(t, "lent with both sharers live", r.Lent, 0)
	part := shared("part", w, 30, 2, e)
	part.Gone = []string{"b"}
	r = sync1(t, st, "a", part)
	expect(t, "a's credit", r.Credit, 30)
	r = sync1(t, st, "j", borrow("part", "b"))
	expect(t, "lent: what is left", r.Lent, 20)

	whole := borrow("whole", "b")
	whole.Replicas = 2
	r = sync1(t, st, "j", whole)
	expect(t, "lent with 2 replicas live, no share released: a whole share", r.Lent, 50)
	rel = shared("split", w, 0, 2, e)
	rel.Gone = []string{"b"}
	rel.ShareHits, rel.Release = []limiter.Hit{{At: r.Now, N: 10}}, r.Now
	sync1(t, st, "a", rel) // a, live, releases its share: contended
	split := borrow("split", "b")
	split.Replicas = 2
	r = sync1(t, st, "j", split)
	expect(t, "lent after a live sharer's release: j's half of what is left", r.Lent, 45)
	gone := borrow("split", "a", "b")
	gone.Replicas = 2
	r = sync1(t, st, "k", gone)
	expect(t, "lent when the one that released left: all that is left", r.Lent, 45)

	found := borrow("founding")
	found.Sharers, found.SharersNext = -2, -2 // two founders hold 25 each
	r = sync1(t, st, "j", found)
	expect(t, "lent of a founding epoch: a founder's share", r.Lent, 25)
	expect(t, "others: the founders' shares", r.Others, 50)
	none := borrow("no sharers")
	none.Sharers = 0
	r = sync1(t, st, "j", none)
	expect(t, "lent of an epoch without sharers", r.Lent, 0)
}
