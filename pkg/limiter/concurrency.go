package limiter

import (
	"sync"
	"sync/atomic"
)

// slots counts the holders of one concurrency key.
type slots struct {
	held atomic.Int64
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
	s, _ := c.keys.LoadOrStore(key, new(slots))
	return s.(*slots)
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

// Acquire takes one of max slots of key. It returns nil and false when all
// max are held; max zero means no cap (a slot is still returned, so callers
// release uniformly).
func (l *Limiter) Acquire(key string, max uint64) (*Slot, bool) {
	s := l.conc.get(key)
	if n := s.held.Add(1); max > 0 && uint64(n) > max {
		s.held.Add(-1)
		return nil, false
	}
	return &Slot{s: s}, true
}

// InUse reports how many slots of key are held.
func (l *Limiter) InUse(key string) uint64 {
	if s, ok := l.conc.keys.Load(key); ok {
		return uint64(max(s.(*slots).held.Load(), 0))
	}
	return 0
}
