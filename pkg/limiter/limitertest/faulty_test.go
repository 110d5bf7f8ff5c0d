package limitertest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// A FaultyStore with no fault on is a conforming store.
func TestFaultyStoreSuite(t *testing.T) {
	limitertest.StoreSuite(t, func(*testing.T) limiter.Store {
		return limitertest.NewFaultyStore(memstore.New(nil))
	})
}

func TestFaultyStoreFaults(t *testing.T) {
	f := limitertest.NewFaultyStore(memstore.New(nil))
	ctx := context.Background()
	items := []limiter.SyncItem{{Key: "k", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 1, Lease: time.Second}}
	out := make([]limiter.SyncResult, 1)
	calls := func() []error {
		_, hbErr := f.Heartbeat(ctx, "a", time.Second)
		return []error{
			f.Sync(ctx, "a", items, out),
			f.SyncSlots(ctx, "a", []limiter.SlotItem{{Key: "k", Max: 1}}, make([]limiter.SlotResult, 1)),
			hbErr,
			f.Release(ctx, "a", []string{"k"}, nil),
			f.Leave(ctx, "a"),
		}
	}
	unavailable := func(what string, errs []error) {
		t.Helper()
		for i, err := range errs {
			if !errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Errorf("%s: call %d: %v, want ErrStoreUnavailable", what, i, err)
			}
		}
	}
	for i, err := range calls() {
		if err != nil {
			t.Fatalf("healthy call %d: %v", i, err)
		}
	}
	f.SetDown(true)
	unavailable("down", calls())
	f.SetDown(false)
	f.Partition("a", true)
	unavailable("partitioned", calls())
	if err := f.Sync(ctx, "b", items, out); err != nil {
		t.Errorf("another replica during a's partition: %v", err)
	}
	f.Partition("a", false)
	if err := f.Sync(ctx, "a", items, out); err != nil {
		t.Errorf("healed: %v", err)
	}
	if f.Failures() != 10 || f.Calls() != 17 {
		t.Errorf("failures %d, calls %d; want 10, 17", f.Failures(), f.Calls())
	}

	f.SetDelay(50 * time.Millisecond)
	start := time.Now()
	if err := f.Sync(ctx, "a", items, out); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("delayed call took %v", d)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if err := f.Sync(short, "a", items, out); !errors.Is(err, limiter.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call past its deadline: %v", err)
	}
	f.SetDelay(0)
	f.SetDelays(func() time.Duration { return 30 * time.Millisecond })
	start = time.Now()
	if err := f.Sync(ctx, "a", items, out); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("call with a drawn delay took %v", d)
	}
	f.SetDelays(nil)
}

// Switching faults while calls run is safe (run with -race).
func TestFaultyStoreConcurrent(t *testing.T) {
	f := limitertest.NewFaultyStore(memstore.New(nil))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				switch j % 4 {
				case 0:
					f.SetDown(j%8 == 0)
				case 1:
					f.Partition("a", i%2 == 0)
				case 2:
					f.SetDelay(time.Duration(j%3) * time.Microsecond)
				}
				_, _ = f.Heartbeat(context.Background(), "a", time.Second)
			}
		}()
	}
	wg.Wait()
	if f.Calls() != 800 {
		t.Errorf("calls = %d, want 800", f.Calls())
	}
}
