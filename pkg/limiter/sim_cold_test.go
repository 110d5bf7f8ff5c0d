package limiter_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// TestSimFirstRequestLateRound: in a fresh deployment's first minute no
// replica holds a static share (a newcomer holds none of an epoch that
// began less than a lease after it joined), so a key's first request on
// a replica waits for a round. On a store usually fast, a round late by
// a busy moment (here 150 ms: a collection, a descheduled process) is
// waited out rather than the request denied under its limit: it has no
// view and no credit to be decided on. The wait stays within
// StoreTimeout (10 ms) + 180 ms.
func TestSimFirstRequestLateRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := limitertest.NewFaultyStore(memstore.New(nil))
		ls := runReplicas(t, store, "a", "b")
		time.Sleep(2 * time.Second) // both have joined; the first minute has no sharers
		rule := perMinute(100)
		key := func(i int) []byte { return []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint())) }
		out := make([]limiter.Result, 1)
		decide := func(l *limiter.Limiter, k []byte) (bool, time.Duration) {
			start := time.Now()
			ok, err := l.Decide([]limiter.Request{{Key: k, Rule: rule}}, out)
			if err != nil {
				t.Fatal(err)
			}
			return ok, time.Since(start)
		}
		if ok, _ := decide(ls[0], key(0)); !ok { // a view of key 0, on a fast store
			t.Fatal("key 0's first request denied on a fast store")
		}
		store.SetDelay(150 * time.Millisecond)
		for i := 1; i <= 3; i++ {
			for j, l := range ls {
				ok, took := decide(l, key(i))
				if took > 190*time.Millisecond {
					t.Errorf("key %d's first request on replica %d took %v", i, j, took)
				}
				if !ok || out[0].Mode != limiter.ModeCold {
					t.Errorf("key %d's first request on replica %d, its round 150 ms late: allowed %v, mode %v after %v; want admitted by its round",
						i, j, ok, out[0].Mode, took)
				}
			}
		}
		store.SetDelay(0)
	})
}
