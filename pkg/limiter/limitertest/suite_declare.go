package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testDeclaredShrink: sharers that declared a shrink of their shares in
// the registry (SyncItem.Shrunk) are counted at a share at their count.
// Two sharers of 100 an hour (S = 50), four replicas live: with both
// declared at 4 a newcomer borrows 25 at once, and so does a second;
// without, nothing is free. A declared sharer that reported more than
// its shrunk share holds nothing more; a declared name that left
// (Gone) holds nothing; more declared than are unreported counts all at
// S; a declared count not above the sharers changes nothing. Once every
// sharer declared at the live count, a borrow that finds nothing free
// is contended but not marked to shrink.
func testDeclaredShrink(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	item := func(key string, want uint64, shrunk ...limiter.ShrunkSharer) limiter.SyncItem {
		it := shared(key, w, want, 2, e)
		it.Replicas, it.Shrunk = 4, shrunk
		return it
	}
	borrow := func(key string, shrunk ...limiter.ShrunkSharer) limiter.SyncItem {
		it := item(key, 0, shrunk...)
		it.Borrow, it.Waiting = true, 1
		return it
	}
	both := []limiter.ShrunkSharer{{Name: "a", N: 4}, {Name: "b", N: 4}}

	r := sync1(t, st, "c", borrow("none"))
	expect(t, "lent with no shrink declared", r.Lent, 0)
	expect(t, "contended", r.Contended, true)
	expect(t, "marked to shrink", r.Shrink, true)

	r = sync1(t, st, "c", borrow("k", both...))
	expect(t, "lent to c with both sharers shrunk to 4", r.Lent, 25)
	expect(t, "c's others: the two shrunk shares", r.Others, 50)
	r = sync1(t, st, "d", borrow("k", both...))
	expect(t, "lent to d", r.Lent, 25)
	r = sync1(t, st, "a", item("k", 1000, both...))
	expect(t, "a's credit: nothing is free", r.Credit, 0)
	expect(t, "a's others: both shrunk shares (its own has no record) and the loans", r.Others, 100)
	r = sync1(t, st, "e", borrow("k", both...))
	expect(t, "lent to a fifth: nothing is free", r.Lent, 0)
	expect(t, "contended", r.Contended, true)
	expect(t, "not marked to shrink: every sharer shrank to the live count", r.Shrink, false)

	spent := item("spent", 0, both...)
	spent.ShareHits = []limiter.Hit{{At: r.Now, N: 30}}
	r = sync1(t, st, "a", spent)
	expect(t, "a's others: b's shrunk share", r.Others, 25)
	r = sync1(t, st, "c", borrow("spent", both...))
	expect(t, "lent beside a's 30 reported and b's 25", r.Lent, 25)
	r = sync1(t, st, "d", borrow("spent", both...))
	expect(t, "lent what is left", r.Lent, 20)

	gone := borrow("gone", both...)
	gone.Gone = []string{"b"}
	r = sync1(t, st, "c", gone)
	expect(t, "lent beside a's shrunk share, b gone", r.Lent, 25)
	expect(t, "others: a's shrunk share", r.Others, 25)

	r = sync1(t, st, "c", borrow("three", limiter.ShrunkSharer{Name: "a", N: 4}, limiter.ShrunkSharer{Name: "b", N: 4},
		limiter.ShrunkSharer{Name: "x", N: 4}))
	expect(t, "lent with more declared than sharers", r.Lent, 0)
	r = sync1(t, st, "c", borrow("low", limiter.ShrunkSharer{Name: "a", N: 2}, limiter.ShrunkSharer{Name: "b", N: 1}))
	expect(t, "lent with counts not above the sharers", r.Lent, 0)
	expect(t, "others", r.Others, 100)
	r = sync1(t, st, "c", borrow("one", limiter.ShrunkSharer{Name: "b", N: 5}, limiter.ShrunkSharer{Name: "b", N: 4}))
	expect(t, "lent with b shrunk to 5 (named twice, the larger)", r.Lent, 25)
	expect(t, "others: a's 50 and b's 20", r.Others, 70)
}

// testDeclare: a live replica's declared shrink is listed with it by
// every heartbeat until it withdraws it, and dropped when it joins again
// after its lease ended; a replica that is not live declares nothing.
func testDeclare(t *testing.T, st limiter.Store) {
	ctx := context.Background()
	find := func(m limiter.Membership, name string) limiter.Member {
		t.Helper()
		for _, x := range m.Members {
			if x.Name == name && x.Expires > m.Now {
				return x
			}
		}
		t.Fatalf("%s not live in %v", name, m.Members)
		return limiter.Member{}
	}
	heartbeat(t, st, "a", time.Minute)
	b := heartbeat(t, st, "b", time.Minute)
	d := limiter.Declaration{At: b.Now, N: 3, Until: b.Now + 5000}
	if err := st.Declare(ctx, "a", d); err != nil {
		t.Fatal(err)
	}
	if err := st.Declare(ctx, "b", limiter.Declaration{At: b.Now, N: 4, Until: b.Now}); err != nil {
		t.Fatal(err)
	}
	m := heartbeat(t, st, "b", time.Minute)
	expect(t, "a's shrink", find(m, "a").Shrink, d)
	expect(t, "b's shrink", find(m, "b").Shrink.N, 4)
	if err := st.Declare(ctx, "ghost", d); err == nil {
		t.Error("a replica not in the registry declared")
	}
	// A lease of a second: long enough to declare in on a busy machine.
	c := heartbeat(t, st, "c", time.Second)
	if err := st.Declare(ctx, "c", d); err != nil {
		t.Fatal(err)
	}
	sleepPast(c.Now, c.Now+int64(time.Second/time.Microsecond))
	if err := st.Declare(ctx, "c", d); err == nil {
		t.Error("a replica whose lease ended declared")
	}
	m = heartbeat(t, st, "c", time.Minute) // joins again
	expect(t, "c's shrink after it joined again", find(m, "c").Shrink, limiter.Declaration{})
	for _, x := range m.Members {
		if x.Name == "c" && x.Shrink != (limiter.Declaration{}) {
			t.Errorf("an incarnation of c kept a shrink: %+v", x)
		}
	}
	if err := st.Declare(ctx, "a", limiter.Declaration{}); err != nil {
		t.Fatal(err)
	}
	expect(t, "a's shrink withdrawn", find(heartbeat(t, st, "a", time.Minute), "a").Shrink, limiter.Declaration{})
}
