package limitertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// The suite's cases for the last mile, the sliding window's dry unit,
// token buckets, several windows and the record's lifetime.

// testLastMile: waiters get what is left even when a split gives nothing;
// of a fixed window, a replica that holds nothing gets one unit of it.
func testLastMile(t *testing.T, st limiter.Store) {
	ws := fixed(3, time.Hour)
	it := item("k", ws, 1)
	it.Algorithm, it.Replicas = limiter.SlidingWindow, 4
	expect(t, "sliding: split of 3 among 4", sync1(t, st, "a", it).Credit, 0)
	it.Waiting = 1
	expect(t, "last mile", sync1(t, st, "a", it).Credit, 1)
	it.Waiting, it.Unused = 10, 1
	expect(t, "last mile takes what is left", sync1(t, st, "b", it).Credit, 2)

	dry := item("f", ws, 1)
	dry.Replicas = 4
	expect(t, "fixed: a dry replica's unit", sync1(t, st, "a", dry).Credit, 1)
	holding := dry
	holding.Unused = 1
	expect(t, "fixed: no second unit for a replica holding one", sync1(t, st, "a", holding).Credit, 1)
	expect(t, "fixed: the next dry replica's unit", sync1(t, st, "b", dry).Credit, 1)
	expect(t, "fixed: the last unit", sync1(t, st, "c", dry).Credit, 1)
	expect(t, "fixed: nothing left", sync1(t, st, "d", dry).Credit, 0)
	dry.Want = 0
	expect(t, "fixed: no unit for a replica that wants none", sync1(t, st, "e", dry).Credit, 0)
}

// testSlidingDryUnit: of a sliding window whose slack holds a unit for
// each replica, a replica that holds nothing gets one unit even when the
// split rounds to zero, until a replica reports requests waiting or
// denied; then, for one period, units go only to waiters.
func testSlidingDryUnit(t *testing.T, st limiter.Store) {
	ws := fixed(6, time.Hour)
	it := item("k", ws, 1)
	it.Algorithm, it.Replicas = limiter.SlidingWindow, 4
	for _, r := range []string{"a", "b", "c"} {
		expect(t, "split credit of "+r, sync1(t, st, r, it).Credit, 1) // ⌊6/4⌋, ⌊5/4⌋, ⌊4/4⌋
	}
	d := sync1(t, st, "d", it)
	expect(t, "d's dry unit of 3 free among 4", d.Credit, 1)
	expect(t, "pressed before any report", d.Pressed, false)
	denied := it
	denied.Denied = 1
	e := sync1(t, st, "e", denied)
	expect(t, "e's credit once it reports a denial", e.Credit, 0)
	expect(t, "pressed after a denial", e.Pressed, true)
	expect(t, "f's credit while pressed", sync1(t, st, "f", it).Credit, 0)
	waiting := it
	waiting.Waiting = 1
	expect(t, "f's waiter served by the last mile", sync1(t, st, "f", waiting).Credit, 1)
	holding := it
	holding.Unused = 1
	expect(t, "f, holding its unit, pressed by its waiter", sync1(t, st, "f", holding).Pressed, true)

	tight := item("s", ws, 1)
	tight.Algorithm, tight.Replicas = limiter.SlidingWindow, 8
	expect(t, "no dry unit where the slack is short of a unit each", sync1(t, st, "a", tight).Credit, 0)

	// A period of a second: the four syncs below fall within it on a
	// busy machine (200 ms did not, beside a CPU hog).
	period := time.Second
	short := item("p", []limiter.Window{{Limit: 6, Period: period}}, 1)
	short.Algorithm, short.Replicas, short.Denied = limiter.SlidingWindow, 4, 1
	denial := sync1(t, st, "a", short)
	expect(t, "credit of the denying replica", denial.Credit, 1) // ⌊6/4⌋
	short.Denied = 0
	expect(t, "split while pressed", sync1(t, st, "b", short).Credit, 1)
	expect(t, "split while pressed", sync1(t, st, "c", short).Credit, 1)
	r := sync1(t, st, "d", short)
	expect(t, "no dry unit while pressed", r.Credit, 0)
	// One period after the denial; the reservations outlive it.
	sleepPast(r.Now, denial.Now+int64(period/time.Microsecond))
	r = sync1(t, st, "d", short)
	expect(t, "dry unit a period after the denial", r.Credit, 1)
	expect(t, "pressed a period after the denial", r.Pressed, false)
}

func testTokenBucket(t *testing.T, st limiter.Store) {
	ws := []limiter.Window{{Limit: 10, Period: time.Hour, Burst: 5}}
	it := item("k", ws, 100)
	it.Algorithm = limiter.TokenBucket
	expect(t, "credit up to the burst", sync1(t, st, "a", it).Credit, 5)
	interval := int64(time.Hour/time.Microsecond) / 10
	it.Want, it.Unused = 0, 5
	r0 := sync1(t, st, "a", it)
	it.Hits = []limiter.Hit{{At: r0.Now, N: 5}}
	it.Unused = 0
	r := sync1(t, st, "a", it)
	expect(t, "TAT after 5 units", r.Windows[0].TAT, r0.Now+5*interval)
	expect(t, "credit of an empty bucket", r.Credit, 0)
}

func testMultipleWindows(t *testing.T, st limiter.Store) {
	ws := []limiter.Window{{Limit: 100, Period: time.Hour}, {Limit: 5, Period: time.Minute}}
	r := sync1(t, st, "a", item("k", ws, 1000))
	expect(t, "credit of the tightest window", r.Credit, 5)
	r0 := r.Now
	it := item("k", ws, 0)
	it.Unused = 5
	it.Hits = []limiter.Hit{{At: r0, N: 3}}
	r = sync1(t, st, "a", it)
	expect(t, "hour usage", r.Windows[0].Cur, 3)
	expect(t, "minute usage", r.Windows[1].Cur, 3)
	expect(t, "kept after hits", r.Credit, 2)
}

// testRecordExpiry: once a key's windows are fresh and no reservation is
// live, the store forgets it; until then it keeps it. Windows of 250 ms
// keep the wait short on real time; a run that crosses more than one
// window's end (a busy machine) starts again.
func testRecordExpiry(t *testing.T, st limiter.Store) {
	const period = 250 * time.Millisecond
	per := int64(period / time.Microsecond)
	items := []limiter.SyncItem{item("fixed", fixed(10, period), 0), item("sliding", fixed(10, period), 0)}
	items[1].Algorithm = limiter.SlidingWindow
	for attempt := 0; ; attempt++ {
		before := make([]limiter.SyncResult, len(items))
		after := make([]limiter.SyncResult, len(items))
		for i := range items {
			items[i].Key, items[i].Lease = fmt.Sprint(i, "/", attempt), 0
		}
		r0 := sync1(t, st, "a", items[0])
		if r0.Now%per > per/2 { // late in the window: start in the next one
			sleepPast(r0.Now, (r0.Now/per+1)*per)
			r0 = sync1(t, st, "a", items[0])
		}
		e := r0.Windows[0].Epoch
		for i, it := range items {
			it.Hits = []limiter.Hit{{At: r0.Now, N: 3}}
			before[i] = sync1(t, st, "a", it)
		}
		sleepPast(before[1].Now, (e+1)*per)
		for i, it := range items {
			after[i] = sync1(t, st, "a", it)
		}
		crossed := before[1].Windows[0].Epoch != e || after[0].Windows[0].Epoch != e+1 || after[1].Windows[0].Epoch != e+1
		if crossed {
			if attempt+1 < maxAttempts {
				continue
			}
			t.Fatalf("%d attempts: the calls never fitted in one %v window", attempt+1, period)
		}
		expect(t, "fixed window's count", before[0].Windows[0].Cur, 3)
		expect(t, "fixed: epoch after", after[0].Windows[0].Epoch, e+1)
		// A fixed window is fresh in the next window: forgotten, so its
		// count does not roll into Prev.
		expect(t, "fixed window's previous count after expiry", after[0].Windows[0].Prev, 0)
		// A sliding window still weighs the previous one: kept.
		expect(t, "sliding: epoch after", after[1].Windows[0].Epoch, e+1)
		expect(t, "sliding window's previous count", after[1].Windows[0].Prev, 3)
		return
	}
}

// testDistinctKeys: keys that differ only in bytes special to a key
// layout ('{', '}', '|', ':', binary) share no state.
func testDistinctKeys(t *testing.T, st limiter.Store) {
	keys := []string{"a", "a{b}", "{a}b", "a}b{", "a|b", "a:b", "a\\:b", "\x00\xff", "", "a\x00", "{}", "{a}"}
	ws := fixed(100, time.Hour)
	for i, k := range keys {
		r := sync1(t, st, "a", item(k, ws, uint64(i+1)))
		expect(t, fmt.Sprintf("credit of %q", k), r.Credit, uint64(i+1))
		expect(t, fmt.Sprintf("others on %q", k), r.Others, 0)
	}
	for i, k := range keys {
		r := sync1(t, st, "b", item(k, ws, 100))
		expect(t, fmt.Sprintf("b's others on %q", k), r.Others, uint64(i+1))
		s := slots1(t, st, "a", limiter.SlotItem{Key: k, Max: 100, Held: uint64(i), Lease: time.Minute})
		expect(t, fmt.Sprintf("slot others on %q", k), s.Others, 0)
	}
}

// testHold: a replica's hold (SyncItem.Hold) is its reservation until
// HoldUntil, however full the window: the others' credit leaves it room,
// the holder is granted no credit for it, and it lapses at its end.
func testHold(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	probe := sync1(t, st, "c", item("k", ws, 0))
	hit := limiter.Hit{At: probe.Now, N: 8}
	held := item("k", ws, 0)
	held.Hits, held.Hold, held.HoldUntil = []limiter.Hit{hit}, 5, probe.Now+200_000
	a := sync1(t, st, "a", held)
	expect(t, "the holder's credit", a.Credit, 0)
	expect(t, "the window, hits past the room left", a.Windows[0].Cur, 8)
	b := sync1(t, st, "b", item("k", ws, 10))
	expect(t, "b's credit beside the hold", b.Credit, 0)
	expect(t, "b's others: the hold", b.Others, 5)

	// The hold past the credit granted: the credit is the holder's, the
	// reservation the larger of the two.
	c := item("h", ws, 3)
	c.Hold, c.HoldUntil = 4, probe.Now+200_000
	expect(t, "credit beside a hold", sync1(t, st, "a", c).Credit, 3)
	expect(t, "others beside a's hold of 4", sync1(t, st, "b", item("h", ws, 0)).Others, 4)
	c.Unused, c.Want, c.Hold = 3, 6, 4
	expect(t, "credit past a hold", sync1(t, st, "a", c).Credit, 9)
	expect(t, "others: a's credit of 9", sync1(t, st, "b", item("h", ws, 0)).Others, 9)

	sleepPast(probe.Now, probe.Now+200_000)
	b = sync1(t, st, "b", item("k", ws, 10))
	expect(t, "b's others after the hold", b.Others, 0)
	expect(t, "b's credit after the hold", b.Credit, 2)
}
