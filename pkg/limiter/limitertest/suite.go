package limitertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// StoreSuite is the conformance suite of limiter.Store: every
// implementation runs it. It works on real time, as a Redis store's clock
// (Redis TIME) cannot be faked, so it reads instants from the replies and
// waits out leases of a few hundred milliseconds; its subtests run in
// parallel. newStore returns an empty store, or one that shares no keys
// or replicas with the other calls' stores (a Redis store with its own
// service name).
func StoreSuite(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	tests := []struct {
		name string
		run  func(*testing.T, limiter.Store)
	}{
		{"EmptyCalls", testEmptyCalls},
		{"Clock", testClock},
		{"GrantWithinFreeBudget", testGrantWithinFreeBudget},
		{"OthersCounted", testOthersCounted},
		{"SplitShare", testSplitShare},
		{"HitsCharged", testHitsCharged},
		{"Refund", testRefund},
		{"LateHits", testLateHits},
		{"LateHitsSliding", testLateHitsSliding},
		{"KeptCredit", testKeptCredit},
		{"ReservationExpiry", testReservationExpiry},
		{"Release", testRelease},
		{"LastMile", testLastMile},
		{"SlidingDryUnit", testSlidingDryUnit},
		{"TokenBucket", testTokenBucket},
		{"MultipleWindows", testMultipleWindows},
		{"RecordExpiry", testRecordExpiry},
		{"DistinctKeys", testDistinctKeys},
		{"Slots", testSlots},
		{"SlotExpiryAndRelease", testSlotExpiryAndRelease},
		{"Heartbeat", testHeartbeat},
		{"ConcurrentReplicas", testConcurrentReplicas},
		{"CanceledContext", testCanceledContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newStore(t))
		})
	}
}

func fixed(limit uint64, period time.Duration) []limiter.Window {
	return []limiter.Window{{Limit: limit, Period: period}}
}

// item is a sync of key under windows (fixed window unless set), asking
// for want units with a one-minute lease, one replica, share 1.
func item(key string, ws []limiter.Window, want uint64) limiter.SyncItem {
	return limiter.SyncItem{Key: key, Windows: ws, Want: want, Share: 1, Replicas: 1, Lease: time.Minute}
}

func sync1(t *testing.T, st limiter.Store, replica string, it limiter.SyncItem) limiter.SyncResult {
	t.Helper()
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(context.Background(), replica, []limiter.SyncItem{it}, out); err != nil {
		t.Fatalf("sync %s %q: %v", replica, it.Key, err)
	}
	if len(out[0].Windows) != len(it.Windows) {
		t.Fatalf("sync %s %q: %d window states for %d windows", replica, it.Key, len(out[0].Windows), len(it.Windows))
	}
	return out[0]
}

func slots1(t *testing.T, st limiter.Store, replica string, it limiter.SlotItem) limiter.SlotResult {
	t.Helper()
	out := make([]limiter.SlotResult, 1)
	if err := st.SyncSlots(context.Background(), replica, []limiter.SlotItem{it}, out); err != nil {
		t.Fatalf("sync slots %s %q: %v", replica, it.Key, err)
	}
	return out[0]
}

func heartbeat(t *testing.T, st limiter.Store, replica string, lease time.Duration) limiter.Membership {
	t.Helper()
	m, err := st.Heartbeat(context.Background(), replica, lease)
	if err != nil {
		t.Fatalf("heartbeat %s: %v", replica, err)
	}
	return m
}

func expect[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func testEmptyCalls(t *testing.T, st limiter.Store) {
	ctx := context.Background()
	if err := st.Sync(ctx, "a", nil, nil); err != nil {
		t.Errorf("empty Sync: %v", err)
	}
	if err := st.SyncSlots(ctx, "a", nil, nil); err != nil {
		t.Errorf("empty SyncSlots: %v", err)
	}
	if err := st.Release(ctx, "a", nil, nil); err != nil {
		t.Errorf("empty Release: %v", err)
	}
	if err := st.Release(ctx, "a", []string{"never-synced"}, []string{"never-synced"}); err != nil {
		t.Errorf("Release of unknown keys: %v", err)
	}
	if err := st.Leave(ctx, "never-joined"); err != nil {
		t.Errorf("Leave of an unknown replica: %v", err)
	}
}

// testClock: instants are Unix microseconds and do not go back.
func testClock(t *testing.T, st limiter.Store) {
	var last int64
	for i := range 5 {
		before := time.Now().UnixMicro()
		r := sync1(t, st, "a", item("clock", fixed(10, time.Hour), 0))
		if d := r.Now - before; d < -int64(time.Minute/time.Microsecond) || d > int64(time.Minute/time.Microsecond) {
			t.Fatalf("Now %d is %dµs from the local clock: not Unix microseconds?", r.Now, d)
		}
		if r.Now < last {
			t.Fatalf("round %d: Now went back from %d to %d", i, last, r.Now)
		}
		last = r.Now
		m := heartbeat(t, st, "a", time.Second)
		if m.Now < last {
			t.Fatalf("heartbeat Now %d before sync Now %d", m.Now, last)
		}
		last = m.Now
	}
}

func testGrantWithinFreeBudget(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	a := sync1(t, st, "a", item("k", ws, 100))
	expect(t, "a's credit", a.Credit, 10)
	expect(t, "a's others", a.Others, 0)
	expect(t, "usage", a.Windows[0].Cur, 0)
	expect(t, "epoch", a.Windows[0].Epoch, a.Now/int64(time.Hour/time.Microsecond))
	b := sync1(t, st, "b", item("k", ws, 100))
	expect(t, "b's credit", b.Credit, 0)
	expect(t, "b's others", b.Others, 10)
}

func testOthersCounted(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	expect(t, "a's credit", sync1(t, st, "a", item("k", ws, 6)).Credit, 6)
	b := sync1(t, st, "b", item("k", ws, 100))
	expect(t, "b's credit", b.Credit, 4)
	expect(t, "b's others", b.Others, 6)
	it := item("k", ws, 0)
	it.Unused = 6
	a := sync1(t, st, "a", it)
	expect(t, "a's kept credit", a.Credit, 6)
	expect(t, "a's others", a.Others, 4)
}

func testSplitShare(t *testing.T, st limiter.Store) {
	ws := fixed(100, time.Hour)
	it := item("k", ws, 1000)
	it.Share, it.Replicas = 0.5, 2
	expect(t, "credit at share 0.5 of 2", sync1(t, st, "a", it).Credit, 25) // ⌊0.5·100/2⌋
	it.Key, it.Share, it.Replicas = "k2", 0, 0                              // zero share means 1, zero replicas 1
	expect(t, "credit at share 0 of 0", sync1(t, st, "a", it).Credit, 100)
	it.Key, it.Share, it.Replicas = "k3", 1, 3
	expect(t, "credit want-capped", sync1(t, st, "a", item("k4", ws, 7)).Credit, 7)
	expect(t, "credit of 3 replicas", sync1(t, st, "a", it).Credit, 33)
}

func testHitsCharged(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	r0 := sync1(t, st, "a", item("k", ws, 0))
	it := item("k", ws, 0)
	it.Hits = []limiter.Hit{{At: r0.Now, N: 3}}
	r := sync1(t, st, "a", it)
	expect(t, "usage", r.Windows[0].Cur, 3)
	expect(t, "credit", r.Credit, 0)
	expect(t, "b's credit", sync1(t, st, "b", item("k", ws, 100)).Credit, 7)
	// Past the limit: recorded as debt, and no credit.
	it.Hits = []limiter.Hit{{At: r.Now, N: 20}}
	it.Want = 5
	r = sync1(t, st, "a", it)
	expect(t, "usage past the limit", r.Windows[0].Cur, 23)
	expect(t, "credit in debt", r.Credit, 0)
}

func testRefund(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	r0 := sync1(t, st, "a", item("k", ws, 0))
	it := item("k", ws, 0)
	it.Hits = []limiter.Hit{{At: r0.Now, N: 5}, {At: r0.Now, N: -2}}
	expect(t, "usage after a refund", sync1(t, st, "a", it).Windows[0].Cur, 3)
	it.Hits = []limiter.Hit{{At: r0.Now, N: -10}}
	expect(t, "usage after a large refund", sync1(t, st, "a", it).Windows[0].Cur, 0)
}

// testLateHits: hits are charged to the window they were admitted in;
// older ones are dropped and future ones count as now.
func testLateHits(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	per := int64(time.Hour / time.Microsecond)
	for attempt := 0; ; attempt++ {
		r0 := sync1(t, st, "a", item(fmt.Sprint("k", attempt), ws, 0))
		e := r0.Windows[0].Epoch
		it := item(fmt.Sprint("k", attempt), ws, 0)
		it.Hits = []limiter.Hit{
			{At: (e-1)*per + 1, N: 4}, // previous window
			{At: (e - 1) * per, N: 1}, // its first instant
			{At: (e-2)*per + 5, N: 7}, // older: dropped
			{At: e * per, N: 2},       // this window
			{At: r0.Now + per, N: 1},  // ahead of the store: now
		}
		r := sync1(t, st, "a", it)
		if r.Windows[0].Epoch != e && attempt < 3 { // crossed the hour
			continue
		}
		expect(t, "previous window", r.Windows[0].Prev, 5)
		expect(t, "current window", r.Windows[0].Cur, 3)
		return
	}
}

// testLateHitsSliding: a late hit weighs on the sliding window by the
// part of the previous window still inside it, rounded up.
func testLateHitsSliding(t *testing.T, st limiter.Store) {
	ws := []limiter.Window{{Limit: 1000, Period: time.Hour}}
	per := int64(time.Hour / time.Microsecond)
	r0 := sync1(t, st, "a", item("k", ws, 0))
	it := item("k", ws, 1000)
	it.Algorithm = limiter.SlidingWindow
	it.Hits = []limiter.Hit{{At: (r0.Windows[0].Epoch - 1) * per, N: 600}}
	r := sync1(t, st, "a", it)
	w := r.Windows[0]
	if w.Prev != 600 {
		t.Fatalf("previous window = %d, want 600", w.Prev)
	}
	left := per - (r.Now - w.Epoch*per)
	weighted := (600*left + per - 1) / per
	expect(t, "credit", r.Credit, uint64(1000-weighted))
}

func testKeptCredit(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	expect(t, "grant", sync1(t, st, "a", item("k", ws, 4)).Credit, 4)
	it := item("k", ws, 0)
	it.Unused = 4
	expect(t, "kept", sync1(t, st, "a", it).Credit, 4)
	it.Unused = 2
	expect(t, "kept, the rest handed back", sync1(t, st, "a", it).Credit, 2)
	b := sync1(t, st, "b", item("k", ws, 100))
	expect(t, "b's credit", b.Credit, 8)
	expect(t, "b's others", b.Others, 2)
	// Unused credit not backed by a reservation is not kept.
	it.Key, it.Unused = "k2", 5
	expect(t, "unbacked credit", sync1(t, st, "a", it).Credit, 0)
}

func testReservationExpiry(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	it := item("k", ws, 10)
	it.Lease = 150 * time.Millisecond
	expect(t, "a's credit", sync1(t, st, "a", it).Credit, 10)
	expect(t, "b's credit while a's lease runs", sync1(t, st, "b", item("k", ws, 10)).Credit, 0)
	// b reserved nothing; a's lease lapses.
	time.Sleep(300 * time.Millisecond)
	b := sync1(t, st, "b", item("k", ws, 10))
	expect(t, "b's credit after a's lease", b.Credit, 10)
	expect(t, "b's others after a's lease", b.Others, 0)
	it.Unused, it.Want = 10, 0
	expect(t, "a's credit after its lease", sync1(t, st, "a", it).Credit, 0)
}

func testRelease(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	expect(t, "a's credit", sync1(t, st, "a", item("k", ws, 5)).Credit, 5)
	if err := st.Release(context.Background(), "a", []string{"k", "unknown"}, nil); err != nil {
		t.Fatal(err)
	}
	b := sync1(t, st, "b", item("k", ws, 100))
	expect(t, "b's credit after a's release", b.Credit, 10)
	expect(t, "b's others after a's release", b.Others, 0)
}

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

	short := item("p", []limiter.Window{{Limit: 6, Period: 200 * time.Millisecond}}, 1)
	short.Algorithm, short.Replicas, short.Denied = limiter.SlidingWindow, 4, 1
	expect(t, "credit of the denying replica", sync1(t, st, "a", short).Credit, 1) // ⌊6/4⌋
	short.Denied = 0
	expect(t, "split while pressed", sync1(t, st, "b", short).Credit, 1)
	expect(t, "split while pressed", sync1(t, st, "c", short).Credit, 1)
	expect(t, "no dry unit while pressed", sync1(t, st, "d", short).Credit, 0)
	time.Sleep(250 * time.Millisecond) // one period: the reservations outlive it
	r := sync1(t, st, "d", short)
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
// live, the store forgets it; until then it keeps it.
func testRecordExpiry(t *testing.T, st limiter.Store) {
	per := int64(time.Second / time.Microsecond)
	run := func(key string, a limiter.Algorithm) (before, after limiter.SyncResult) {
		it := item(key, fixed(10, time.Second), 0)
		it.Algorithm = a
		it.Lease = 0
		r0 := sync1(t, st, "a", it)
		if r0.Now%per > per*8/10 { // too close to the boundary: start in the next window
			time.Sleep(time.Duration(per-r0.Now%per+20_000) * time.Microsecond)
			r0 = sync1(t, st, "a", it)
		}
		it.Hits = []limiter.Hit{{At: r0.Now, N: 3}}
		before = sync1(t, st, "a", it)
		time.Sleep(time.Duration((before.Windows[0].Epoch+1)*per-before.Now+50_000) * time.Microsecond)
		it.Hits = nil
		return before, sync1(t, st, "a", it)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var fb, fa, sb, sa limiter.SyncResult
	go func() { defer wg.Done(); fb, fa = run("fixed", limiter.FixedWindow) }()
	go func() { defer wg.Done(); sb, sa = run("sliding", limiter.SlidingWindow) }()
	wg.Wait()
	if t.Failed() {
		return
	}
	if fa.Windows[0].Epoch == fb.Windows[0].Epoch+1 {
		// A fixed window is fresh in the next window: forgotten, so its
		// count does not roll into Prev.
		expect(t, "fixed window's previous count after expiry", fa.Windows[0].Prev, 0)
	}
	if sa.Windows[0].Epoch == sb.Windows[0].Epoch+1 {
		// A sliding window still weighs the previous one: kept.
		expect(t, "sliding window's previous count", sa.Windows[0].Prev, 3)
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

func testSlots(t *testing.T, st limiter.Store) {
	it := func(held, want uint64) limiter.SlotItem {
		return limiter.SlotItem{Key: "k", Max: 3, Held: held, Want: want, Lease: time.Minute}
	}
	a := slots1(t, st, "a", it(2, 0))
	expect(t, "a's slots", a.Granted, 2)
	expect(t, "a's others", a.Others, 0)
	if a.Now <= 0 {
		t.Fatalf("Now = %d", a.Now)
	}
	b := slots1(t, st, "b", it(0, 5))
	expect(t, "b's slots up to the cap", b.Granted, 1)
	expect(t, "b's others", b.Others, 2)
	c := slots1(t, st, "c", it(1, 0))
	expect(t, "c's held slot, over the cap", c.Granted, 1)
	expect(t, "c's others", c.Others, 3)
	expect(t, "a's slots when it holds none", slots1(t, st, "a", it(0, 0)).Granted, 0)
	b = slots1(t, st, "b", it(1, 5))
	expect(t, "b's slots after a left", b.Granted, 2)
	expect(t, "b's others after a left", b.Others, 1)
}

func testSlotExpiryAndRelease(t *testing.T, st limiter.Store) {
	a := limiter.SlotItem{Key: "k", Max: 3, Held: 3, Lease: 150 * time.Millisecond}
	expect(t, "a's slots", slots1(t, st, "a", a).Granted, 3)
	b := limiter.SlotItem{Key: "k", Max: 3, Want: 3, Lease: time.Minute}
	expect(t, "b's slots while a's lease runs", slots1(t, st, "b", b).Granted, 0)
	time.Sleep(300 * time.Millisecond)
	expect(t, "b's slots after a's lease", slots1(t, st, "b", b).Granted, 3)
	if err := st.Release(context.Background(), "b", nil, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	a.Lease = time.Minute
	r := slots1(t, st, "a", a)
	expect(t, "a's slots after b's release", r.Granted, 3)
	expect(t, "a's others after b's release", r.Others, 0)
}

func testHeartbeat(t *testing.T, st limiter.Store) {
	expect(t, "replicas", heartbeat(t, st, "a", time.Minute).Replicas, 1)
	expect(t, "replicas", heartbeat(t, st, "b", time.Minute).Replicas, 2)
	expect(t, "replicas", heartbeat(t, st, "c", 150*time.Millisecond).Replicas, 3)
	expect(t, "replicas again", heartbeat(t, st, "a", time.Minute).Replicas, 3)
	time.Sleep(300 * time.Millisecond)
	expect(t, "replicas after c's lease", heartbeat(t, st, "a", time.Minute).Replicas, 2)
	if err := st.Leave(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	expect(t, "replicas after b left", heartbeat(t, st, "a", time.Minute).Replicas, 1)
	if err := st.Leave(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, "replicas when none is live", heartbeat(t, st, "d", 0).Replicas, 1)
}

// testConcurrentReplicas: replicas that push only hits their credit
// covered never see usage + reservations above the limit, and together
// admit at most the limit.
func testConcurrentReplicas(t *testing.T, st limiter.Store) {
	const limit, replicas, rounds = 100, 4, 40
	ws := fixed(limit, time.Hour)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted = map[int64]uint64{} // per epoch
	)
	for r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replica := fmt.Sprint("r", r)
			var credit uint64
			var now int64
			for i := range rounds {
				it := item("k", ws, uint64(1+(i*7+r)%30))
				it.Replicas = replicas
				spend := credit * uint64(i%3) / 2 // spend none, half or all
				if spend > 0 {
					it.Hits = []limiter.Hit{{At: now, N: int64(spend)}}
				}
				it.Unused = credit - spend
				out := make([]limiter.SyncResult, 1)
				if err := st.Sync(context.Background(), replica, []limiter.SyncItem{it}, out); err != nil {
					t.Error(err)
					return
				}
				res := out[0]
				w := res.Windows[0]
				mu.Lock()
				admitted[now/int64(time.Hour/time.Microsecond)] += spend
				mu.Unlock()
				if w.Cur+res.Credit+res.Others > limit {
					t.Errorf("%s round %d: usage %d + credit %d + others %d > %d", replica, i, w.Cur, res.Credit, res.Others, limit)
					return
				}
				credit, now = res.Credit, res.Now
			}
		}()
	}
	wg.Wait()
	for e, n := range admitted {
		if n > limit {
			t.Errorf("window %d admitted %d > %d", e, n, limit)
		}
	}
}

func testCanceledContext(t *testing.T, st limiter.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(ctx, "a", []limiter.SyncItem{item("k", fixed(10, time.Hour), 1)}, out); err == nil {
		t.Error("Sync with a canceled context: no error")
	}
	sout := make([]limiter.SlotResult, 1)
	if err := st.SyncSlots(ctx, "a", []limiter.SlotItem{{Key: "k", Max: 1}}, sout); err == nil {
		t.Error("SyncSlots with a canceled context: no error")
	}
	if _, err := st.Heartbeat(ctx, "a", time.Second); err == nil {
		t.Error("Heartbeat with a canceled context: no error")
	}
}
