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

// startReplica runs a replica until the test ends or stop is called,
// which waits for its Run (and its final push and leave) to return.
func startReplica(t *testing.T, store limiter.Store, name string) (*limiter.Limiter, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	l := limiter.New(limiter.WithStore(store, name))
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return l, stop
}

// rollOver starts replicas a and b, waits into the first minute they are
// sharers of, then, 5 s in, starts c and stops b, as a rolling update
// replaces one replica, and lets the registry's heartbeats catch up.
func rollOver(t *testing.T, st limiter.Store) (a, c *limiter.Limiter) {
	return rollOverIn(t, st, 1)
}

// rollOverIn is rollOver in the minute-th minute from now: a sliding
// window's shares begin a minute later than a fixed window's.
func rollOverIn(t *testing.T, st limiter.Store, minute int) (a, c *limiter.Limiter) {
	a, _ = startReplica(t, st, "a")
	_, stopB := startReplica(t, st, "b")
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Duration(minute)*time.Minute + 5*time.Second)))
	c, _ = startReplica(t, st, "c")
	time.Sleep(500 * time.Millisecond)
	stopB()
	time.Sleep(2 * time.Second)
	return a, c
}

// askKeys asks each of ls 4 times, 2 s apart, for each of keys keys of
// rule, all at once, and counts the requests denied and decided locally.
func askKeys(rule *limiter.Rule, keys int, ls ...*limiter.Limiter) (denied, local int64) {
	var d, l atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		for i := range keys {
			key := []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint()))
			for _, lim := range ls {
				wg.Go(func() {
					out := make([]limiter.Result, 1)
					if ok, err := lim.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); err != nil || !ok {
						d.Add(1)
					}
					if out[0].Mode == limiter.ModeLocal {
						l.Add(1)
					}
				})
			}
		}
		time.Sleep(2 * time.Second)
	}
	wg.Wait()
	return d.Load(), l.Load()
}

// askCounted is askKeys of 500 keys of 100 a minute that also counts the
// key syncs st saw meanwhile; st counts no more after it.
func askCounted(st *itemCounter, ls ...*limiter.Limiter) (denied, local, syncs int64) {
	return askCountedOf(st, perMinute(100), ls...)
}

// askCountedOf is askCounted of keys of rule.
func askCountedOf(st *itemCounter, rule *limiter.Rule, ls ...*limiter.Limiter) (denied, local, syncs int64) {
	items0 := st.items.Load()
	denied, local = askKeys(rule, 500, ls...)
	syncs = st.items.Load() - items0
	st.closed.Store(true)
	return denied, local, syncs
}

// TestSimLoanAfterRollingUpdate: a replica that joins in the middle of a
// window holds no share of it. Without a loan every request of a key far
// below its limit cost it a round until the next window it is a sharer
// of (for an hour or a day rule, hours after every rolling update): here
// 2 000 requests, 4 of each of 500 keys under 100 a minute, cost 3 030
// key syncs and 1 was decided locally. With one, a key's first request
// borrows the share b left and the other three are decided locally: 500
// key syncs, 1 500 local decisions.
//
// Of a sliding window, whose shares a and b hold from their second
// minute, in which c replaces b: the same.
func TestSimLoanAfterRollingUpdate(t *testing.T) {
	for _, rule := range []*limiter.Rule{perMinute(100), slidingRule(100, time.Minute), bucketRule(100, time.Minute)} {
		t.Run(rule.Algorithm.String(), func(t *testing.T) { simLoanAfterRollingUpdate(t, rule) })
	}
}

func simLoanAfterRollingUpdate(t *testing.T, rule *limiter.Rule) {
	synctest.Test(t, func(t *testing.T) {
		st := &itemCounter{Store: memstore.New(nil)}
		minute := 1
		if rule.Algorithm != limiter.FixedWindow {
			minute = 2 // the shares begin a minute later (shareBase)
		}
		_, c := rollOverIn(t, st, minute)
		denied, local, syncs := askCountedOf(st, rule, c)
		t.Logf("2000 decisions on the new replica: %d denied, %d local, %d key syncs; %v", denied, local, syncs, c.Stats().Decisions)
		if denied > 0 {
			t.Errorf("%d requests of keys far below their limit denied", denied)
		}
		if local < 1400 {
			t.Errorf("%d of 2 000 decided locally, want 3 of each key's 4 at least (1 500) but a few", local)
		}
		if syncs > 700 {
			t.Errorf("%d key syncs for 500 keys, want about one a key", syncs)
		}
	})
}

// TestSimLoanHotKey: a key the new replica borrowed a share of, then
// pressed from both replicas at twice its limit: the minute admits at
// most its limit, and nearly all of it.
func TestSimLoanHotKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(nil)
		a, c := rollOver(t, st)
		rule := perMinute(100)
		key := []byte("hot|" + rule.Fingerprint())
		out := make([]limiter.Result, 1)
		if ok, _ := c.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); !ok {
			t.Fatal("the first request denied")
		}
		admitted := atomic.Int64{}
		admitted.Add(1)
		var wg sync.WaitGroup
		for _, l := range []*limiter.Limiter{a, c} {
			wg.Go(func() {
				out := make([]limiter.Result, 1)
				for range 100 {
					if ok, _ := l.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); ok {
						admitted.Add(1)
					}
					time.Sleep(200 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		t.Logf("admitted %d of 201 in the minute; a: %v; c: %v", admitted.Load(), a.Stats().Decisions, c.Stats().Decisions)
		if n := admitted.Load(); n > 100 || n < 90 {
			t.Errorf("the minute admitted %d, want 90 to 100", n)
		}
	})
}

// TestSimLoansRollingAtLoad: four replicas of a 100-a-minute rule are
// replaced one at a time in the middle of the minute (each new one
// started, then an old one stopped, 8 s apart), under 20× the limit on
// two hot keys and a request every 2 s on each of 200 quiet keys. The
// new replicas borrow shares of the minute; no key's minute admits more
// than its limit, the hot keys' nearly all of it, and no quiet key is
// denied.
func TestSimLoansRollingAtLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(nil)
		type rep struct {
			l    *limiter.Limiter
			stop func()
		}
		var mu sync.Mutex
		var reps []rep
		for _, name := range []string{"a", "b", "c", "d"} {
			l, stop := startReplica(t, st, name)
			reps = append(reps, rep{l, stop})
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + time.Second)))
		start := time.Now()
		rule := perMinute(100)
		live := func(i int) *limiter.Limiter {
			mu.Lock()
			defer mu.Unlock()
			return reps[(len(reps)-4)+i%4].l
		}
		type cell struct {
			minute int64
			key    string
		}
		var cmu sync.Mutex
		admitted := map[cell]int{}
		var quietDenied atomic.Int64
		var wg sync.WaitGroup
		decide := func(i int, key string, quiet bool) {
			out := make([]limiter.Result, 1)
			ok, _ := live(i).Decide([]limiter.Request{{Key: []byte(key + "|" + rule.Fingerprint()), Rule: rule}}, out)
			if ok {
				cmu.Lock()
				admitted[cell{int64(time.Since(start) / time.Minute), key}]++
				cmu.Unlock()
			} else if quiet {
				quietDenied.Add(1)
			}
		}
		end := start.Add(50 * time.Second)
		for i := range 8 { // hot: 4 callers a key, 8.3 a second each: 20× of 100 a minute
			wg.Go(func() {
				for time.Now().Before(end) {
					decide(i, fmt.Sprint("hot", i%2), false)
					time.Sleep(120 * time.Millisecond)
				}
			})
		}
		wg.Go(func() { // quiet: each of 200 keys every 2 s, on a replica in turn
			for n := 0; time.Now().Before(end); n++ {
				for k := range 200 {
					wg.Go(func() { decide(n+k, fmt.Sprint("quiet", k), true) })
				}
				time.Sleep(2 * time.Second)
			}
		})
		for i, name := range []string{"e", "f", "g", "h"} {
			time.Sleep(8 * time.Second)
			l, stop := startReplica(t, st, name)
			mu.Lock()
			reps = append(reps, rep{l, stop})
			old := reps[i].stop
			mu.Unlock()
			time.Sleep(500 * time.Millisecond)
			old()
		}
		wg.Wait()
		for c, n := range admitted {
			if n > 100 {
				t.Errorf("%s admitted %d in minute %d, over its limit of 100", c.key, n, c.minute)
			}
		}
		for _, k := range []string{"hot0", "hot1"} {
			if n := admitted[cell{0, k}]; n < 90 {
				t.Errorf("%s admitted %d of its 100 in the minute, pressed at 5×", k, n)
			}
		}
		if n := quietDenied.Load(); n > 0 {
			t.Errorf("%d requests of quiet keys denied", n)
		}
		t.Logf("hot keys: %d, %d; quiet keys denied: %d", admitted[cell{0, "hot0"}], admitted[cell{0, "hot1"}], quietDenied.Load())
	})
}

// loanPressed runs a key of 100 a minute that the new replica c of a
// rolling update borrows a share of: c asks once a second, cUses times
// from 7.5 s into the minute, then stops; the old replica a asks 12×
// the limit from aFrom into the minute until 50 s into the next. At 20 s
// into the minute, during runs. It returns what the two minutes
// admitted.
func loanPressed(t *testing.T, st limiter.Store, cUses int, aFrom time.Duration, during func()) (first, second int) {
	a, c := rollOver(t, st)
	rule := perMinute(100)
	key := []byte("hot|" + rule.Fingerprint())
	minute := time.Now().Truncate(time.Minute)
	admitted := map[time.Time]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := minute.Add(110 * time.Second)
	run := func(l *limiter.Limiter, from time.Time, n int, gap time.Duration) {
		time.Sleep(time.Until(from))
		out := make([]limiter.Result, 1)
		for ; n > 0 && time.Now().Before(end); n-- {
			if ok, _ := l.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); ok {
				mu.Lock()
				admitted[time.Now().Truncate(time.Minute)]++
				mu.Unlock()
			}
			time.Sleep(gap)
		}
	}
	for range 3 {
		wg.Go(func() { run(a, minute.Add(aFrom), 1<<30, 150*time.Millisecond) })
	}
	wg.Go(func() { run(c, time.Now(), cUses, time.Second) })
	time.Sleep(time.Until(minute.Add(20 * time.Second)))
	during()
	wg.Wait()
	return admitted[minute], admitted[minute.Add(time.Minute)]
}

// TestSimLoanReleasedOnContention: the new replica borrows a share of a
// key and uses 5 units of it; the old replica's requests then wait for
// the units idle in the loan. The store publishes the key, and the
// borrower releases the rest of its loan, as a sharer releases its
// share. Before, a borrower, not one of the epoch's sharers, passed the
// key by: the minute admitted 80 of its 100, the old replica's requests
// denied with 20 units idle in the loan.
func TestSimLoanReleasedOnContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second := loanPressed(t, memstore.New(nil), 5, 7500*time.Millisecond, func() {})
		t.Logf("admitted %d and %d", first, second)
		if first < 99 || first > 100 || second != 100 {
			t.Errorf("the minutes admitted %d and %d, want their limit of 100", first, second)
		}
	})
}

// TestSimWipeKeepsLoans: the new replica has used 10 units of its loan
// when the store loses everything, 20 s into the minute; then the old
// replica asks 12× the limit. The minute admits at most its limit and a
// unit per replica for the rounds in flight, the next at most its limit:
// the loan's hits were pushed with the key's syncs while it was busy,
// and the borrower, finding itself joined to a new registry, gives the
// loan up (dropShares).
func TestSimWipeKeepsLoans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newWipedStore()
		wiped, next := loanPressed(t, st, 10, 20500*time.Millisecond, st.wipe)
		t.Logf("admitted %d in the wiped minute, %d in the next", wiped, next)
		if wiped > 100+2 {
			t.Errorf("the wiped minute admitted %d > L + N", wiped)
		}
		if next > 100 {
			t.Errorf("the minute after admitted %d > L", next)
		}
	})
}

// TestSimLoanLateFounder: a fresh deployment's replicas that start 2 s
// after the first are not founders of its first minute and hold no share
// of it (registry.go); their keys' first requests are probed and borrow
// a share of the founding epoch, at most a founder's, out of the half the
// founders leave. Each late replica asks 500 keys 4 times: 3 of each
// key's 4 are decided locally, where each was a probe, a round a
// request, without loans.
func TestSimLoanLateFounder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(20 * time.Second)))
		st := &itemCounter{Store: memstore.New(nil)}
		startReplica(t, st, "a")
		time.Sleep(2 * time.Second)
		b, _ := startReplica(t, st, "b")
		c, _ := startReplica(t, st, "c")
		time.Sleep(2 * time.Second)
		rule := perMinute(100)
		items0 := st.items.Load()
		denied, local := askKeys(rule, 500, b, c)
		syncs := st.items.Load() - items0
		st.closed.Store(true)
		t.Logf("4 000 decisions on the late replicas: %d denied, %d local, %d key syncs", denied, local, syncs)
		if denied > 0 {
			t.Errorf("%d requests of keys far below their limit denied", denied)
		}
		if local < 2800 {
			t.Errorf("%d of 4 000 decided locally, want 3 of each key's 4 at least (3 000) but a few", local)
		}
	})
}

// TestSimLoanWholeShare: four replicas share a rule of 100 a minute
// (shares of 25); 5 s into a minute they all hold shares of, a fifth
// replaces one, which leaves. Each of 50 keys is then asked 20 times on
// the new replica, a second apart. The leaver's share is free, and no
// replica still live released any: the new one borrows a whole share,
// and a key costs one sync. Lent only its part of what was free (1/N,
// as after a live sharer's release), it held 6 and took credit for the
// rest, reserved and renewed a lease at a time: 850 key syncs.
func TestSimLoanWholeShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &itemCounter{Store: memstore.New(nil)}
		var stops []func()
		for _, name := range []string{"a", "b", "c", "d"} {
			_, stop := startReplica(t, st, name)
			stops = append(stops, stop)
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 5*time.Second)))
		e, _ := startReplica(t, st, "e")
		time.Sleep(500 * time.Millisecond)
		stops[3]()
		time.Sleep(2 * time.Second)
		rule := perMinute(100)
		items0 := st.items.Load()
		out := make([]limiter.Result, 1)
		for range 20 {
			for i := range 50 {
				key := []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint()))
				if ok, _ := e.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); !ok {
					t.Fatalf("key %d denied far below its limit", i)
				}
			}
			time.Sleep(time.Second)
		}
		syncs := st.items.Load() - items0
		st.closed.Store(true)
		t.Logf("1 000 requests of 50 keys on the new replica: %d key syncs", syncs)
		if syncs > 75 {
			t.Errorf("%d key syncs for 50 keys, want about one a key", syncs)
		}
	})
}
