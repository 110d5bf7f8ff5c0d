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
	a, _ = startReplica(t, st, "a")
	_, stopB := startReplica(t, st, "b")
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 5*time.Second)))
	c, _ = startReplica(t, st, "c")
	time.Sleep(500 * time.Millisecond)
	stopB()
	time.Sleep(2 * time.Second)
	return a, c
}

// TestSimLoanAfterRollingUpdate: a replica that joins in the middle of a
// window holds no share of it. Without a loan every request of a key far
// below its limit cost it a round until the next window it is a sharer
// of (for an hour or a day rule, hours after every rolling update): here
// 2 000 requests, 4 of each of 500 keys under 100 a minute, cost 3 030
// key syncs and 1 was decided locally. With one, a key's first request
// borrows the share b left and the other three are decided locally: 500
// key syncs, 1 500 local decisions.
func TestSimLoanAfterRollingUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &itemCounter{Store: memstore.New(nil)}
		_, c := rollOver(t, st)
		rule := perMinute(100)
		items0 := st.items.Load()
		var denied, local atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			for i := range 500 {
				key := []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint()))
				wg.Go(func() {
					out := make([]limiter.Result, 1)
					if ok, err := c.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); err != nil || !ok {
						denied.Add(1)
					}
					if out[0].Mode == limiter.ModeLocal {
						local.Add(1)
					}
				})
			}
			time.Sleep(2 * time.Second)
		}
		wg.Wait()
		syncs := st.items.Load() - items0
		st.closed.Store(true)
		t.Logf("2000 decisions on the new replica: %d denied, %d local, %d key syncs; %v", denied.Load(), local.Load(), syncs, c.Stats().Decisions)
		if denied.Load() > 0 {
			t.Errorf("%d requests of keys far below their limit denied", denied.Load())
		}
		if local.Load() < 1400 {
			t.Errorf("%d of 2 000 decided locally, want 3 of each key's 4 at least (1 500) but a few", local.Load())
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
