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
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	replicas map[string]limiter.Member
	since    int64 // the registry lists every replica whose lease ended after since
	feed     []feedEntry
	seq      uint64        // of the last feed entry
	fed      chan struct{} // closed and replaced at each publication
}

// feedEntry is one published contention.
type feedEntry struct {
	seq uint64
	c   limiter.Contended
}

// Registry and feed bounds: a replica is remembered for retain after its
// lease ends, up to maxMembers; the feed keeps the last maxFeed entries.
const (
	retain     = 25 * time.Hour
	maxMembers = 1024
	maxFeed    = 1024
)

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
		replicas: make(map[string]limiter.Member),
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
		if out[i].Contended {
			s.publish(limiter.Contended{Key: it.Key, Algorithm: it.Algorithm, Windows: it.Windows, Replica: replica, At: out[i].Now,
				Shrink: shrinkTo(it, out[i])})
		}
		if out[i].Filled {
			s.publish(limiter.Contended{Key: it.Key, Algorithm: it.Algorithm, Windows: it.Windows, Replica: replica, At: out[i].Now, Full: true})
		}
	}
	return nil
}

func (s *Store) publish(c limiter.Contended) {
	if s.fed != nil {
		close(s.fed)
		s.fed = nil
	}
	s.seq++
	s.feed = append(s.feed, feedEntry{seq: s.seq, c: c})
	if len(s.feed) > maxFeed {
		s.feed = slices.Delete(s.feed, 0, len(s.feed)-maxFeed)
	}
}

// Contention returns the keys other replicas published after cursor, a
// sequence number; the empty cursor starts from now.
func (s *Store) Contention(ctx context.Context, replica, cursor string) ([]limiter.Contended, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, cursor, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contention(replica, cursor)
}

// WaitContention is Contention that waits, up to wait, for a publication
// after cursor (limiter.FeedWaiter).
func (s *Store) WaitContention(ctx context.Context, replica, cursor string, wait time.Duration) ([]limiter.Contended, string, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return nil, cursor, err
		}
		s.mu.Lock()
		out, next, err := s.contention(replica, cursor)
		if err != nil || cursor == "" || next != cursor {
			s.mu.Unlock()
			return out, next, err
		}
		if s.fed == nil {
			s.fed = make(chan struct{})
		}
		fed := s.fed
		s.mu.Unlock()
		select {
		case <-fed:
		case <-t.C:
			return nil, cursor, nil
		case <-ctx.Done():
			return nil, cursor, ctx.Err()
		}
	}
}

// contention reads the feed after cursor. s.mu must be held.
func (s *Store) contention(replica, cursor string) ([]limiter.Contended, string, error) {
	next := strconv.FormatUint(s.seq, 10)
	if cursor == "" {
		return nil, next, nil
	}
	after, err := strconv.ParseUint(cursor, 10, 64)
	if err != nil {
		return nil, cursor, fmt.Errorf("contention cursor %q: %w", cursor, err)
	}
	var out []limiter.Contended
	for _, e := range s.feed {
		if e.seq > after && e.c.Replica != replica {
			out = append(out, e.c)
		}
	}
	return out, next, nil
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
	m, ok := s.replicas[replica]
	if !ok || m.Expires <= now {
		m.Shrink = limiter.Declaration{} // a shrink is of the incarnation that declared it
		if ok {
			// Back after its lease ended: the earlier incarnation stays
			// listed, so the epochs it held shares of keep their count.
			s.replicas[limiter.PastIncarnation(replica, m.Joined)] = m
		}
		m.Joined, m.Left = now, false // new, or back after its lease ended
	}
	m.Expires = now + int64(lease/time.Microsecond)
	m.Ahead = true         // this version counts a sliding window's and a token bucket's shares
	m.DeclaresAhead = true // and shrinks them by its declared shrink
	s.replicas[replica] = m
	s.forget(now)
	out := limiter.Membership{Now: now, Since: s.since, Joined: m.Joined, Members: make([]limiter.Member, 0, len(s.replicas))}
	for id, m := range s.replicas {
		if m.Expires > now {
			out.Replicas++
		}
		m.Caller = limiter.IncarnationOf(id, replica)
		m.Name, _, _ = strings.Cut(id, "\x00")
		out.Members = append(out.Members, m)
	}
	out.Replicas = max(out.Replicas, 1)
	s.sweep(now)
	return out, nil
}

// forget drops the replicas whose lease ended more than retain ago, and
// the oldest ones past maxMembers, moving since to the latest lease end
// dropped.
func (s *Store) forget(now int64) {
	for len(s.replicas) > 0 {
		var oldest string
		for id, m := range s.replicas {
			if oldest == "" || m.Expires < s.replicas[oldest].Expires {
				oldest = id
			}
		}
		m := s.replicas[oldest]
		if m.Expires > now-int64(retain/time.Microsecond) && len(s.replicas) <= maxMembers {
			return
		}
		s.since = max(s.since, m.Expires)
		delete(s.replicas, oldest)
	}
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

// Leave ends replica's lease now, marking it as gone (Member.Left); the
// registry remembers it (forget). A replica whose lease has ended is left
// as it is: it is gone already, and may have missed pushes.
func (s *Store) Leave(ctx context.Context, replica string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.replicas[replica]; ok && m.Expires > s.now() {
		m.Expires, m.Left = s.now(), true
		s.replicas[replica] = m
	}
	return nil
}

// Declare records a live replica's shrink of its static shares in the
// registry, or withdraws it (the zero Declaration); it fails for a
// replica the registry does not list as live.
func (s *Store) Declare(ctx context.Context, replica string, d limiter.Declaration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.replicas[replica]
	if !ok || m.Expires <= s.now() {
		return fmt.Errorf("memstore: declare: replica %q not live in the registry", replica)
	}
	if d.N <= 0 {
		d = limiter.Declaration{}
	}
	m.Shrink = d
	s.replicas[replica] = m
	return nil
}

// Keys is the number of rate keys held (for tests of expiry).
func (s *Store) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

var _ limiter.FeedWaiter = (*Store)(nil)

// shrinkTo is what a contended item's entry in the feed asks the
// sharers: to shrink to a share at the caller's live count, or (0) to
// release their shares.
func shrinkTo(it *limiter.SyncItem, r limiter.SyncResult) int {
	if r.Shrink {
		return max(it.Replicas, 1)
	}
	return 0
}
