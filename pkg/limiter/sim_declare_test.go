package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// declCounter counts the borrow items and the items saying a shrink a
// memstore is sent; while cut, the sync rounds of replicas a and b fail.
type declCounter struct {
	*memstore.Store
	borrows, shrinks atomic.Int64
	cut              atomic.Bool
}

func (c *declCounter) Sync(ctx context.Context, r string, it []limiter.SyncItem, out []limiter.SyncResult) error {
	if c.cut.Load() && (r == "a" || r == "b") {
		return fmt.Errorf("sync of %s cut: %w", r, limiter.ErrStoreUnavailable)
	}
	for _, x := range it {
		if x.Borrow {
			c.borrows.Add(1)
		}
		if x.Shrink > 0 {
			c.shrinks.Add(1)
		}
	}
	return c.Store.Sync(ctx, r, it, out)
}

// TestSimDeclaredShrink: two replicas hold the shares of a minute (50
// each of 100) and spend `spent` of each of 200 keys from them, nothing
// pushed; two more join 5 s into the minute. The old ones shrink their
// shares to a quarter and declare it (Declaration), the keys they spent
// more of pushed first. Then each of the four asks for every key 60
// times, all at once: no key admits more than its 100 in the minute, and
// the newcomers borrow each key's share with one item, where the shrink
// key by key took about four. With cut, the old replicas' rounds fail
// for 3 s from the scale-out, while the newcomers ask for each key 20
// times: the old ones cannot push, so they declare nothing until their
// rounds succeed again (declaring at once let keys admit 110).
func TestSimDeclaredShrink(t *testing.T) {
	for _, c := range []struct {
		spent int
		cut   bool
	}{{10, false}, {30, false}, {30, true}} {
		t.Run(fmt.Sprint("spent ", c.spent, " cut ", c.cut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { declaredShrink(t, perMinute(100), c.spent, c.cut, 90) })
		})
	}
}

// TestSimDeclaredShrinkSliding is TestSimDeclaredShrink of a sliding
// window, in the second minute the two hold shares of (25 each), having
// spent 10 or 20 of each key: the minute before admitted nothing, so a
// key's sliding count is what the minute admitted, at most 100
// (admitted: 83–85 a key). A sliding window's shrink covers the minute
// after the scale-out too, whose sharers are still the first two
// (TestSimScaleOutSliding). Its keys at their limit on a newcomer ask to
// borrow with each request denied, some 14 000 to 85 000 items: too many
// for the race detector's pace.
func TestSimDeclaredShrinkSliding(t *testing.T) {
	largeSim(t)
	for _, c := range []struct {
		spent int
		cut   bool
	}{{10, false}, {20, false}, {20, true}} {
		t.Run(fmt.Sprint("spent ", c.spent, " cut ", c.cut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { declaredShrink(t, slidingRule(100, time.Minute), c.spent, c.cut, 50) })
		})
	}
}

// declaredShrink is TestSimDeclaredShrink of rule; lo is the least a key
// must admit in the minute (the budget the shares left: a sliding
// window's next minute's shares hold half of it).
func declaredShrink(t *testing.T, rule *limiter.Rule, spent int, cut bool, lo int64) {
	const keys = 200
	st := &declCounter{Store: memstore.New(nil)}
	key := func(k int) []byte { return []byte(fmt.Sprintf("user=%d|%s", k, rule.Fingerprint())) }
	a, _ := startReplica(t, st, "a")
	b, _ := startReplica(t, st, "b")
	minutes := time.Minute
	if rule.Algorithm != limiter.FixedWindow {
		minutes = 2 * time.Minute // the shares begin a minute later (shareBase)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(minutes + 4*time.Second)))
	minute := time.Now().Truncate(time.Minute)
	admitted := make([]atomic.Int64, keys)
	ask := func(l *limiter.Limiter, k, times int) (local int) {
		out := make([]limiter.Result, 1)
		for range times {
			if ok, err := l.Decide([]limiter.Request{{Key: key(k), Rule: rule}}, out); err == nil && ok {
				admitted[k].Add(1)
				if out[0].Mode == limiter.ModeLocal {
					local++
				}
			}
		}
		return local
	}
	for k := range keys {
		for _, l := range []*limiter.Limiter{a, b} {
			if got := ask(l, k, spent); got != spent {
				t.Fatalf("key %d: %d of %d admitted locally before the scale-out", k, got, spent)
			}
		}
	}
	time.Sleep(time.Second)
	st.cut.Store(cut)
	c, _ := startReplica(t, st, "c")
	d, _ := startReplica(t, st, "d")
	time.Sleep(1500 * time.Millisecond)
	var wg sync.WaitGroup
	if cut {
		for _, l := range []*limiter.Limiter{c, d} {
			for k := range keys {
				wg.Go(func() { ask(l, k, 20) })
			}
		}
		wg.Wait()
		time.Sleep(time.Until(minute.Add(8500 * time.Millisecond)))
		st.cut.Store(false)
	}
	time.Sleep(3 * time.Second)
	st.borrows.Store(0)
	st.shrinks.Store(0)
	for _, l := range []*limiter.Limiter{a, b, c, d} {
		for k := range keys {
			wg.Go(func() { ask(l, k, 60) })
		}
	}
	wg.Wait()
	if now := time.Now(); now.Truncate(time.Minute) != minute {
		t.Fatalf("the load ran into the next minute (%v)", now)
	}
	least, hi := int64(100), int64(0)
	for k := range admitted {
		least, hi = min(least, admitted[k].Load()), max(hi, admitted[k].Load())
	}
	t.Logf("spent %d before: admitted per key %d–%d of 100; %d borrow items, %d shrink items for %d keys; newcomers %v, %v",
		spent, least, hi, st.borrows.Load(), st.shrinks.Load(), keys, c.Stats().Decisions, d.Stats().Decisions)
	if hi > 100 {
		t.Errorf("a key admitted %d in a minute of limit 100", hi)
	}
	if least < lo {
		t.Errorf("a key admitted %d: the budget its shares left was not reached", least)
	}
	// cut: the first requests were in the cut. A sliding window's key at
	// its limit on a newcomer asks again with each request denied (60 a
	// key on each of four replicas, for a limit of 100), counted too.
	if n := st.borrows.Load(); !cut && rule.Algorithm == limiter.FixedWindow && n > 2*keys*3/2 {
		t.Errorf("%d borrow items for the newcomers' %d first requests", n, 2*keys)
	}
}
