package limiter

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// synced makes key's credit state for rule and applies a first round
// that grants credit and shows cur units used in the window of now.
func synced(l *Limiter, key string, rule *Rule, credit, cur uint64) *creditState {
	now := l.now()
	cs := l.eng.newCredit(key, rule, now)
	snow := l.eng.storeNow(now)
	l.eng.prepare(cs, now)
	l.eng.apply(cs, &SyncResult{Credit: credit, Windows: []WindowState{{Epoch: snow / 1e6, Cur: cur}}, Now: snow})
	return cs
}

// TestFullWindowLearntFromAnyRound: a round that finds a fixed window
// full of hits has the key deny locally until it clears, whether or not
// requests waited for the round: a replica that pushed the hit that
// filled the window, with none of its requests waiting, asked the store
// again at its next request only to learn the same.
func TestFullWindowLearntFromAnyRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
		for i, tt := range []struct {
			cur    uint64
			denies bool
		}{{9, false}, {10, true}} {
			now := l.now()
			cs := synced(l, string(rune('a'+i)), rule, 0, tt.cur)
			if got := now < cs.deniedTo.Load(); got != tt.denies {
				t.Errorf("window at %d of 10, no waiter: denies locally %v, want %v", tt.cur, got, tt.denies)
			}
		}
	})
}

// TestAheadOnlyWithRoom: a fixed window's key that spent half its grant
// asks for credit ahead only if its last view leaves a unit free beyond
// what it holds and has not pushed; a sliding window's asks whatever the
// view, its units freeing as time passes.
func TestAheadOnlyWithRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		for i, tt := range []struct {
			alg  Algorithm
			cur  uint64
			asks bool
		}{{FixedWindow, 8, false}, {FixedWindow, 7, true}, {SlidingWindow, 8, true}} {
			rule := &Rule{Algorithm: tt.alg, Windows: []Window{{Limit: 10, Period: time.Second}}}
			now := l.now()
			cs := synced(l, string(rune('a'+i)), rule, 2, tt.cur)
			for range 2 {
				if !l.eng.spend(cs, 1, now) {
					t.Fatalf("%v at %d: a unit of the grant of 2 not spent", tt.alg, tt.cur)
				}
			}
			if got := cs.kicked.Load(); got != tt.asks {
				t.Errorf("%v, window at %d of 10 and a grant of 2 spent: asks ahead %v, want %v", tt.alg, tt.cur, got, tt.asks)
			}
		}
	})
}

// TestHitsStampedInTheirSecond: hits admitted from credit are pushed
// stamped within the second of the store clock they were admitted in,
// whenever the round comes and with no boundary snapshot: those of a
// second before the round's at its last µs, split from the ones admitted
// since.
func TestHitsStampedInTheirSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 100, Period: time.Second}}}
		boundary := time.Now().Truncate(time.Second).Add(time.Second)
		b := l.eng.storeNow(boundary.UnixNano())
		for i, after := range []int64{0, 1} {
			cs := synced(l, string(rune('a'+i)), rule, 50, 0)
			time.Sleep(time.Until(boundary.Add(-3 * time.Millisecond)))
			if !l.eng.spend(cs, 2, l.now()) {
				t.Fatal("2 units of 50 not spent")
			}
			time.Sleep(time.Until(boundary.Add(2 * time.Millisecond)))
			if after > 0 && !l.eng.spend(cs, after, l.now()) {
				t.Fatal("a unit of 48 not spent")
			}
			it := l.eng.prepare(cs, l.now())
			want := []Hit{{At: b - 1, N: 2}}
			if after > 0 {
				want = append(want, Hit{At: l.eng.storeNow(l.now()), N: after})
			}
			if !slices.Equal(it.Hits, want) {
				t.Errorf("2 admitted 3 ms before the boundary at %d, %d 2 ms after it: pushed %+v, want %+v", b, after, it.Hits, want)
			}
			boundary = boundary.Add(time.Second)
			b = l.eng.storeNow(boundary.UnixNano())
		}
	})
}

// TestHitsNeverStampedEarlier: spends racing the rounds that take their
// hits across second boundaries never have a hit stamped in a second
// before the one it was admitted in (that would under-count the later
// window); a hit may move to a later second, never to an earlier one.
func TestHitsNeverStampedEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 1 << 40, Period: time.Second}}}
		cs := synced(l, "k", rule, 1<<30, 0)
		end := time.Now().Add(2500 * time.Millisecond) // within the lease
		var mu sync.Mutex
		admitted := map[int64]int64{}
		pushed := map[int64]int64{}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; time.Now().Before(end); i++ {
					time.Sleep(time.Duration(100+(i*37+g*113)%900) * time.Microsecond)
					now := l.now()
					if !l.eng.spend(cs, 1, now) {
						t.Error("a unit not spent")
						return
					}
					mu.Lock()
					admitted[l.eng.storeNow(now)/1_000_000]++
					mu.Unlock()
				}
			})
		}
		take := func() {
			cs.mu.Lock()
			_, hits := cs.settle(l.eng.storeNow(l.now()))
			cs.mu.Unlock()
			mu.Lock()
			for _, h := range hits {
				pushed[h.At/1_000_000] += h.N
			}
			mu.Unlock()
		}
		wg.Go(func() {
			for time.Now().Before(end) {
				time.Sleep(2300 * time.Microsecond)
				take()
			}
		})
		wg.Wait()
		take()
		var secs []int64
		for s := range admitted {
			secs = append(secs, s)
		}
		slices.Sort(secs)
		var a, p int64 // from the last second back
		for i := len(secs) - 1; i >= 0; i-- {
			a += admitted[secs[i]]
			p += pushed[secs[i]]
			if p < a {
				t.Fatalf("from second %d on: %d hits admitted, %d pushed stamped there", secs[i], a, p)
			}
		}
		if a != p {
			t.Fatalf("%d admitted, %d pushed", a, p)
		}
	})
}

// TestOldHitsTakeNothingOfNewWindow: a fixed window's unpushed hits of
// an epoch that is over, charged to it when pushed, do not count against
// the current epoch in the view: a request that fits beside the hits
// pushed in it is not held back by them. Once a hit of the current epoch
// is counted, all unpushed hits count (an over-estimate).
func TestOldHitsTakeNothingOfNewWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
		cs := synced(l, "k", rule, 6, 0)
		boundary := time.Now().Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(boundary.Add(-3 * time.Millisecond)))
		if !l.eng.spend(cs, 2, l.now()) {
			t.Fatal("2 units of 6 not spent")
		}
		time.Sleep(time.Until(boundary.Add(2 * time.Millisecond)))
		snow := l.eng.storeNow(l.now())
		cs.view.Store(&storeView{windows: []WindowState{{Epoch: snow / 1e6, Cur: 8}}})
		if w := cs.viewWait(snow, 2); w != 0 {
			t.Errorf("2 hits of the second before unpushed, window at 8 of 10: 2 more wait %v, want 0", w)
		}
		if !l.eng.spend(cs, 1, l.now()) {
			t.Fatal("a unit of 4 not spent")
		}
		if w := cs.viewWait(snow, 2); w == 0 {
			t.Error("a hit of this second unpushed too, window at 8 of 10: 2 more fit, want a wait")
		}
	})
}

// TestFullReadGuards: a full entry read from the feed (Contended.Full)
// has a key this replica holds deny locally until its epoch ends, and
// asks for no release; a key holding credit (a local refund may have
// returned units to it) and an entry of another epoch leave the key to
// its rounds.
func TestFullReadGuards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"))
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
		for _, tt := range []struct {
			key    string
			credit uint64
			ago    int64 // µs before now the entry was published
			denies bool
		}{{"a", 0, 0, true}, {"b", 2, 0, false}, {"c", 0, 1_000_000, false}} {
			now := l.now()
			cs := l.eng.creditFor([]byte(tt.key), rule, now)
			snow := l.eng.storeNow(now)
			l.eng.prepare(cs, now)
			l.eng.apply(cs, &SyncResult{Credit: tt.credit, Windows: []WindowState{{Epoch: snow / 1e6, Cur: 5}}, Now: snow})
			cs.deniedTo.Store(0)
			l.eng.contendAll([]Contended{{Key: tt.key, Algorithm: FixedWindow, Windows: rule.Windows, Replica: "o",
				At: snow - tt.ago, Full: true}})
			if got := now < cs.deniedTo.Load(); got != tt.denies {
				t.Errorf("key %s (credit %d, published %d µs ago): denies locally %v, want %v", tt.key, tt.credit, tt.ago, got, tt.denies)
			}
			if until := cs.deniedTo.Load(); tt.denies && until > l.eng.localOf((snow/1e6+1)*1e6) {
				t.Errorf("key %s denied until %d, past its epoch's end", tt.key, until)
			}
			l.eng.contMu.Lock()
			if l.eng.contended[tt.key] != nil {
				t.Errorf("key %s: a full entry noted as contended", tt.key)
			}
			l.eng.contMu.Unlock()
		}
	})
}
