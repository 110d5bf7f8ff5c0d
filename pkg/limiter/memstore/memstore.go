// Package memstore is the in-process reference implementation of
// limiter.Store: the executable specification of the Redis scripts. It
// applies limiter.KeyRecord.Sync and limiter.ConcRecord.Sync under one
// mutex, keeps the replica registry, and forgets keys once they are fresh.
// It backs simulations and unit tests, and is the oracle of the Redis
// store's parity test.
//
// A Store is safe for concurrent use. Its clock is the store clock (Redis
// TIME for the real thing); give a fake one to run on virtual time.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// Store is the reference store. The zero value is not usable; call New.
type Store struct {
	clock    limiter.Clock
	mu       sync.Mutex
	keys     map[string]*keyEntry
	slots    map[string]*limiter.ConcRecord
	replicas map[string]int64 // replica → lease expiry, µs
}

type keyEntry struct {
	rec     limiter.KeyRecord
	expires int64
}

// New returns an empty store reading time from clock (nil: the real one).
func New(clock limiter.Clock) *Store {
	if clock == nil {
		clock = realClock{}
	}
	return &Store{
		clock:    clock,
		keys:     make(map[string]*keyEntry),
		slots:    make(map[string]*limiter.ConcRecord),
		replicas: make(map[string]int64),
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (s *Store) now() int64 { return s.clock.Now().UnixMicro() }

// Sync applies every item in one critical section, as one Redis round trip.
func (s *Store) Sync(ctx context.Context, replica string, items []limiter.SyncItem, out []limiter.SyncResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for i := range items {
		it := &items[i]
		e := s.keys[it.Key]
		if e == nil || e.expires <= now {
			e = &keyEntry{}
			s.keys[it.Key] = e
		}
		out[i] = e.rec.Sync(replica, it, now)
		e.expires = max(e.rec.ExpiresAt(it.Algorithm, it.Windows), now+1)
	}
	return nil
}

// SyncSlots applies concurrency items in one critical section.
func (s *Store) SyncSlots(ctx context.Context, replica string, items []limiter.SlotItem, out []limiter.SlotResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for i := range items {
		r := s.slots[items[i].Key]
		if r == nil {
			r = &limiter.ConcRecord{}
			s.slots[items[i].Key] = r
		}
		out[i] = r.Sync(replica, &items[i], now)
	}
	return nil
}

// Heartbeat renews replica's lease and counts live replicas.
func (s *Store) Heartbeat(ctx context.Context, replica string, lease time.Duration) (limiter.Membership, error) {
	if err := ctx.Err(); err != nil {
		return limiter.Membership{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.replicas[replica] = now + int64(lease/time.Microsecond)
	n := 0
	for id, exp := range s.replicas {
		if exp <= now {
			delete(s.replicas, id)
			continue
		}
		n++
	}
	s.sweep(now)
	return limiter.Membership{Replicas: max(n, 1), Now: now}, nil
}

// sweep forgets keys whose windows are fresh and reservations expired.
func (s *Store) sweep(now int64) {
	for k, e := range s.keys {
		if e.expires <= now {
			delete(s.keys, k)
		}
	}
}

// Release drops replica's reservations and slots on the given keys.
func (s *Store) Release(ctx context.Context, replica string, keys, slotKeys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if e := s.keys[k]; e != nil {
			delete(e.rec.Reservations, replica)
		}
	}
	for _, k := range slotKeys {
		if r := s.slots[k]; r != nil {
			delete(r.Replicas, replica)
		}
	}
	return nil
}

// Leave removes replica from the registry.
func (s *Store) Leave(ctx context.Context, replica string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.replicas, replica)
	return nil
}

// Keys is the number of rate keys held (for tests of expiry).
func (s *Store) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}
