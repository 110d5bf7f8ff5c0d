package limiter

import (
	"testing"
	"testing/synctest"
	"time"
)

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
			cs := l.eng.newCredit(string(rune('a'+i)), rule, now)
			snow := l.eng.storeNow(now)
			l.eng.prepare(cs, now)
			l.eng.apply(cs, &SyncResult{Windows: []WindowState{{Epoch: snow / 1e6, Cur: tt.cur}}, Now: snow})
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
			cs := l.eng.newCredit(string(rune('a'+i)), rule, now)
			snow := l.eng.storeNow(now)
			l.eng.prepare(cs, now)
			l.eng.apply(cs, &SyncResult{Credit: 2, Windows: []WindowState{{Epoch: snow / 1e6, Cur: tt.cur}}, Now: snow})
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
