package limitertest

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// StoreSuite is the conformance suite of limiter.Store: every
// implementation runs it, on real time or in a bubble. On real time, as a
// Redis store's clock (Redis TIME) cannot be faked, it reads instants from
// the replies and sleeps until the instants it needs have passed: leases
// and windows of a few hundred milliseconds. Its subtests run in
// parallel. newStore returns an empty store, or one that shares no keys
// or replicas with the other calls' stores (a Redis store with its own
// service name).
func StoreSuite(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	storeSuite(t, newStore, false)
}

// StoreSuiteInBubble runs the suite with each case in a testing/synctest
// bubble, for stores that read the time package's clock and timers (a
// memstore.Store with the real clock): time is virtual there, so the
// suite's waits take no real time and every instant is exact. newStore is
// called inside the bubble.
func StoreSuiteInBubble(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	storeSuite(t, newStore, true)
}

func storeSuite(t *testing.T, newStore func(t *testing.T) limiter.Store, bubble bool) {
	for _, tt := range suiteCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !bubble {
				tt.run(t, newStore(t))
				return
			}
			synctest.Test(t, func(t *testing.T) { tt.run(t, newStore(t)) })
		})
	}
}

var suiteCases = []struct {
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
	{"LateRefund", testLateRefund},
	{"Probe", testProbe},
	{"LateHits", testLateHits},
	{"LateHitsSliding", testLateHitsSliding},
	{"KeptCredit", testKeptCredit},
	{"ReservationExpiry", testReservationExpiry},
	{"Hold", testHold},
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
	{"SharesUnreported", testSharesUnreported},
	{"WaitersFirst", testWaitersFirst},
	{"ShareHits", testShareHits},
	{"ShareRelease", testShareRelease},
	{"ShareEpochs", testShareEpochs},
	{"Members", testMembers},
	{"GoneShares", testGoneShares},
	{"FoundingShares", testFoundingShares},
	{"ShareLoans", testShareLoans},
	{"ShareShrink", testShareShrink},
	{"DeclaredShrink", testDeclaredShrink},
	{"SlidingShares", testSlidingShares},
	{"SlidingShareShrink", testSlidingShareShrink},
	{"SlidingReleasePrev", testSlidingReleasePrev},
	{"BucketShares", testBucketShares},
	{"Declare", testDeclare},
	{"Contention", testContention},
	{"WaitContention", testWaitContention},
}

// sleepPast sleeps until the store's clock, read as from (µs), is past
// the instant to: on real time the store's clock and the sleep's are the
// same machine's, and in a bubble both are the bubble's.
func sleepPast(from, to int64) {
	time.Sleep(time.Duration(to-from)*time.Microsecond + time.Millisecond)
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

// testProbe: a probe is charged at the store's instant as far as it fits
// beside the others' reservations, and a probe that does not fit leaves
// them whole: b may be spending its reservation while its round flies.
func testProbe(t *testing.T, st limiter.Store) {
	ws := fixed(10, time.Hour)
	expect(t, "b's credit", sync1(t, st, "b", item("k", ws, 6)).Credit, 6)
	it := item("k", ws, 0)
	it.Hits = []limiter.Hit{{At: sync1(t, st, "a", item("k", ws, 0)).Now, N: 3}}
	it.Probe = 3
	r := sync1(t, st, "a", it)
	expect(t, "probe charged beside b's reservation", r.Probed, 1)
	expect(t, "usage", r.Windows[0].Cur, 4)
	expect(t, "a's credit", r.Credit, 0)
	it = item("k", ws, 0)
	it.Probe = 2
	r = sync1(t, st, "a", it)
	expect(t, "probe with no room", r.Probed, 0)
	expect(t, "usage after it", r.Windows[0].Cur, 4)
	it = item("k", ws, 0)
	it.Unused = 6
	expect(t, "b's credit kept", sync1(t, st, "b", it).Credit, 6)
}

// testLateRefund: a refund frees units of the window it was stamped in,
// not of the one current when the store applies it: a round that crossed
// a boundary must not free units that admits of the new window hold.
func testLateRefund(t *testing.T, st limiter.Store) {
	r := syncInEpoch(t, st, func(e, per, now int64) []limiter.Hit {
		return []limiter.Hit{
			{At: (e-1)*per + 1, N: 4},  // previous window
			{At: e * per, N: 3},        // this window
			{At: (e-1)*per + 2, N: -1}, // a refund stamped in the previous one
			{At: (e-2)*per + 5, N: -2}, // older: frees nothing
			{At: now + per, N: -1},     // ahead of the store: now
		}
	})
	expect(t, "previous window", r.Windows[0].Prev, 3)
	expect(t, "current window", r.Windows[0].Cur, 2)
}

// testLateHits: hits are charged to the window they were admitted in;
// older ones are dropped and future ones count as now.
func testLateHits(t *testing.T, st limiter.Store) {
	r := syncInEpoch(t, st, func(e, per, now int64) []limiter.Hit {
		return []limiter.Hit{
			{At: (e-1)*per + 1, N: 4}, // previous window
			{At: (e - 1) * per, N: 1}, // its first instant
			{At: (e-2)*per + 5, N: 7}, // older: dropped
			{At: e * per, N: 2},       // this window
			{At: now + per, N: 1},     // ahead of the store: now
		}
	})
	expect(t, "previous window", r.Windows[0].Prev, 5)
	expect(t, "current window", r.Windows[0].Cur, 3)
}

// syncInEpoch syncs a fresh key of a fixed window of 10 an hour once,
// then with the hits hits makes from its epoch e, the period per and the
// store's instant now (µs), and returns the reply; it tries a fresh key
// again, up to three times, should the hour turn between the two syncs.
func syncInEpoch(t *testing.T, st limiter.Store, hits func(e, per, now int64) []limiter.Hit) limiter.SyncResult {
	t.Helper()
	ws := fixed(10, time.Hour)
	per := int64(time.Hour / time.Microsecond)
	for attempt := 0; ; attempt++ {
		k := fmt.Sprint("k", attempt)
		r0 := sync1(t, st, "a", item(k, ws, 0))
		it := item(k, ws, 0)
		it.Hits = hits(r0.Windows[0].Epoch, per, r0.Now)
		r := sync1(t, st, "a", it)
		if r.Windows[0].Epoch == r0.Windows[0].Epoch || attempt == 3 {
			return r
		}
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
	a := sync1(t, st, "a", it)
	expect(t, "a's credit", a.Credit, 10)
	b := sync1(t, st, "b", item("k", ws, 10))
	expect(t, "b's credit while a's lease runs", b.Credit, 0)
	// b reserved nothing; a's lease lapses.
	sleepPast(b.Now, a.Now+int64(it.Lease/time.Microsecond))
	b = sync1(t, st, "b", item("k", ws, 10))
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
