package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestTablePromotesAndSweeps follows keys from the dirty map into the
// lock-free read map and out again when swept.
func TestTablePromotesAndSweeps(t *testing.T) {
	tb := newTable()
	rule := &Rule{Windows: []Window{{Limit: 1, Period: 1}}}
	const n = 5000
	key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
	for i := range n {
		e := tb.lock(key(i), rule, i%2 == 0)
		e.fresh.Store(int64(i))
		e.mu.Unlock()
	}
	for range promoteMin + 1 { // lookups of dirty keys merge them into the read map
		for i := range n {
			if e := tb.get(key(i)); e == nil || e.key != string(key(i)) {
				t.Fatalf("key %d: got %v", i, e)
			}
		}
	}
	inRead := 0
	for i := range tb.shards {
		inRead += len(*tb.shards[i].read.Load())
	}
	if inRead != n {
		t.Fatalf("%d of %d keys in the read maps after repeated lookups", inRead, n)
	}
	if got := tb.sweep(n / 2); got != n/2+1 || tb.size.Load() != int64(n-got) {
		t.Fatalf("sweep removed %d, size %d", got, tb.size.Load())
	}
	for i := range n {
		if e := tb.get(key(i)); (e != nil) != (i > n/2) {
			t.Fatalf("key %d after sweep: present %v", i, e != nil)
		}
	}
}

// TestTableHashClash keeps two keys of one hash apart: the second stays
// in the dirty map when the first is published.
func TestTableHashClash(t *testing.T) {
	tb := newTable()
	s := &tb.shards[7]
	a := tb.insert(s, 7, []byte("a"), 1)
	b := tb.insert(s, 7, []byte("b"), 1)
	for range promoteMin + 1 {
		if s.lookup(7, []byte("a")) != a || s.lookup(7, []byte("b")) != b {
			t.Fatal("a clashing key found the other's entry")
		}
	}
	if len(*s.read.Load()) != 1 || len(s.dirty) != 1 {
		t.Fatalf("read %d, dirty %d: want one key in each", len(*s.read.Load()), len(s.dirty))
	}
	if s.lookup(7, []byte("c")) != nil {
		t.Fatal("a missing key of a known hash was found")
	}
}

// TestViewSummaryMatchesDescription checks the summed-up description of
// fixed windows against the general one, window by window, at random
// instants, views and pending units, reusing summaries as the hot path
// does.
func TestViewSummaryMatchesDescription(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := New(WithStore(nopStore{}, "r"))
	for range 3000 {
		rule := &Rule{Algorithm: FixedWindow}
		for range 1 + rng.IntN(3) {
			rule.Windows = append(rule.Windows, Window{Limit: 1 + rng.Uint64N(100),
				Period: time.Duration(1+rng.Int64N(5000)) * time.Microsecond})
		}
		cs := &creditState{creditLocked: creditLocked{rule: rule, ws: storeWindows(rule.Windows)}}
		snow := 1e6 + rng.Int64N(1e6)
		v := &storeView{others: rng.Uint64N(20)}
		for _, w := range cs.ws {
			p := int64(w.Period)
			v.windows = append(v.windows, WindowState{Epoch: snow/p - rng.Int64N(3), Cur: rng.Uint64N(120)})
		}
		cs.view.Store(v)
		cs.hits.Store(rng.Int64N(30) - 5)
		for range 20 {
			snow += rng.Int64N(2000)
			if rng.IntN(4) == 0 { // a sync publishes a new view, as apply does
				nv := &storeView{others: rng.Uint64N(20), windows: slices.Clone(v.windows)}
				for i := range nv.windows {
					nv.windows[i].Cur += rng.Uint64N(10)
				}
				v = nv
				cs.view.Store(v)
			}
			pending := uint64(max(cs.hits.Load(), 0)) + v.others
			ok := rng.IntN(4) > 0
			got := Result{Limit: 7, Remaining: 7, Reset: 7, RetryAfter: 7, Mode: ModeSync} // a reused slot
			l.eng.viewResult(&got, cs, snow*1000, ok, 0)
			want := Result{Allowed: ok}
			if cs.describe(&want, v, snow, pending); !ok {
				deny(&want, 0)
			}
			if got != want {
				t.Fatalf("windows %v, view %+v, pending %d at %d: %+v, want %+v", cs.ws, v.windows, pending, snow, got, want)
			}
		}
	}
}

// TestSweptCreditStateHandsOver: a decision that still holds a key's
// credit state when the sweep removes it (idle, holding nothing) moves to
// the key's new state instead of waiting on one no round will sync.
func TestSweptCreditStateHandsOver(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	rule := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	key := []byte("k")
	now := l.now()
	old := l.eng.creditFor(key, rule, now)
	l.keys.get(key).fresh.Store(now)
	if n := l.keys.sweep(now); n != 1 || !old.orphan.Load() {
		t.Fatalf("sweep removed %d, orphan %v", n, old.orphan.Load())
	}
	var res Result
	l.eng.creditDecide(&res, old, &Request{Key: key, Rule: rule}, 1, now, false)
	fresh := l.keys.get(key)
	if fresh == nil || fresh.cs.Load() == old {
		t.Fatal("the key has no new state after the sweep")
	}
	// No round answers here: the request waited on the new state and
	// was denied there.
	if old.denied.Load() != 0 || old.hits.Load() != 0 || len(old.waiters) != 0 {
		t.Fatalf("decided on the swept state: %+v, its hits %d, denials %d", res, old.hits.Load(), old.denied.Load())
	}
	if got := fresh.cs.Load().denied.Load(); got != 1 {
		t.Fatalf("the new state counts %d denials, want the request's 1", got)
	}
}

// TestSweepKeepsActiveShareKey: a key with a static share that the sync
// loop holds (active) stays through a sweep however long ago it was
// created; swept in the middle of an epoch, it came back with that
// epoch's share whole and its replica admitted the share twice (a window
// 11 of 10 against a real Redis, one run in eight). Once it leaves the
// active keys it is kept for two periods from its last use.
func TestSweepKeepsActiveShareKey(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	rule := &Rule{Windows: []Window{{Limit: 10, Period: time.Second}}}
	key := []byte("k")
	now := l.now()
	cs := l.eng.creditFor(key, rule, now)
	if cs.share == nil {
		t.Fatal("no static share for a fixed window")
	}
	l.eng.activate(cs)
	later := now + 5*int64(time.Second)
	cs.lastUse.Store(later)
	if n := l.keys.sweep(later); n != 0 || cs.orphan.Load() {
		t.Fatalf("an active share key in use: sweep removed %d, orphan %v", n, cs.orphan.Load())
	}
	l.eng.deactivate(cs)
	l.keys.get(key).fresh.Store(later)
	if n := l.keys.sweep(later + int64(time.Second)); n != 0 {
		t.Fatalf("a share key used a period ago: sweep removed %d", n)
	}
	if n := l.keys.sweep(later + 2*int64(time.Second)); n != 1 || !cs.orphan.Load() {
		t.Fatalf("a share key unused for two periods: sweep removed %d, orphan %v", n, cs.orphan.Load())
	}
}

// nopStore grants nothing and fails nothing: a store for tests that never
// run a sync round.
type nopStore struct{}

func (nopStore) Sync(context.Context, string, []SyncItem, []SyncResult) error      { return nil }
func (nopStore) SyncSlots(context.Context, string, []SlotItem, []SlotResult) error { return nil }
func (nopStore) Heartbeat(context.Context, string, time.Duration) (Membership, error) {
	return Membership{}, nil
}
func (nopStore) Release(context.Context, string, []string, []string) error { return nil }
func (nopStore) Leave(context.Context, string) error                       { return nil }
func (nopStore) Declare(context.Context, string, Declaration) error        { return nil }
func (nopStore) Contention(_ context.Context, _, c string) ([]Contended, string, error) {
	return nil, c, nil
}

// TestIdleHandBackWithdrawsCredit: a key idle for a quiet interval hands
// its reservation back to the store. Its credit leaves the hot path
// before the round goes out: a request arriving while the round is in
// flight must not be admitted on units the store no longer backs.
func TestIdleHandBackWithdrawsCredit(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	rule := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 100, Period: time.Minute}}}
	now := int64(time.Hour)
	cs := l.eng.newCredit("k", rule, now)
	cs.credit.Store(5)
	cs.grant.Store(5)
	cs.backedTo.Store(now + int64(lease))
	cs.lastUse.Store(now - int64(2*quietInterval))
	it := l.eng.prepare(cs, now)
	if it.Unused != 0 || it.Want != 0 {
		t.Fatalf("idle key sent Unused %d, Want %d; want both 0", it.Unused, it.Want)
	}
	if l.eng.spend(cs, 1, now+1) {
		t.Fatal("a request in flight spent credit the round hands back")
	}
	l.eng.apply(cs, &SyncResult{Windows: make([]WindowState, 1), Now: now / 1000})
	if c := cs.credit.Load(); c != 0 {
		t.Fatalf("credit after the reply is %d, want 0", c)
	}
}

// TestTakeNeverShowsCreditItDoesNotHold: spends racing the sync loop's
// hand-back see and leave only values the key holds, so the hand-back
// never gives up units a spend then puts back.
func TestTakeNeverShowsCreditItDoesNotHold(t *testing.T) {
	cs := &creditState{}
	cs.credit.Store(3)
	if _, ok := cs.take(2, 2); ok {
		t.Fatal("take went below its floor")
	}
	if c := cs.credit.Load(); c != 3 {
		t.Fatalf("a refused take left credit %d, want 3", c)
	}
	if left, ok := cs.take(2, 1); !ok || left != 1 || cs.credit.Load() != 1 {
		t.Fatalf("take(2, 1) of 3: left %d, ok %v, credit %d", left, ok, cs.credit.Load())
	}
}

// TestShareAdmitsAcrossBoundary: within the clock's uncertainty of a
// boundary a share admit counts in the shares of both epochs, pushed as
// a hit in each, and is refused once either share is spent.
func TestShareAdmitsAcrossBoundary(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	hour := int64(time.Hour / time.Microsecond)
	b := 1000 * hour // a boundary, store µs (offset 0: local ns = µs·1000)
	l.eng.joined.Store(1)
	two := Membership{Members: []Member{{Joined: 1, Expires: 2 * b}, {Joined: 1, Expires: 2 * b}}}
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Hour}}}
	cs := l.eng.newCredit("k", rule, 0)
	l.eng.clockErr.Store(int64(20 * time.Millisecond))
	before := (b - 5000) * 1000 // 5 ms before the boundary, local ns
	l.eng.members.Store(&memberView{m: two, at: before})
	for i := range 5 { // S = 5 in each epoch
		if ok, _ := l.eng.spendShare(cs, 1, before, false); !ok {
			t.Fatalf("admit %d of 5 at the boundary refused", i+1)
		}
	}
	if ok, _ := l.eng.spendShare(cs, 1, before, false); ok {
		t.Fatal("a sixth unit admitted: the share is 5")
	}
	var old, next int64
	for _, h := range cs.share.pending {
		switch h.At / hour {
		case b/hour - 1:
			old += h.N
		case b / hour:
			next += h.N
		}
	}
	if old != 5 || next != 5 {
		t.Fatalf("pushed %d hits in the epoch that ends and %d in the next; want 5 and 5", old, next)
	}
	after := (b + hour/2) * 1000 // mid-epoch: the next epoch's share holds 5 less
	l.eng.members.Store(&memberView{m: two, at: after})
	if ok, _ := l.eng.spendShare(cs, 1, after, false); ok {
		t.Fatal("the next epoch's share admitted past the units charged to it ahead")
	}
}

// TestRunReturnsASpikesMemory: a sweep that evicts a spike of keys (at
// least spikeKeys, and at least as many as it leaves) hands their memory
// back to the system at once; a smaller sweep does not.
func TestRunReturnsASpikesMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var freed atomic.Int32
		old := freeMemory
		freeMemory = func() { freed.Add(1) }
		defer func() { freeMemory = old }()
		l := New()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()
		rule := &Rule{Windows: []Window{{Limit: 10, Period: time.Second}}}
		out := make([]Result, 1)
		fill := func(n int, prefix string) {
			for i := range n {
				l.Decide([]Request{{Key: fmt.Appendf(nil, "%s%d", prefix, i), Rule: rule}}, out)
			}
		}
		fill(spikeKeys/2, "small")
		time.Sleep(11 * time.Second) // one sweep
		synctest.Wait()
		if n := freed.Load(); n != 0 || l.Keys() != 0 {
			t.Fatalf("a sweep of %d keys returned memory %d times; %d keys left", spikeKeys/2, n, l.Keys())
		}
		fill(spikeKeys, "spike")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := freed.Load(); n != 1 {
			t.Errorf("a sweep of %d keys returned memory %d times, want once", spikeKeys, n)
		}
		cancel()
		<-done
	})
}

// TestContentionReleasesItsEpoch: a key published contended is released
// from the share of the epoch it was published in (Contended.At); one
// published just before a boundary and read after it keeps the new
// epoch's share, which its waiter does not need and this replica's own
// requests of the new window would otherwise have to ask the store for.
func TestContentionReleasesItsEpoch(t *testing.T) {
	const sec = int64(time.Second / time.Microsecond)
	for _, tt := range []struct {
		name    string
		at      int64 // publication instant, µs before now
		release bool
	}{
		{"published in this epoch", 100_000, true},
		{"published in the last epoch", 600_000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := New(WithStore(nopStore{}, "r"))
			snow := 1_000_000*sec + sec/2 // mid-epoch, store µs (offset 0)
			now := snow * 1000
			l.eng.joined.Store(1)
			two := Membership{Members: []Member{{Joined: 1, Expires: 2 * snow}, {Joined: 1, Expires: 2 * snow}}}
			l.eng.members.Store(&memberView{m: two, at: now})
			rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
			cs := l.eng.creditFor([]byte("k"), rule, now)
			if cs.share == nil {
				t.Fatal("no static share")
			}
			l.eng.contendAll([]Contended{{Key: "k", Windows: rule.Windows, Replica: "other", At: snow - tt.at}})
			if items := l.eng.releases(now); len(items) != 0 {
				t.Fatalf("release items for a key this replica holds: %+v", items)
			}
			if got := cs.share.has(flagRelease); got != tt.release {
				t.Fatalf("share release asked: %v, want %v", got, tt.release)
			}
		})
	}
}

// TestBoundaryHitsSetAside: hits admitted from credit just before a
// second ends are pushed stamped in that second by a round that comes
// only after it (as while a slow one is in flight), not in the next
// second, which would count them against it.
func TestBoundaryHitsSetAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 100, Period: time.Second}}}
		cs := l.eng.creditFor([]byte("k"), rule, l.now())
		boundary := time.Now().Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(boundary.Add(-100 * time.Millisecond)))
		cs.addHits(3, l.eng.hitSec(l.now()))
		time.Sleep(200 * time.Millisecond)
		cs.mu.Lock()
		late := cs.takeHits(l.eng.storeNow(l.now()))
		cs.mu.Unlock()
		b := l.eng.storeNow(boundary.UnixNano())
		if len(late) != 1 || late[0].N != 3 || late[0].At >= b || late[0].At < b-int64(boundaryLead/time.Microsecond) {
			t.Fatalf("after the boundary at %d: pushed %+v; want 3 stamped within %v before it", b, late, boundaryLead)
		}
	})
}

// TestWeightedPrevWindowAhead: a sliding window's state whose window
// begins after now (a store clock that went back, a floor from a clock
// ahead) counts all of its previous window, and a huge count saturates
// rather than overflow (the reference store panicked in bits.Div64).
func TestWeightedPrevWindowAhead(t *testing.T) {
	w := Window{Limit: 10, Period: 1000}
	for _, tt := range []struct {
		name string
		c    WindowState
		want uint64
	}{
		{"half of prev inside", WindowState{Epoch: 5, Prev: 4}, 8},
		{"window ahead: all of prev", WindowState{Epoch: 7, Prev: 4}, 6},
		{"window ahead, huge prev", WindowState{Epoch: 7, Prev: 1 << 50}, 0},
	} {
		if got := tt.c.Remaining(w, SlidingWindow, 5_500); got != tt.want {
			t.Errorf("%s: remaining %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestWindowsOfShared: the keys of one rule share its windows in the
// store's unit; another rule, equal or not, gets its own; the cache is
// cleared at its bound rather than grow with every reload's rules.
func TestWindowsOfShared(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	e := l.eng
	a := &Rule{Windows: []Window{{Limit: 5, Period: time.Minute}}}
	b := &Rule{Windows: []Window{{Limit: 5, Period: time.Minute}}}
	wa, wb := e.windowsOf(a), e.windowsOf(b)
	if wa[0].Period != time.Minute/time.Microsecond || len(wa) != 1 {
		t.Fatalf("windows of a = %v, want the minute in µs", wa)
	}
	if &e.windowsOf(a)[0] != &wa[0] {
		t.Error("a's second key got a new slice")
	}
	if &wb[0] == &wa[0] {
		t.Error("two rules share one slice")
	}
	for range maxRuleWindows {
		e.windowsOf(&Rule{Windows: []Window{{Limit: 1, Period: time.Second}}})
	}
	if n := e.windowsN.Load(); n > maxRuleWindows {
		t.Errorf("cache holds %d rules, bound %d", n, maxRuleWindows)
	}
	if w := e.windowsOf(a); w[0].Period != time.Minute/time.Microsecond {
		t.Errorf("a after the clear: %v", w)
	}
}

// TestIdleKeyLeavesScans: a key that synced and holds nothing leaves the
// sync loop's scans once it has been idle a quiet interval, not two of
// its periods later, and stays evictable two periods after its last use;
// a key used within the quiet interval that its last round gave credit
// stays, a quiet one its last round gave none (a probe) leaves at once
// unless its window ends before it would go idle, and one back in a
// round is not swept while it is.
func TestIdleKeyLeavesScans(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	e := l.eng
	rule := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 100, Period: time.Minute}}}
	perSecond := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	// The scan runs half a second past the middle of a minute: a minute
	// ends in 29.5 s, a second in 0.5 s.
	now := e.now()
	minute := int64(time.Minute / time.Microsecond)
	snow := e.storeNow(now)
	now += (snow/minute*minute + minute/2 + minute/120 - snow) * int64(time.Microsecond)
	snow = e.storeNow(now)
	start := func(key string, rule *Rule, idle time.Duration, grant int64) *creditState {
		cs := e.creditFor([]byte(key), rule, now-int64(idle))
		cs.mu.Lock()
		cs.credit.Store(0)
		cs.grant.Store(grant)
		cs.kicked.Store(false)
		cs.view.Store(&storeView{windows: []WindowState{{Epoch: snow / int64(rule.Windows[0].Period/time.Microsecond)}}})
		cs.lastUse.Store(now - int64(idle))
		cs.mu.Unlock()
		e.activate(cs)
		return cs
	}
	idle := start("idle", rule, 2*quietInterval, 4)
	recent := start("recent", rule, quietInterval/10, 4)
	probed := start("probed", rule, quietInterval/10, 0)
	probedSecond := start("probed-second", perSecond, quietInterval/10, 0)
	e.scanDue(now)
	if !probedSecond.active.Load() {
		t.Error("a probed key whose window ends before it would go idle left the scans")
	}
	if idle.active.Load() {
		t.Error("a key idle for two quiet intervals, holding nothing, is still scanned")
	}
	if want := idle.lastUse.Load() + 2*int64(time.Minute); idle.ent.fresh.Load() != want {
		t.Errorf("idle key evictable from %d, want %d (two periods after its last use)", idle.ent.fresh.Load(), want)
	}
	if !recent.active.Load() {
		t.Error("a key used within the quiet interval, given credit by its last round, left the scans")
	}
	if probed.active.Load() {
		t.Error("a quiet key its last round gave no credit is still scanned")
	}
	if want := probed.lastUse.Load() + 2*int64(time.Minute); probed.ent.fresh.Load() != want {
		t.Errorf("probed key evictable from %d, want %d (two periods after its last use)", probed.ent.fresh.Load(), want)
	}
	e.activate(idle) // its next request asked for a round
	if n := l.keys.sweep(idle.ent.fresh.Load() + 1); n != 0 {
		t.Errorf("sweep removed %d keys, one of them back in the scans", n)
	}
}

// TestShareAfterStaleRegistry: a key first asked for while this
// replica's copy of the registry is too old to count the sharers from
// (its heartbeats failed for over lease − heartbeatEvery) admits nothing
// from its share then, and from its share once a heartbeat brings a
// fresh copy, in the same epoch: the store counted the share as this
// replica's all along. It used to give the share up until the epoch
// ended.
func TestShareAfterStaleRegistry(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	hour := int64(time.Hour / time.Microsecond)
	b := 1000 * hour // an epoch's start, store µs (offset 0: local ns = µs·1000)
	l.eng.joined.Store(1)
	two := Membership{Members: []Member{{Joined: 1, Expires: 2 * b}, {Joined: 1, Expires: 2 * b}}}
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Hour}}}
	cs := l.eng.newCredit("k", rule, 0)
	now := (b + hour/2) * 1000
	l.eng.members.Store(&memberView{m: two, at: now - int64(lease)}) // stale
	if ok, _ := l.eng.spendShare(cs, 1, now, false); ok {
		t.Fatal("admitted from a share counted on a stale copy of the registry")
	}
	now += int64(time.Second)
	l.eng.members.Store(&memberView{m: two, at: now}) // a heartbeat succeeded
	for i := range 5 {                                // S = 5
		if ok, _ := l.eng.spendShare(cs, 1, now, false); !ok {
			t.Fatalf("admit %d of 5 refused once the registry is fresh again", i+1)
		}
	}
	if ok, _ := l.eng.spendShare(cs, 1, now, false); ok {
		t.Fatal("a sixth unit admitted: the share is 5")
	}
}

// TestFailedReleaseStaysInItsEpoch: a round that carried a release of
// epoch e fails; the release stays made locally and the next sync in e
// says it again, but a sync after e ends releases nothing of e+1, whose
// share this replica holds anew.
func TestFailedReleaseStaysInItsEpoch(t *testing.T) {
	w := Window{Limit: 10, Period: time.Hour / time.Microsecond} // store units
	p := int64(w.Period)
	e := int64(1000)
	sh := &shareState{}
	sh.set(flagRelease) // the contention feed asked for it
	var it SyncItem
	sh.takeShare(&it, e*p+10, w, true, e)
	if it.Release == 0 || sh.released != e {
		t.Fatalf("release of epoch %d: item %d, released %d", e, it.Release, sh.released)
	}
	sh.untake(it) // the round failed
	var again SyncItem
	sh.takeShare(&again, e*p+20, w, true, e)
	if again.Release == 0 {
		t.Fatal("the next sync in the epoch did not say the release again")
	}
	sh.untake(again) // failed too; the epoch ends
	var next SyncItem
	sh.takeShare(&next, (e+1)*p+10, w, true, e+1)
	if next.Release != 0 || sh.released != e {
		t.Fatalf("the first sync of epoch %d released %d (released %d): want its share kept", e+1, next.Release, sh.released)
	}

	// A sliding window's release gives up the next epoch's share too,
	// and says so again in that epoch.
	sl := &shareState{}
	sl.set(flagRelease)
	var through SyncItem
	sl.takeShare(&through, e*p+10, w, true, e+1)
	if through.Release != (e+1)*p || sl.released != e+1 {
		t.Fatalf("release through epoch %d: item %d, released %d", e+1, through.Release, sl.released)
	}
	var later SyncItem
	sl.takeShare(&later, (e+1)*p+10, w, true, e+2)
	if later.Release != (e+1)*p+10 || sl.released != e+1 {
		t.Fatalf("in epoch %d: item %d, released %d; want the release said again, no further", e+1, later.Release, sl.released)
	}
}

// TestShareAsksAheadAfterSpentEpoch: a key whose static share of fewer
// than aheadAlways units is spent asks for credit ahead (kicked) only
// when the epoch before spent the whole share too, and only at its last
// unit; one whose last epoch left part of it does not, and its request
// beyond the share waits for a round instead. A larger share asks at its
// last eighth anyway.
func TestShareAsksAheadAfterSpentEpoch(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	sec := int64(time.Second / time.Microsecond)
	b := 1000 * sec // an epoch's start, store µs (offset 0: local ns = µs·1000)
	l.eng.joined.Store(1)
	four := Membership{Members: make([]Member, 4)}
	for i := range four.Members {
		four.Members[i] = Member{Joined: 1, Expires: 2 * b}
	}
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	cs := l.eng.newCredit("k", rule, 0)
	spend := func(epoch int64, n int) (kicked bool) {
		now := (b + epoch*sec + sec/2) * 1000
		l.eng.members.Store(&memberView{m: four, at: now})
		cs.kicked.Store(false)
		for i := range n {
			if ok, _ := l.eng.spendShare(cs, 1, now, false); !ok {
				t.Fatalf("epoch %d: admit %d of a share of 2 refused", epoch, i+1)
			}
		}
		return cs.kicked.Load()
	}
	if spend(0, 1) { // an epoch before it unknown: nothing spent
		t.Fatal("asked ahead at half of a share of 2 with no epoch before")
	}
	if spend(1, 2) { // the epoch before spent 1 of 2
		t.Fatal("asked ahead with the epoch before spending half its share")
	}
	if spend(2, 1) { // the epoch before spent its share of 2; half of this one left
		t.Fatal("asked ahead at half of a share of 2: the round would push half of it")
	}
	if !spend(2, 1) { // spent
		t.Fatal("did not ask ahead at the last unit of a share of 2 after an epoch that spent it whole")
	}
	// A share of aheadAlways or more asks at its last eighth regardless.
	big := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 4 * aheadAlways, Period: time.Second}}}
	cs = l.eng.newCredit("big", big, 0)
	if spend(3, aheadAlways-2) {
		t.Fatalf("asked ahead with 2 of a share of %d left", aheadAlways)
	}
	if !spend(3, 1) {
		t.Fatalf("did not ask ahead at the last unit of a share of %d, with no epoch before", aheadAlways)
	}
}

// TestSpentShareNotReleased: a publication asks a replica to release its
// share of the epoch, unless the share is spent whole and pushed, which
// a release would not free a unit of (a round for nothing). Spent but
// not pushed, or with a unit left, or a release through the next epoch
// too (a sliding window's), it asks.
func TestSpentShareNotReleased(t *testing.T) {
	const e = int64(1000)
	share := func(cur uint64, pending int64) *shareState {
		sh := &shareState{epoch: e, size: 2, state: WindowState{Epoch: e, Cur: cur}}
		sh.pendingN.Store(pending)
		return sh
	}
	if share(2, 0).askRelease(e, e) {
		t.Fatal("asked to release a share spent whole and pushed")
	}
	if !share(2, 1).askRelease(e, e) {
		t.Fatal("did not ask to release a spent share with a unit not pushed")
	}
	if !share(1, 0).askRelease(e, e) {
		t.Fatal("did not ask to release a share with a unit left")
	}
	if !share(2, 0).askRelease(e+1, e) {
		t.Fatal("did not ask to release the next epoch's share with this one's")
	}
	lent := share(2, 0)
	lent.set(flagLent)
	if !lent.askRelease(e, e) {
		t.Fatal("did not ask to release a loan spent whole")
	}
}
