package limitertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// FaultyStore wraps a limiter.Store with faults switched on and off by the
// test: an outage (every call fails with an error wrapping
// limiter.ErrStoreUnavailable, as a store that cannot be reached does),
// per-replica partitions, and an added delay before every call, fixed or
// drawn for each call. A delay
// longer than the call's context fails it with the context's error. The
// zero FaultyStore is not usable; call NewFaultyStore. It is safe for
// concurrent use.
type FaultyStore struct {
	inner    limiter.Store
	down     atomic.Bool
	delay    atomic.Int64 // time.Duration
	draw     atomic.Pointer[func() time.Duration]
	calls    atomic.Int64
	failures atomic.Int64

	mu          sync.Mutex
	partitioned map[string]bool
}

var _ limiter.FeedWaiter = (*FaultyStore)(nil)
var _ limiter.Store = (*FaultyStore)(nil)

// NewFaultyStore wraps inner, with no fault switched on.
func NewFaultyStore(inner limiter.Store) *FaultyStore {
	return &FaultyStore{inner: inner, partitioned: make(map[string]bool)}
}

// SetDown switches the outage on or off.
func (f *FaultyStore) SetDown(down bool) { f.down.Store(down) }

// SetDelay adds d before every call (0: none).
func (f *FaultyStore) SetDelay(d time.Duration) { f.delay.Store(int64(d)) }

// SetDelays adds a delay drawn from draw before every call, on top of
// SetDelay's (nil: none). draw is called concurrently.
func (f *FaultyStore) SetDelays(draw func() time.Duration) {
	if draw == nil {
		f.draw.Store(nil)
		return
	}
	f.draw.Store(&draw)
}

// Partition cuts replica off the store (its calls fail as in an outage)
// or, with cut false, heals it.
func (f *FaultyStore) Partition(replica string, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cut {
		f.partitioned[replica] = true
	} else {
		delete(f.partitioned, replica)
	}
}

// Calls is the number of calls made, failed ones included.
func (f *FaultyStore) Calls() int64 { return f.calls.Load() }

// Failures is the number of calls failed by an injected fault.
func (f *FaultyStore) Failures() int64 { return f.failures.Load() }

// before applies the faults to one call of replica's.
func (f *FaultyStore) before(ctx context.Context, op, replica string) error {
	f.calls.Add(1)
	d := time.Duration(f.delay.Load())
	if draw := f.draw.Load(); draw != nil {
		d += (*draw)()
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.failures.Add(1)
			return fmt.Errorf("faulty store: %s: %w: %w", op, limiter.ErrStoreUnavailable, ctx.Err())
		}
	}
	f.mu.Lock()
	cut := f.partitioned[replica]
	f.mu.Unlock()
	if f.down.Load() || cut {
		f.failures.Add(1)
		return fmt.Errorf("faulty store: %s: %w", op, limiter.ErrStoreUnavailable)
	}
	return nil
}

// Sync forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Sync(ctx context.Context, replica string, items []limiter.SyncItem, out []limiter.SyncResult) error {
	if err := f.before(ctx, "sync", replica); err != nil {
		return err
	}
	return f.inner.Sync(ctx, replica, items, out)
}

// SyncSlots forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) SyncSlots(ctx context.Context, replica string, items []limiter.SlotItem, out []limiter.SlotResult) error {
	if err := f.before(ctx, "sync slots", replica); err != nil {
		return err
	}
	return f.inner.SyncSlots(ctx, replica, items, out)
}

// Heartbeat forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Heartbeat(ctx context.Context, replica string, lease time.Duration) (limiter.Membership, error) {
	if err := f.before(ctx, "heartbeat", replica); err != nil {
		return limiter.Membership{}, err
	}
	return f.inner.Heartbeat(ctx, replica, lease)
}

// Declare forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Declare(ctx context.Context, replica string, d limiter.Declaration) error {
	if err := f.before(ctx, "declare", replica); err != nil {
		return err
	}
	return f.inner.Declare(ctx, replica, d)
}

// Release forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Release(ctx context.Context, replica string, keys, slotKeys []string) error {
	if err := f.before(ctx, "release", replica); err != nil {
		return err
	}
	return f.inner.Release(ctx, replica, keys, slotKeys)
}

// Leave forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Leave(ctx context.Context, replica string) error {
	if err := f.before(ctx, "leave", replica); err != nil {
		return err
	}
	return f.inner.Leave(ctx, replica)
}

// Contention forwards to the wrapped store unless a fault fails it.
func (f *FaultyStore) Contention(ctx context.Context, replica, cursor string) ([]limiter.Contended, string, error) {
	if err := f.before(ctx, "contention", replica); err != nil {
		return nil, cursor, err
	}
	return f.inner.Contention(ctx, replica, cursor)
}

// WaitContention forwards to the wrapped store's wait on the feed unless
// a fault fails it; a wrapped store that cannot wait is polled once the
// wait has passed.
func (f *FaultyStore) WaitContention(ctx context.Context, replica, cursor string, wait time.Duration) ([]limiter.Contended, string, error) {
	if err := f.before(ctx, "contention", replica); err != nil {
		return nil, cursor, err
	}
	if fw, ok := f.inner.(limiter.FeedWaiter); ok {
		return fw.WaitContention(ctx, replica, cursor, wait)
	}
	if cursor != "" {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, cursor, ctx.Err()
		}
	}
	return f.inner.Contention(ctx, replica, cursor)
}
