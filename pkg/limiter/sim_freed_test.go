package limiter_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// keyCounter counts one key's syncs by replica, and delays replica
// slow's rounds by delay; it waits on the feed as the store it wraps does.
type keyCounter struct {
	*memstore.Store
	key   string
	slow  string
	delay time.Duration
	mu    sync.Mutex
	seen  map[string]int
}

func (c *keyCounter) Sync(ctx context.Context, r string, it []limiter.SyncItem, out []limiter.SyncResult) error {
	if r == c.slow {
		time.Sleep(c.delay)
	}
	c.mu.Lock()
	for _, x := range it {
		if x.Key == c.key {
			c.seen[r]++
		}
	}
	c.mu.Unlock()
	return c.Store.Sync(ctx, r, it, out)
}

func (c *keyCounter) syncs(r string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[r]
}

// TestSimFreedNotPolled: a's request waits for the share b holds of a
// key of 4 a second (2 each, a's spent), and b's rounds take 60 ms. The
// store publishes the key contended; b releases its share, which the
// store publishes freed (SyncItem.Frees), and a syncs the key then: the
// request is admitted as soon as b's release lands, with three of a's key
// syncs, where a polled the store at every tick of the wait (heldRetry:
// 8 syncs).
func TestSimFreedNotPolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := perSecond(4)
		key := "k|" + rule.Fingerprint()
		st := &keyCounter{Store: memstore.New(nil), key: key, slow: "b", delay: 60 * time.Millisecond, seen: map[string]int{}}
		a, _ := startReplica(t, st, "a")
		startReplica(t, st, "b")
		ask := func() (bool, limiter.Result) {
			out := make([]limiter.Result, 1)
			ok, _ := a.Decide([]limiter.Request{{Key: []byte(key), Rule: rule}}, out)
			return ok, out[0]
		}
		// The shares begin with the first second that begins a lease
		// after the replicas joined.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(5*time.Second + 100*time.Millisecond)))
		for range 2 {
			if ok, res := ask(); !ok || res.Mode != limiter.ModeLocal {
				t.Fatalf("a's share: allowed %v (%v), want allowed locally", ok, res.Mode)
			}
		}
		before := st.syncs("a")
		start := time.Now()
		ok, res := ask()
		took, syncs := time.Since(start), st.syncs("a")-before
		t.Logf("a's third request: allowed %v (%v) after %v, %d key syncs of a; b synced the key %d times", ok, res.Mode, took, syncs, st.syncs("b"))
		if !ok {
			t.Fatalf("a's third request denied (%v) though b's share was unspent", res.Mode)
		}
		if took > 90*time.Millisecond {
			t.Errorf("admitted after %v, want within 90 ms: b's release read, made in 60 ms and announced", took)
		}
		if syncs > 3 {
			t.Errorf("%d syncs of the key by a while it waited, want at most 3", syncs)
		}
	})
}
