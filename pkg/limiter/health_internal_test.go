package limiter

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestMissedBySeed: a unit admitted from the key's share or credit while
// another request of the key went degraded and seeded its fail-static
// windows counts in them, so the replica's ⌈L/N⌉ holds. Before, a
// simulation under load admitted 55 of 50 + 4 in the second the store
// went degraded.
func TestMissedBySeed(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"), WithClock(stillClock{time.Unix(1000, 5e8)})) // mid-second
	e := l.eng
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 8, Period: time.Second}}}
	cs := e.creditFor([]byte("k"), rule, l.now())
	now := l.now()
	e.replicas.Store(2)
	e.lastOK.Store(now - int64(3*time.Second)) // unreachable for 3 s: degraded
	e.lastFail.Store(now)
	if !e.degraded(rule, now) {
		t.Fatal("not degraded")
	}
	if res := e.degradedDecide(cs, rule, 1, now); !res.Allowed {
		t.Fatal("the seeding request denied")
	}
	// Three admitted from credit or the share while that one seeded.
	e.missedBySeed(cs, rule, 3)
	admitted := 0
	for range 8 {
		if e.degradedDecide(cs, rule, 1, l.now()).Allowed {
			admitted++
		}
	}
	if admitted != 0 {
		t.Fatalf("admitted %d more in the window, want 0: ⌈8/2⌉ = 4 = 1 + the 3 missed", admitted)
	}
}

// stillClock is a clock that does not move.
type stillClock struct{ t time.Time }

func (c stillClock) Now() time.Time { return c.t }

// TestWaiterTimedOutDegraded: a request that waited for a round while the
// store went unreachable, and timed out once the replica was degraded, is
// decided in the key's fail-static windows as a request arriving then
// is, not admitted from the credit its reservation backed. Before, such
// waiters were admitted beside the replica's ⌈L/N⌉: a simulation under
// load (TestSimFailStatic) admitted 55 of 50 + 4 in the second the store
// went degraded, two or three times in a thousand runs.
func TestWaiterTimedOutDegraded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithStore(nopStore{}, "r"), WithClock(stillClock{time.Unix(1000, 5e8)})) // mid-second
		e := l.eng
		rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 8, Period: time.Second}}}
		now := l.now()
		cs := e.creditFor([]byte("k"), rule, now)
		cs.credit.Store(10) // credit a reservation backs, as before the outage
		cs.backedTo.Store(now + int64(time.Minute))
		e.replicas.Store(2)
		e.lastOK.Store(now - int64(3*time.Second)) // unreachable for 3 s: degraded
		e.lastFail.Store(now)
		for i := range 4 { // ⌈8/2⌉ = 4
			if res := e.degradedDecide(cs, rule, 1, now); !res.Allowed {
				t.Fatalf("degraded request %d denied", i)
			}
		}
		res := e.wait(cs, rule, 1, now)
		if res.Allowed {
			t.Fatalf("a waiter timed out while degraded admitted (mode %v) past the replica's ⌈L/N⌉ = 4", res.Mode)
		}
		if res.Mode != ModeDegraded {
			t.Errorf("mode %v, want degraded", res.Mode)
		}
		if got := cs.credit.Load(); got != 10 {
			t.Errorf("credit %d, want 10 untouched", got)
		}
	})
}
