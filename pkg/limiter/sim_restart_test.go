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
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// TestSimRestartOneReplica: a deployment of one replica, 100 a minute,
// replaced in the middle of a minute (a rolling update). The old replica
// holds the minute's whole static share of every key; it admitted 60 of
// key 0 from it. Ten seconds into the minute it stops, and a new one
// takes its place.
//
//   - Stopped gracefully, it pushes its share hits, releases what it
//     spent from, and leaves the registry (Store.Leave): the store then
//     counts no unreported share of it (SyncItem.Gone). The new replica
//     admits keys the old one never saw, and the 40 left of key 0.
//   - Killed (cut off from the store, so its last push never lands and it
//     never leaves), its share of every key stays reserved until the
//     minute ends: it may have admitted all of it. The new replica admits
//     none of a key in that minute, and all of it in the next.
//   - The same, the new replica started before the old one stops (a
//     surge): the new one's requests right after the old one left are
//     not denied while its copy of the registry is a heartbeat old; a
//     round that finds the key's budget held by unreported shares asks
//     for a heartbeat at once, which names the old replica gone.
//   - Stopped, but its last push failed (the store answers its Leave): it
//     does not leave, so the store goes on counting its share, as for a
//     replica killed.
func TestSimRestartOneReplica(t *testing.T) {
	for _, how := range []string{"graceful", "surge", "killed", "push failed"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { simRestartOne(t, how) })
		})
	}
}

// failingPush fails the rate syncs of one replica once switched on.
type failingPush struct {
	limiter.Store
	replica string
	on      atomic.Bool
}

func (f *failingPush) Sync(ctx context.Context, r string, it []limiter.SyncItem, out []limiter.SyncResult) error {
	if r == f.replica && f.on.Load() {
		return fmt.Errorf("push failed: %w", limiter.ErrStoreUnavailable)
	}
	return f.Store.Sync(ctx, r, it, out)
}

func simRestartOne(t *testing.T, how string) {
	faulty := limitertest.NewFaultyStore(memstore.New(nil))
	store := &failingPush{Store: faulty, replica: "old"}
	rule := perMinute(100)
	key := func(i int) []byte { return []byte(fmt.Sprintf("user=%d|%s", i, rule.Fingerprint())) }
	admit := func(l *limiter.Limiter, k []byte, n int) (int, map[limiter.Mode]int) {
		out := make([]limiter.Result, 1)
		modes := map[limiter.Mode]int{}
		got := 0
		for range n {
			ok, err := l.Decide([]limiter.Request{{Key: k, Rule: rule}}, out)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				got++
			}
			modes[out[0].Mode]++
		}
		return got, modes
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	old := limiter.New(limiter.WithStore(store, "old"))
	wg.Go(func() { old.Run(ctx) })
	// The first minute that begins a lease after it joined: it holds
	// the whole of it as its static share.
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 10*time.Second)))
	minute := time.Now().Truncate(time.Minute)
	if got, modes := admit(old, key(0), 60); got != 60 || modes[limiter.ModeLocal] != 60 {
		t.Fatalf("old replica: %d of 60 admitted, modes %v; want all from its share", got, modes)
	}
	switch how {
	case "killed":
		faulty.Partition("old", true)
	case "push failed":
		store.on.Store(true)
	}
	var l []*limiter.Limiter
	if how == "surge" {
		l = runReplicas(t, store, "new")
		time.Sleep(2 * time.Second)
		if got, _ := admit(l[0], key(2), 1); got != 1 {
			t.Errorf("new replica beside the old one: key 2 denied; want it admitted once the old one releases its share")
		}
	}
	cancel()
	wg.Wait()
	if how != "surge" {
		l = runReplicas(t, store, "new")
		time.Sleep(2 * time.Second)
	}
	if !time.Now().Truncate(time.Minute).Equal(minute) {
		t.Fatal("the restart crossed the minute")
	}
	want0, want1 := 40, 100
	if how == "killed" || how == "push failed" {
		want0, want1 = 0, 0
	}
	got0, modes0 := admit(l[0], key(0), 100)
	got1, modes1 := admit(l[0], key(1), 101)
	if got0 != want0 || got1 != want1 {
		t.Errorf("new replica, in the minute of the restart: key 0 %d admitted (modes %v), key 1 %d (modes %v); want %d and %d",
			got0, modes0, got1, modes1, want0, want1)
	}
	time.Sleep(time.Until(minute.Add(time.Minute + time.Second)))
	if got, modes := admit(l[0], key(1), 101); got != 100 {
		t.Errorf("new replica, the minute after: key 1 %d admitted (modes %v); want 100", got, modes)
	}
}

// failingBeats fails the heartbeats of one replica.
type failingBeats struct {
	limiter.Store
	replica string
}

func (f *failingBeats) Heartbeat(ctx context.Context, r string, lease time.Duration) (limiter.Membership, error) {
	if r == f.replica {
		return limiter.Membership{}, fmt.Errorf("heartbeat failed: %w", limiter.ErrStoreUnavailable)
	}
	return f.Store.Heartbeat(ctx, r, lease)
}

// TestSimNoRegistryNoShares: replica a, alone, holds the whole minute as
// its static share and admitted 60 of key 0 from it, unreported. Replica
// b starts, and its heartbeats fail while its rounds reach the store: it
// has no copy of the registry to count a's share by. Its rounds must not
// be granted what a's share holds: the minute admits at most 100.
func TestSimNoRegistryNoShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &failingBeats{Store: memstore.New(nil), replica: "b"}
		rule := perMinute(100)
		key := []byte("user=0|" + rule.Fingerprint())
		ls := runReplicas(t, store, "a")
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 10*time.Second)))
		minute := time.Now().Truncate(time.Minute)
		out := make([]limiter.Result, 1)
		admit := func(l *limiter.Limiter, n int) int {
			got := 0
			for range n {
				if ok, _ := l.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); ok {
					got++
				}
				time.Sleep(10 * time.Millisecond)
			}
			return got
		}
		got := admit(ls[0], 60)
		got += admit(runReplicas(t, store, "b")[0], 100)
		if !time.Now().Truncate(time.Minute).Equal(minute) {
			t.Fatal("the test crossed the minute")
		}
		if got > 100 {
			t.Errorf("the minute admitted %d of 100: b's rounds were granted a's unreported share", got)
		}
	})
}
