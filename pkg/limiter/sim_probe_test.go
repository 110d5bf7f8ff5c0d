package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// itemCounter counts the key syncs (items) of the rounds a store answers
// until closed.
type itemCounter struct {
	limiter.Store
	items  atomic.Int64
	closed atomic.Bool
}

func (c *itemCounter) Sync(ctx context.Context, r string, it []limiter.SyncItem, out []limiter.SyncResult) error {
	err := c.Store.Sync(ctx, r, it, out)
	if err == nil && !c.closed.Load() {
		c.items.Add(int64(len(it)))
	}
	return err
}

func slidingPer(limit uint64, period time.Duration) *limiter.Rule {
	return &limiter.Rule{Algorithm: limiter.SlidingWindow, Windows: []limiter.Window{{Limit: limit, Period: period}}}
}

// TestSimProbeOneSyncPerRequest: 5 000 keys under a sliding 100/minute
// rule (no static shares) at 0.15 requests a second each, on 2 replicas.
// Nearly every request is its key's first on its replica, or the first
// since its last: it waits for a round, which charges its unit and
// admits it (credit_probe.go), and nothing is left to push. That is 1.1
// key syncs a request, where asking for credit took a round to reserve
// it and one to push the hit and hand the rest back (2.4 before). The
// replicas' final pushes are not counted. Nothing is denied, no window is
// over its limit.
func TestSimProbeOneSyncPerRequest(t *testing.T) {
	largeSim(t)
	t.Parallel()
	st := &itemCounter{Store: memstore.New(nil)}
	d := warmUp + 16*time.Second
	r := keySim{rule: slidingPer(100, time.Minute), replicas: 2, keys: 5000, rate: 750,
		duration: d, measureFrom: warmUp, store: st,
		during: func(*keyRun) {
			time.Sleep(d)
			st.closed.Store(true)
		}}.run(t)
	over, under := r.check(t, true)
	perDecision := float64(st.items.Load()) / float64(r.requests)
	t.Logf("%d requests; %d key syncs, %.2f a request; %d waited; %d windows over; %d denied under the limit",
		r.requests, st.items.Load(), perDecision, r.waited, over, under)
	if len(r.denied) > 0 {
		t.Errorf("%d key windows had denials", len(r.denied))
	}
	if perDecision > 1.2 {
		t.Errorf("%.2f key syncs a request, want at most 1.2: the round a request waits for admits it", perDecision)
	}
}

// skewedSliding runs 1 000 keys of a sliding 10/second rule with
// Zipf(1.1) popularity over 4 replicas at 3 000 requests a second (the
// hot keys far over their limit, the tail far under it) for 15 s, with
// faults set by during, and fails t for a key's second over its limit.
// (A sliding window may deny a request in a second that was sent no more
// than the limit: the second before weighs in. Those are logged.)
func skewedSliding(t *testing.T, during func(r *keyRun)) {
	largeSim(t)
	t.Parallel()
	r := keySim{rule: slidingPer(10, time.Second), replicas: 4, keys: 1000, zipf: 1.1, rate: 3000,
		duration: 15 * time.Second, measureFrom: 3 * time.Second, during: during}.run(t)
	over, under := r.check(t, false)
	t.Logf("%d requests; %d windows over; %d key-seconds with a denial though sent at most the limit; store calls failed %d of %d",
		r.requests, over, under, r.faulty.Failures(), r.faulty.Calls())
}

// TestSimNewKeysNeverOver: keys new to several replicas at once (all of
// them, as the replicas start) never pass their limit. A key without a
// static share used to start with a unit or more of credit the store did
// not know of: 4 replicas admitted 11 or 12 of a key's 10 in a second,
// 14 key-seconds over in a run.
func TestSimNewKeysNeverOver(t *testing.T) {
	skewedSliding(t, func(r *keyRun) {
		r.faulty.SetDelays(func() time.Duration { return 2 * time.Millisecond })
	})
}

// TestSimProbeLateRounds: the skewed sliding keys with 30 % of the store
// calls late by 10–100 ms: waiters give up while their probes are in
// flight, and the units a late reply does not admit are refunded in their
// window or stay charged to it.
func TestSimProbeLateRounds(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(5, 6))
	skewedSliding(t, func(r *keyRun) {
		r.faulty.SetDelays(func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			if rng.Float64() < 0.7 {
				return time.Duration(1+rng.IntN(8)) * time.Millisecond
			}
			return time.Duration(10+rng.IntN(90)) * time.Millisecond
		})
	})
}

// TestSimProbeFailedRounds: the skewed sliding keys with the store down
// 50 ms in every 400: rounds that carry probes fail, and their units are
// dropped, not pushed later.
func TestSimProbeFailedRounds(t *testing.T) {
	skewedSliding(t, func(r *keyRun) {
		for range 35 {
			time.Sleep(350 * time.Millisecond)
			r.faulty.SetDown(true)
			time.Sleep(50 * time.Millisecond)
			r.faulty.SetDown(false)
		}
	})
}

// TestSimProbeLateFounders: in a fresh deployment's first minute, b and
// c join 2 s after a, too late to be founders (registry.go): they hold no
// share of the minute, whose founder holds half of it. Each key's first
// request on them waits for a round, which charges it (a probe: the half
// the founder does not hold has room) and admits it: about one key sync a
// request, where reserving credit and pushing the hit later took 2.5. The
// founder's keys stay local; nothing is denied.
func TestSimProbeLateFounders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Start 20 s into a minute: the whole test lies in its first.
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(20 * time.Second)))
		st := &itemCounter{Store: memstore.New(nil)}
		a := runReplicas(t, st, "a")[0]
		time.Sleep(2 * time.Second)
		late := runReplicas(t, st, "b", "c")
		time.Sleep(2 * time.Second)
		rule := &limiter.Rule{Algorithm: limiter.FixedWindow, Windows: []limiter.Window{{Limit: 100, Period: time.Minute}}}
		items0 := st.items.Load()
		var decided int
		var denied atomic.Int64
		var wg sync.WaitGroup
		for i := range 2000 {
			key := []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint()))
			for _, l := range append(late, a) {
				wg.Go(func() {
					out := make([]limiter.Result, 1)
					ok, err := l.Decide([]limiter.Request{{Key: key, Rule: rule}}, out)
					if err != nil {
						t.Error(err)
					}
					if !ok {
						denied.Add(1)
					}
				})
				decided++
			}
			if i%50 == 49 {
				time.Sleep(10 * time.Millisecond) // 5 000 requests a second
			}
		}
		wg.Wait()
		time.Sleep(3 * time.Second) // the pushes and hand-backs that follow
		syncs := st.items.Load() - items0
		st.closed.Store(true)
		perLate := float64(syncs) / float64(2*2000)
		t.Logf("%d decisions, %d denied; %d key syncs, %.2f a decision of a late replica; a: %v; b: %v",
			decided, denied.Load(), syncs, perLate, a.Stats().Decisions, late[0].Stats().Decisions)
		if denied.Load() > 0 {
			t.Errorf("%d of %d first requests denied", denied.Load(), decided)
		}
		if perLate > 1.2 {
			t.Errorf("%.2f key syncs a first request of a late replica, want at most 1.2", perLate)
		}
	})
}
