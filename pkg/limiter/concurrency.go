package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// slotLease is how long a replica's published slots stay counted without a
// renewal; a crashed replica's slots come back after it.
const slotLease = 5 * time.Second

// slotRenew is how often a key with slots is republished.
const slotRenew = time.Second

// slots counts the holders of one concurrency key on this replica. With a
// store, granted is the share of the cluster-wide cap this replica may
// hold (held + reserved), published under a lease; without one, the cap
// is enforced locally.
type slots struct {
	key     string
	held    atomic.Int64
	granted atomic.Int64 // -1 until the first sync
	max     atomic.Uint64
	lastUse atomic.Int64

	sem       chan struct{} // one store call at a time per key
	published atomic.Int64  // local ns of the last publication
}

// concurrency caps the number of holders per key. Keys are few (one per
// target), so a sync.Map is enough.
type concurrency struct {
	keys sync.Map // string → *slots
}

func (c *concurrency) get(key string) *slots {
	if s, ok := c.keys.Load(key); ok {
		return s.(*slots)
	}
	s := &slots{key: key, sem: make(chan struct{}, 1)}
	s.granted.Store(-1)
	actual, _ := c.keys.LoadOrStore(key, s)
	return actual.(*slots)
}

// Slot is one held unit of a concurrency cap. Release it exactly when the
// work ends; Release is idempotent and safe for concurrent use.
type Slot struct {
	s        *slots
	released atomic.Bool
}

// Release gives the slot back. Calls after the first do nothing.
func (s *Slot) Release() {
	if s != nil && s.released.CompareAndSwap(false, true) {
		s.s.held.Add(-1)
	}
}

// Acquire takes one of max slots of key, cluster-wide when a store is
// configured. It returns nil and false when all max are held; max zero
// means no cap (a slot is still returned, so callers release uniformly).
// With a store, a replica without a spare slot asks the store, waiting at
// most the default StoreTimeout; an unreachable store leaves each replica
// ⌈max/N⌉.
func (l *Limiter) Acquire(key string, max uint64) (*Slot, bool) {
	s := l.conc.get(key)
	s.max.Store(max)
	s.lastUse.Store(l.now())
	if max == 0 {
		s.held.Add(1)
		return &Slot{s: s}, true
	}
	if l.eng == nil {
		return s.take(func() int64 { return int64(max) })
	}
	return l.eng.acquire(s, max)
}

// acquire takes one of max slots of s cluster-wide: from this replica's
// grant, else by asking the store for one more.
func (e *engine) acquire(s *slots, max uint64) (*Slot, bool) {
	if e.degraded(&Rule{}, e.now()) {
		// Unreachable: each replica holds ⌈max/N⌉, also of a key it never
		// had a grant for or had handed back.
		n := uint64(e.replicas.Load())
		return s.take(func() int64 { return int64((max + n - 1) / n) })
	}
	if slot, ok := s.take(s.granted.Load); ok {
		return slot, true
	}
	return e.acquireShared(s)
}

// take holds one slot if, counting it, no more than limit() are held. The
// limit is read after the count, so a publication that lowers it and then
// reads the count sees every slot that can stay held.
func (s *slots) take(limit func() int64) (*Slot, bool) {
	if n := s.held.Add(1); n > limit() {
		s.held.Add(-1)
		return nil, false
	}
	return &Slot{s: s}, true
}

// acquireShared asks the store for one more slot, bounded by the default
// StoreTimeout, then tries again.
func (e *engine) acquireShared(s *slots) (*Slot, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), Tuning{}.storeTimeout())
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return s.take(s.granted.Load)
	}
	defer func() { <-s.sem }()
	if slot, ok := s.take(s.granted.Load); ok {
		return slot, true // another caller's round brought a slot
	}
	if err := e.publishSlots(ctx, []*slots{s}, 1, false); err != nil {
		e.log.Debug("asking for a slot failed", "key", s.key, "err", err)
	}
	return s.take(s.granted.Load)
}

// publishSlots publishes the given keys' claims plus want spare slots in
// one store call and installs the grants. The caller holds each key's sem.
func (e *engine) publishSlots(ctx context.Context, keys []*slots, want uint64, handBack bool) error {
	items := make([]SlotItem, len(keys))
	for i, s := range keys {
		items[i] = SlotItem{Key: s.key, Max: s.max.Load(), Held: uint64(s.claim(handBack)), Want: want, Lease: slotLease}
	}
	out := make([]SlotResult, len(items))
	now := e.now()
	start := time.Now()
	err := e.store.SyncSlots(ctx, e.replica, items, out)
	e.observe(ctx, callSlots, start, err)
	if err != nil {
		return err
	}
	e.answered(e.now())
	for i, s := range keys {
		s.granted.Store(int64(out[i].Granted))
		s.published.Store(now)
	}
	return nil
}

// claim is the most slots this replica can hold until the store answers:
// its grant, since every take checks the grant after counting itself. To
// hand spare slots back, the grant is first lowered to what is held; a take
// that passed the old grant meanwhile is seen in the count read after.
// A count also includes takes about to fail and undo, so the claim never
// exceeds the old grant: no holder can.
func (s *slots) claim(handBack bool) int64 {
	old := max(s.granted.Load(), 0)
	if !handBack {
		return old
	}
	s.granted.Store(min(old, max(s.held.Load(), 0)))
	return min(max(s.granted.Load(), s.held.Load()), old)
}

// slotRound renews the leases of keys with slots and hands idle spare
// slots back; runUpkeep calls it every tick.
func (e *engine) slotRound(ctx context.Context) {
	now := e.now()
	var due []*slots
	e.conc.keys.Range(func(_, v any) bool {
		s := v.(*slots)
		held, granted := s.held.Load(), s.granted.Load()
		idleSpare := granted > held && now-s.lastUse.Load() > int64(slotRenew)
		if (held > 0 || granted > 0) && (now-s.published.Load() >= int64(slotRenew) || idleSpare) {
			select {
			case s.sem <- struct{}{}: // busy keys are being published anyway
				due = append(due, s)
			default:
			}
		}
		return true
	})
	if len(due) == 0 {
		return
	}
	defer func() {
		for _, s := range due {
			<-s.sem
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	if err := e.publishSlots(rctx, due, 0, true); err != nil {
		e.storeFailed(err)
		if e.degraded(&Rule{}, now) { // unreachable: each replica keeps ⌈max/N⌉
			n := uint64(max(e.replicas.Load(), 1))
			for _, s := range due {
				s.granted.Store(int64((s.max.Load() + n - 1) / n))
			}
		}
	}
}

// slotKeys lists the concurrency keys this replica has published.
func (e *engine) slotKeys() []string {
	var keys []string
	e.conc.keys.Range(func(k, _ any) bool {
		keys = append(keys, k.(string))
		return true
	})
	return keys
}

// InUse reports how many slots of key this replica holds.
func (l *Limiter) InUse(key string) uint64 {
	if s, ok := l.conc.keys.Load(key); ok {
		return uint64(max(s.(*slots).held.Load(), 0))
	}
	return 0
}
