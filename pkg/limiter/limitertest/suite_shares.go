package limitertest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// The suite's cases for static shares, the registry's members and the
// contention feed.

const minute = int64(time.Minute / time.Microsecond)

// epochOf is the store's current epoch of window w, read from the sync of
// a key of its own.
func epochOf(t *testing.T, st limiter.Store, w limiter.Window) int64 {
	t.Helper()
	return sync1(t, st, "probe", item(fmt.Sprint("epoch ", w.Period), []limiter.Window{w}, 0)).Windows[0].Epoch
}

// shared is item with static shares of epoch e of its one fixed window,
// held by n replicas in it and the next.
func shared(key string, w limiter.Window, want uint64, n int, e int64) limiter.SyncItem {
	it := item(key, []limiter.Window{w}, want)
	it.ShareEpoch, it.Sharers, it.SharersNext = e, n, n
	return it
}

// testSharesUnreported: the store counts every share no replica has
// reported as reserved: before anyone reports, a replica's grant is at
// most L − n·S, and waiters the shares leave short are contended. Rules
// without shares count none.
func testSharesUnreported(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	k := shared("k", w, 1000, 4, e) // S = 25
	k.Waiting = 5
	r := sync1(t, st, "a", k)
	expect(t, "credit beside 4 unreported shares of 25", r.Credit, 0)
	expect(t, "others: the shares", r.Others, 100)
	expect(t, "contended", r.Contended, true)
	expect(t, "expires", r.Expires, r.Now+minute)

	half := shared("h", w, 1000, 4, e)
	half.Share = 0.5 // S = ⌊50/4⌋ = 12
	r = sync1(t, st, "a", half)
	expect(t, "credit beside 4 shares of 12", r.Credit, 26) // ⌊0.5·(100 − 48)⌋
	expect(t, "others: the shares", r.Others, 48)
	expect(t, "contended without waiters", r.Contended, false)
	half.Want = 10
	r = sync1(t, st, "b", half)
	expect(t, "b's credit", r.Credit, 10)
	expect(t, "b's others: a's credit and the shares", r.Others, 26+48)
	half.Want, half.Waiting = 20, 20
	r = sync1(t, st, "c", half)
	expect(t, "c's credit: the last mile of what is free", r.Credit, 16) // 100 − 26 − 10 − 48
	expect(t, "c's others", r.Others, 26+10+48)
	expect(t, "contended with waiters left short", r.Contended, true)

	for _, name := range []string{"no share epoch", "token bucket of a burst apart", "two windows"} {
		it := shared(name, w, 1000, 4, e)
		want := uint64(100)
		switch name {
		case "no share epoch":
			it.ShareEpoch = 0
		case "token bucket of a burst apart":
			it.Algorithm = limiter.TokenBucket
			it.Windows = []limiter.Window{{Limit: 100, Period: time.Hour, Burst: 200}}
			want = 200
		default:
			it.Windows = []limiter.Window{w, {Limit: 1000, Period: 24 * time.Hour}}
		}
		it.Waiting = 1
		r := sync1(t, st, "a", it)
		expect(t, "credit, "+name, r.Credit, want)
		expect(t, "others, "+name, r.Others, 0)
		expect(t, "contended, "+name, r.Contended, false)
	}
}

// testWaitersFirst: once a replica's waiters find a fixed window's units
// held by others' shares, the window is pressed until the epoch ends: the
// units the others release go to the waiters, not as credit to replicas
// with none waiting, and a waiting replica gets what its waiters need.
// A key not pressed grants credit ahead as before.
func testWaitersFirst(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 10, Period: time.Hour}
	e := epochOf(t, st, w)
	now := sync1(t, st, "a", shared("k", w, 0, 2, e)).Now // S = 5
	a := shared("k", w, 3, 2, e)
	a.ShareHits = []limiter.Hit{{At: now, N: 5}}
	a.Waiting = 1
	r := sync1(t, st, "a", a)
	expect(t, "a's credit beside b's share", r.Credit, 0)
	expect(t, "a's waiters contended", r.Contended, true)

	// b releases its share, having spent 1 of it: 4 units are free.
	for _, key := range []string{"k", "quiet"} {
		b := shared(key, w, 3, 2, e)
		b.ShareHits = []limiter.Hit{{At: now, N: 1}}
		b.Release = r.Now
		rb := sync1(t, st, "b", b)
		if key == "k" {
			expect(t, "b's credit as it releases its share: none, a's waiters first", rb.Credit, 0)
			expect(t, "pressed", rb.Pressed, true)
			expect(t, "usage", rb.Windows[0].Cur, 6)
		} else {
			expect(t, "b's credit on a key not pressed", rb.Credit, 3)
			expect(t, "not pressed", rb.Pressed, false)
		}
	}
	a.ShareHits = nil
	r = sync1(t, st, "a", a)
	expect(t, "a's credit: what its waiters need", r.Credit, 1)
	expect(t, "a's waiters served", r.Contended, false)
}

// testShareHits: share hits are charged to the window and to the
// replica's share record, which then holds S less them: what the shares
// hold shrinks as usage grows. A replica's others count the other
// replicas' shares, not what is left of its own.
func testShareHits(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	it := shared("k", w, 0, 4, e)
	it.Share = 0.5 // S = 12
	r0 := sync1(t, st, "a", it)
	expect(t, "a's others before any report", r0.Others, 48)
	it.ShareHits = []limiter.Hit{{At: r0.Now, N: 5}}
	it.Want = 100
	a := sync1(t, st, "a", it)
	expect(t, "usage", a.Windows[0].Cur, 5)
	expect(t, "a's others: 3 unreported shares", a.Others, 36)
	expect(t, "a's credit", a.Credit, 26) // ⌊0.5·(100 − 5 − 7 − 36)⌋

	b := shared("k", w, 0, 4, e)
	b.Share = 0.5
	b.ShareHits = []limiter.Hit{{At: a.Now, N: 20}} // past its share
	rb := sync1(t, st, "b", b)
	expect(t, "usage past b's share", rb.Windows[0].Cur, 25)
	// a's 7 left and 2 unreported shares; b's share is spent.
	expect(t, "b's others", rb.Others, 26+7+24)

	it.ShareHits, it.Want, it.Unused = nil, 0, 26
	a = sync1(t, st, "a", it)
	expect(t, "a's others after b's report", a.Others, 24)
	expect(t, "a's kept credit", a.Credit, 26)
	// usage 25 + a's 26 + a's 7 left + 24 unreported: 18 free.
	c := shared("k", w, 100, 4, e)
	c.Share = 0.5
	expect(t, "c's credit", sync1(t, st, "c", c).Credit, 9)
}

// maxAttempts is how many times a test that must fit its calls in one
// short window tries before it fails: a busy machine may stretch them
// past the window's end.
const maxAttempts = 20

// testShareRelease: a release frees the rest of the replica's share of
// each epoch through the one it names: the current (key k) or the next
// (key n). Credit granted from it lapses when the share returns
// (Expires).
func testShareRelease(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: 250 * time.Millisecond}
	per := int64(w.Period / time.Microsecond)
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			t.Fatalf("%d attempts: the calls never fitted in one %v window", attempt, w.Period)
		}
		k, n := fmt.Sprint("k", attempt), fmt.Sprint("n", attempt)
		e := epochOf(t, st, w)
		r0 := sync1(t, st, "a", shared(k, w, 0, 4, e))      // S = 25
		if r0.Windows[0].Epoch != e || r0.Now%per > per/2 { // start early in a window
			sleepPast(r0.Now, (r0.Now/per+1)*per)
			continue
		}
		release := func(key string, at int64) limiter.SyncResult {
			rel := shared(key, w, 0, 4, e)
			rel.ShareHits = []limiter.Hit{{At: r0.Now, N: 5}}
			rel.Release = at
			return sync1(t, st, "a", rel)
		}
		ak := release(k, r0.Now)
		an := release(n, (e+1)*per)
		bk := sync1(t, st, "b", shared(k, w, 100, 4, e))
		bn := sync1(t, st, "b", shared(n, w, 100, 4, e))
		c := sync1(t, st, "c", shared(k, w, 0, 4, e))
		if c.Windows[0].Epoch != e { // crossed the window's end: a busy machine
			continue
		}
		expect(t, "a's others after its release", ak.Others, 75)
		expect(t, "a's others after its release through the next epoch", an.Others, 75)
		expect(t, "b's credit: a's released 20", bk.Credit, 20)
		expect(t, "b's credit lapses at the epoch's end", bk.Expires, (e+1)*per)
		expect(t, "b's others", bk.Others, 75)
		expect(t, "b's credit released through the next epoch", bn.Credit, 20)
		expect(t, "b's credit lapses at the next epoch's end", bn.Expires, (e+2)*per)
		expect(t, "c's credit", c.Credit, 0)
		expect(t, "c's expiry without credit", c.Expires, c.Now+minute)
		expect(t, "c's others", c.Others, 20+75)

		sleepPast(c.Now, (e+1)*per)
		again := shared(k, w, 0, 4, e+1)
		again.Unused = 20
		r := sync1(t, st, "b", again)
		expect(t, "next epoch", r.Windows[0].Epoch, e+1)
		expect(t, "b's credit after its epoch", r.Credit, 0)
		expect(t, "b's others: every share back", r.Others, 100)
		again.Key = n
		r = sync1(t, st, "b", again)
		expect(t, "b's credit kept through the next epoch", r.Credit, 20)
		expect(t, "b's others: a's share still released", r.Others, 75)
		expect(t, "b's credit lapses", r.Expires, (e+2)*per)
		return
	}
}

// testShareEpochs: an item counts the shares of the store's epoch with
// the sharers it names for it, its share epoch's or the next's; a
// reservation lapses at the epoch's end unless the next epoch has as many
// sharers; an item of another epoch gets nothing.
func testShareEpochs(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	end := (e + 1) * int64(time.Hour/time.Microsecond)
	it := func(key string, se int64, n, next int) limiter.SyncItem {
		x := shared(key, w, 1000, n, se)
		x.SharersNext, x.Share, x.Lease = next, 0.5, 2*time.Hour
		return x
	}
	r := sync1(t, st, "a", it("same", e, 2, 2)) // S = 25
	expect(t, "credit", r.Credit, 25)
	expect(t, "carried over with the same sharers", r.Expires, r.Now+2*60*minute)
	r = sync1(t, st, "a", it("other", e, 2, 3))
	expect(t, "credit", r.Credit, 25)
	expect(t, "lapsing at the epoch's end before other sharers", r.Expires, end)
	r = sync1(t, st, "a", it("next", e-1, 1, 4)) // this epoch's S = 12
	expect(t, "credit beside the next epoch's sharers", r.Credit, 26)
	expect(t, "others: the next epoch's shares", r.Others, 48)
	expect(t, "lapsing at the epoch's end", r.Expires, end)
	for _, se := range []int64{e - 2, e + 1} {
		x := it(fmt.Sprint("stale ", se-e), se, 2, 2)
		x.Waiting = 5
		r = sync1(t, st, "a", x)
		expect(t, fmt.Sprintf("credit of share epoch %+d", se-e), r.Credit, 0)
		// Every unit is held; the waiters of an epoch the store has
		// left do not have the others release their shares of this one.
		if r.Others < 1<<52 || r.Contended {
			t.Fatalf("share epoch %+d: others %d, contended %v; want every unit held, not contended", se-e, r.Others, r.Contended)
		}
	}
}

// testMembers: the registry lists every member with when it joined and
// when its lease ends, marking the caller's own. A renewal keeps the
// joined instant; a replica that leaves stays listed with its lease
// ended; one back after its lease ended is listed twice, its earlier
// incarnation as it ended.
func testMembers(t *testing.T, st limiter.Store) {
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	sorted := func(ms []limiter.Member) []limiter.Member {
		return slices.SortedFunc(slices.Values(ms), func(x, y limiter.Member) int {
			// A store on a fixed clock lists members with equal instants;
			// the caller flag orders them too.
			return cmp.Or(cmp.Compare(x.Joined, y.Joined), cmp.Compare(x.Expires, y.Expires),
				cmp.Compare(b2i(x.Caller), b2i(y.Caller)), cmp.Compare(x.Name, y.Name))
		})
	}
	members := func(what string, m limiter.Membership, want ...limiter.Member) {
		t.Helper()
		for i := range want {
			// every replica here counts a sliding window's and a token
			// bucket's shares, and shrinks them by its declared shrink
			want[i].Ahead, want[i].DeclaresAhead = true, true
		}
		if got, want := sorted(m.Members), sorted(want); !slices.Equal(got, want) {
			t.Fatalf("%s: members %v, want %v", what, got, want)
		}
		expect(t, what+": since", m.Since, 0)
	}
	a1 := heartbeat(t, st, "a", time.Minute)
	members("a joined", a1, limiter.Member{Joined: a1.Now, Expires: a1.Now + minute, Caller: true, Name: "a"})
	b1 := heartbeat(t, st, "b", 2*time.Minute)
	a2 := heartbeat(t, st, "a", time.Minute)
	members("a renewed", a2, limiter.Member{Joined: a1.Now, Expires: a2.Now + minute, Caller: true, Name: "a"},
		limiter.Member{Joined: b1.Now, Expires: b1.Now + 2*minute, Name: "b"})

	ctx := context.Background()
	if err := st.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Leave(ctx, "ghost"); err != nil {
		t.Fatal(err)
	}
	a3 := heartbeat(t, st, "a", time.Minute)
	expect(t, "replicas after b left", a3.Replicas, 1)
	expect(t, "members after b left", len(a3.Members), 2)
	var left limiter.Member
	for _, m := range a3.Members {
		if m.Expires <= a3.Now {
			left = m
		}
	}
	expect(t, "b's joined instant after it left", left.Joined, b1.Now)
	expect(t, "b marked as left", left.Left, true)
	expect(t, "b's name", left.Name, "b")
	if left.Expires < a2.Now || left.Expires > a3.Now {
		t.Fatalf("b's lease ends at %d, want its leave, in [%d, %d]", left.Expires, a2.Now, a3.Now)
	}
	// Back after its lease ended, b joins again: the others may have
	// stopped counting it.
	b2 := heartbeat(t, st, "b", time.Minute)
	expect(t, "replicas after b returned", b2.Replicas, 2)
	expect(t, "b's own joined instant after it returned", b2.Joined, b2.Now)
	expect(t, "a's own joined instant", a3.Joined, a1.Now)
	members("b returned", b2, limiter.Member{Joined: a1.Now, Expires: a3.Now + minute, Name: "a"},
		limiter.Member{Joined: b1.Now, Expires: left.Expires, Caller: true, Name: "b", Left: true},
		limiter.Member{Joined: b2.Now, Expires: b2.Now + minute, Caller: true, Name: "b"})
	a4 := heartbeat(t, st, "a", time.Minute)
	members("a after b returned", a4, limiter.Member{Joined: a1.Now, Expires: a4.Now + minute, Caller: true, Name: "a"},
		limiter.Member{Joined: b1.Now, Expires: left.Expires, Name: "b", Left: true},
		limiter.Member{Joined: b2.Now, Expires: b2.Now + minute, Name: "b"})

	// A lease that ended on its own is no leave: c's stays unmarked.
	c1 := heartbeat(t, st, "c", time.Millisecond)
	sleepPast(c1.Now, c1.Now+1000)
	if err := st.Leave(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	a5 := heartbeat(t, st, "a", time.Minute)
	for _, m := range a5.Members {
		if m.Name == "c" && m.Left {
			t.Fatalf("c left after its lease had ended: %+v, want it unmarked", m)
		}
	}
}

// testContention: a contended sync publishes its key to the other
// replicas, stamped with the store instant of the sync (the epoch whose
// shares they release); a reader never sees its own entries, and the
// empty cursor reads from now on.
func testContention(t *testing.T, st limiter.Store) {
	read := func(replica, cursor string) ([]limiter.Contended, string) {
		t.Helper()
		cs, next, err := st.Contention(context.Background(), replica, cursor)
		if err != nil {
			t.Fatalf("contention %s after %q: %v", replica, cursor, err)
		}
		return cs, next
	}
	same := func(what string, got []limiter.Contended, want ...limiter.Contended) {
		t.Helper()
		ok := len(got) == len(want)
		for i := 0; ok && i < len(got); i++ {
			g, w := got[i], want[i]
			ok = g.Key == w.Key && g.Algorithm == w.Algorithm && g.Replica == w.Replica && slices.Equal(g.Windows, w.Windows) &&
				(g.At == w.At || w.At == 0 && g.At > 0) && g.Full == w.Full
		}
		if !ok {
			t.Fatalf("%s: %+v, want %+v", what, got, want)
		}
	}
	hour, mw := limiter.Window{Limit: 100, Period: time.Hour}, limiter.Window{Limit: 10, Period: time.Minute}
	he, me := epochOf(t, st, hour), epochOf(t, st, mw)
	k := shared("k", hour, 50, 4, he)
	k.Waiting = 1
	expect(t, "a's sync contended", sync1(t, st, "a", k).Contended, true)
	old, bc := read("b", "")
	same("b's first read, from now on", old)
	old, ac := read("a", "")
	same("a's first read", old)

	s := shared("s", mw, 7, 2, me)
	s.Waiting = 1
	as := sync1(t, st, "a", s)
	expect(t, "a's sync of s contended", as.Contended, true)
	bk := sync1(t, st, "b", k)
	expect(t, "b's sync of k contended", bk.Contended, true)
	expect(t, "c's sync uncontended", sync1(t, st, "c", item("u", fixed(10, time.Hour), 1)).Contended, false)
	got, bc := read("b", bc)
	same("b reads a's entry, not its own", got, limiter.Contended{Key: "s", Windows: s.Windows, Replica: "a", At: as.Now})
	got, _ = read("a", ac)
	same("a reads b's entry", got, limiter.Contended{Key: "k", Windows: k.Windows, Replica: "b", At: bk.Now})
	got, bc = read("b", bc)
	same("b's read with nothing new", got)

	// One round of several items publishes the contended ones, in order.
	items := []limiter.SyncItem{shared("x", hour, 50, 4, he), item("y", fixed(10, time.Hour), 1), k}
	items[0].Waiting = 1
	out := make([]limiter.SyncResult, len(items))
	if err := st.Sync(context.Background(), "c", items, out); err != nil {
		t.Fatal(err)
	}
	got, _ = read("b", bc)
	same("b reads c's round", got, limiter.Contended{Key: "x", Windows: items[0].Windows, Replica: "c"},
		limiter.Contended{Key: "k", Windows: k.Windows, Replica: "c"})
	got, _ = read("d", "")
	same("d's first read, from now on", got)

	// The item that fills a fixed window publishes it as full, once.
	_, bc = read("b", "")
	ws := fixed(10, time.Hour)
	now := sync1(t, st, "c", item("f", ws, 0)).Now
	nine, one := item("f", ws, 0), item("f", ws, 0)
	nine.Hits, one.Hits = []limiter.Hit{{At: now, N: 9}}, []limiter.Hit{{At: now, N: 1}}
	expect(t, "9 of 10: not filled", sync1(t, st, "a", nine).Filled, false)
	fa := sync1(t, st, "a", one)
	expect(t, "10 of 10: filled", fa.Filled, true)
	expect(t, "11 of 10: filled before", sync1(t, st, "c", one).Filled, false)
	slide := item("g", ws, 0)
	slide.Algorithm, slide.Hits = limiter.SlidingWindow, []limiter.Hit{{At: now, N: 10}}
	expect(t, "a sliding window: never filled", sync1(t, st, "a", slide).Filled, false)
	got, _ = read("b", bc)
	same("b reads f full", got, limiter.Contended{Key: "f", Windows: ws, Replica: "a", At: fa.Now, Full: true})
}

// testWaitContention: a store that can wait on the feed (FeedWaiter)
// returns at once for the empty cursor, after the wait with nothing
// published, and as soon as another replica publishes.
func testWaitContention(t *testing.T, st limiter.Store) {
	fw, ok := st.(limiter.FeedWaiter)
	if !ok {
		t.Skip("the store cannot wait on the feed")
	}
	ctx := context.Background()
	_, cur, err := fw.WaitContention(ctx, "b", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, next, err := fw.WaitContention(ctx, "b", cur, 20*time.Millisecond)
	if err != nil || len(got) != 0 || next != cur {
		t.Fatalf("a wait with nothing published: %v, %q, %v; want none, %q", got, next, err, cur)
	}
	hour := limiter.Window{Limit: 100, Period: time.Hour}
	k := shared("wk", hour, 50, 4, epochOf(t, st, hour))
	k.Waiting = 1
	type read struct {
		cs  []limiter.Contended
		err error
	}
	done := make(chan read, 1)
	go func() {
		cs, _, err := fw.WaitContention(ctx, "b", cur, time.Minute)
		done <- read{cs, err}
	}()
	expect(t, "a's sync contended", sync1(t, st, "a", k).Contended, true)
	select {
	case r := <-done:
		if r.err != nil || len(r.cs) != 1 || r.cs[0].Key != "wk" || r.cs[0].Replica != "a" {
			t.Fatalf("b's wait: %+v, %v; want a's entry for wk", r.cs, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b's wait did not return on a's publication")
	}
}
