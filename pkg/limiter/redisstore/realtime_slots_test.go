package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// TestRealtimeConcurrencyCap: a cap of 5 holds across 3 replicas sharing a
// real redis-server, and a replica that dies holding every slot gives them
// back once its lease (5 s) runs out.
func TestRealtimeConcurrencyCap(t *testing.T) {
	rtSkipShort(t)
	t.Parallel()
	rd := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dying *limitertest.FaultyStore
	var lims []*limiter.Limiter
	var runs sync.WaitGroup
	defer runs.Wait()
	defer cancel()
	for i := range 3 {
		var st limiter.Store = redisstore.New(rd.Client(t), "slots")
		if i == 0 {
			dying = limitertest.NewFaultyStore(st)
			st = dying
		}
		l := limiter.New(limiter.WithStore(st, fmt.Sprint("replica-", i)))
		lims = append(lims, l)
		runs.Go(func() { l.Run(ctx) })
	}
	var inUse, peak, granted atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for g := range 15 {
		wg.Go(func() {
			l := lims[g%3]
			for time.Now().Before(end) {
				slot, ok := l.Acquire("model", 5)
				if !ok {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				granted.Add(1)
				n := inUse.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				inUse.Add(-1)
				slot.Release()
			}
		})
	}
	wg.Wait()
	t.Logf("peak %d of 5 in use across 3 replicas; %d slots granted in 3 s", peak.Load(), granted.Load())
	if peak.Load() > 5 {
		t.Fatalf("%d slots in use at once, cap 5", peak.Load())
	}
	if granted.Load() < 100 {
		t.Fatalf("only %d slots granted in 3 s", granted.Load())
	}
	// Replica 0 takes all five, then dies holding them.
	var held []*limiter.Slot
	rtPoll(t, 5*time.Second, "replica 0 holding all slots", func() bool {
		if s, ok := lims[0].Acquire("model", 5); ok {
			held = append(held, s)
		}
		return len(held) == 5
	})
	dying.SetDown(true)
	died := time.Now()
	if _, ok := lims[1].Acquire("model", 5); ok {
		t.Fatal("a slot was granted while a live lease holds all five")
	}
	rtPoll(t, 8*time.Second, "the dead replica's slots to come back", func() bool {
		s, ok := lims[1].Acquire("model", 5)
		if ok {
			s.Release()
		}
		return ok
	})
	back := time.Since(died)
	t.Logf("slots back %v after the replica died", back.Round(10*time.Millisecond))
	if back > 5*time.Second+time.Second {
		t.Errorf("slots came back after %v, want within lease + 1 s", back)
	}
}
