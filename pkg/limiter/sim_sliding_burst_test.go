package limiter_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// TestSimSlidingBurstAfterQuiet: four replicas hold the static shares of
// a sliding window of 100 a minute (12 each of an epoch); a key quiet
// until now is asked 400 times a second, round-robin over the replicas,
// for 10 s. The whole limit is admitted at once, the rest denied from the
// replicas' views, with a few key syncs, and the sliding count never
// passes the limit. The store used to count every sharer's share of the
// epoch before (48, weighted) as spent and unreported for the whole
// epoch: 58 admitted in the first second, then one a second, each
// request waiting some 170 ms on rounds that found no room (about 1.5 key
// syncs a request); replicas now say they pushed that epoch's share hits
// (SyncItem.ReleasePrev), as a token bucket's do. The replicas follow
// the store's contention feed, as they follow Redis's.
func TestSimSlidingBurstAfterQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &feedCounter{Store: memstore.New(nil)}
		ls := scaleOutIn(t, st, 2)
		time.Sleep(3 * time.Minute) // all four are sharers
		rule := slidingRule(100, time.Minute)
		key := []byte("burst|" + rule.Fingerprint())
		out := make([]limiter.Result, 1)
		items0, start := st.items.Load(), time.Now()
		var admits []int64
		var slow int
		const requests = 4000
		for n := range requests {
			t0 := time.Now()
			ok, err := ls[n%4].Decide([]limiter.Request{{Key: key, Rule: rule}}, out)
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(t0) > 10*time.Millisecond {
				slow++
			}
			if ok {
				admits = append(admits, time.Now().UnixNano())
			}
			time.Sleep(2500 * time.Microsecond)
		}
		syncs := st.items.Load() - items0
		early := 0
		for _, a := range admits {
			if time.Duration(a-start.UnixNano()) < 2*time.Second {
				early++
			}
		}
		worst := slidingWorst(admits, int64(time.Minute))
		t.Logf("%d admitted (%d in the first 2 s), %d decisions waited over 10 ms, %d key syncs for %d requests, highest sliding count %d, over %v",
			len(admits), early, slow, syncs, requests, worst, time.Since(start))
		if worst > 100 {
			t.Errorf("sliding count %d over the limit of 100", worst)
		}
		if early < 95 {
			t.Errorf("%d admitted in the burst's first 2 s, want the limit, 100 (the shares and the rest of the budget)", early)
		}
		if slow > 20 || syncs > requests/20 {
			t.Errorf("%d decisions waited over 10 ms and %d key syncs for %d requests: want at most 20 and a key sync per 20 requests",
				slow, syncs, requests)
		}
	})
}

// slidingWorst is the highest sliding count of a window of period p
// (ns) at any of the admits (Unix ns, sorted), each counted in.
func slidingWorst(admits []int64, p int64) (worst uint64) {
	walkSliding(admits, p, func(_ int64, n, _, _ uint64) { worst = max(worst, n) })
	return worst
}
