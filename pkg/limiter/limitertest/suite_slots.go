package limitertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// The suite's cases for concurrency slots, the replica registry and the
// store's behaviour under concurrent replicas and canceled calls.

func testSlots(t *testing.T, st limiter.Store) {
	it := func(held, want uint64) limiter.SlotItem {
		return limiter.SlotItem{Key: "k", Max: 3, Held: held, Want: want, Lease: time.Minute}
	}
	a := slots1(t, st, "a", it(2, 0))
	expect(t, "a's slots", a.Granted, 2)
	expect(t, "a's others", a.Others, 0)
	if a.Now <= 0 {
		t.Fatalf("Now = %d", a.Now)
	}
	b := slots1(t, st, "b", it(0, 5))
	expect(t, "b's slots up to the cap", b.Granted, 1)
	expect(t, "b's others", b.Others, 2)
	c := slots1(t, st, "c", it(1, 0))
	expect(t, "c's held slot, over the cap", c.Granted, 1)
	expect(t, "c's others", c.Others, 3)
	expect(t, "a's slots when it holds none", slots1(t, st, "a", it(0, 0)).Granted, 0)
	b = slots1(t, st, "b", it(1, 5))
	expect(t, "b's slots after a left", b.Granted, 2)
	expect(t, "b's others after a left", b.Others, 1)
}

func testSlotExpiryAndRelease(t *testing.T, st limiter.Store) {
	a := limiter.SlotItem{Key: "k", Max: 3, Held: 3, Lease: 150 * time.Millisecond}
	ra := slots1(t, st, "a", a)
	expect(t, "a's slots", ra.Granted, 3)
	b := limiter.SlotItem{Key: "k", Max: 3, Want: 3, Lease: time.Minute}
	rb := slots1(t, st, "b", b)
	expect(t, "b's slots while a's lease runs", rb.Granted, 0)
	sleepPast(rb.Now, ra.Now+int64(a.Lease/time.Microsecond))
	expect(t, "b's slots after a's lease", slots1(t, st, "b", b).Granted, 3)
	if err := st.Release(context.Background(), "b", nil, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	a.Lease = time.Minute
	r := slots1(t, st, "a", a)
	expect(t, "a's slots after b's release", r.Granted, 3)
	expect(t, "a's others after b's release", r.Others, 0)
}

func testHeartbeat(t *testing.T, st limiter.Store) {
	expect(t, "replicas", heartbeat(t, st, "a", time.Minute).Replicas, 1)
	expect(t, "replicas", heartbeat(t, st, "b", time.Minute).Replicas, 2)
	const lease = 150 * time.Millisecond
	c := heartbeat(t, st, "c", lease)
	expect(t, "replicas", c.Replicas, 3)
	again := heartbeat(t, st, "a", time.Minute)
	expect(t, "replicas again", again.Replicas, 3)
	sleepPast(again.Now, c.Now+int64(lease/time.Microsecond))
	expect(t, "replicas after c's lease", heartbeat(t, st, "a", time.Minute).Replicas, 2)
	if err := st.Leave(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	expect(t, "replicas after b left", heartbeat(t, st, "a", time.Minute).Replicas, 1)
	if err := st.Leave(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, "replicas when none is live", heartbeat(t, st, "d", 0).Replicas, 1)
}

// testConcurrentReplicas: replicas that push only hits their credit
// covered never see usage + reservations above the limit, and together
// admit at most the limit.
func testConcurrentReplicas(t *testing.T, st limiter.Store) {
	const limit, replicas, rounds = 100, 4, 40
	ws := fixed(limit, time.Hour)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted = map[int64]uint64{} // per epoch
	)
	for r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replica := fmt.Sprint("r", r)
			var credit uint64
			var now int64
			for i := range rounds {
				it := item("k", ws, uint64(1+(i*7+r)%30))
				it.Replicas = replicas
				spend := credit * uint64(i%3) / 2 // spend none, half or all
				if spend > 0 {
					it.Hits = []limiter.Hit{{At: now, N: int64(spend)}}
				}
				it.Unused = credit - spend
				out := make([]limiter.SyncResult, 1)
				if err := st.Sync(context.Background(), replica, []limiter.SyncItem{it}, out); err != nil {
					t.Error(err)
					return
				}
				res := out[0]
				w := res.Windows[0]
				mu.Lock()
				admitted[now/int64(time.Hour/time.Microsecond)] += spend
				mu.Unlock()
				if w.Cur+res.Credit+res.Others > limit {
					t.Errorf("%s round %d: usage %d + credit %d + others %d > %d", replica, i, w.Cur, res.Credit, res.Others, limit)
					return
				}
				credit, now = res.Credit, res.Now
			}
		}()
	}
	wg.Wait()
	for e, n := range admitted {
		if n > limit {
			t.Errorf("window %d admitted %d > %d", e, n, limit)
		}
	}
}

func testCanceledContext(t *testing.T, st limiter.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(ctx, "a", []limiter.SyncItem{item("k", fixed(10, time.Hour), 1)}, out); err == nil {
		t.Error("Sync with a canceled context: no error")
	}
	sout := make([]limiter.SlotResult, 1)
	if err := st.SyncSlots(ctx, "a", []limiter.SlotItem{{Key: "k", Max: 1}}, sout); err == nil {
		t.Error("SyncSlots with a canceled context: no error")
	}
	if _, err := st.Heartbeat(ctx, "a", time.Second); err == nil {
		t.Error("Heartbeat with a canceled context: no error")
	}
}
