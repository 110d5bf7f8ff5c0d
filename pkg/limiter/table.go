package limiter

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const shardCount = 256

// table maps keys to their state. It is sharded so no lock is shared by all
// keys: a lookup of a known key takes one shard's read lock and allocates
// nothing.
type table struct {
	seed   maphash.Seed
	shards [shardCount]shard
	size   atomic.Int64
}

type shard struct {
	mu sync.RWMutex
	m  map[string]*entry
	_  [40]byte // keep neighbouring shards' locks off one cache line
}

// entry is one key's state. mu guards every field but fresh, which the
// sweeper reads without it.
type entry struct {
	mu       sync.Mutex
	key      string
	rule     *Rule
	counters []WindowState
	dead     bool                        // removed from the table; look the key up again
	fresh    atomic.Int64                // ns instant from which the state equals a new key's
	cs       atomic.Pointer[creditState] // set for rules shared through a store
}

func newTable() *table {
	t := &table{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*entry)
	}
	return t
}

func (t *table) shardOf(key []byte) *shard {
	return &t.shards[maphash.Bytes(t.seed, key)%shardCount]
}

// lock returns key's entry, created if missing, with its mutex held and
// one counter per window of rule.
func (t *table) lock(key []byte, rule *Rule) *entry {
	n := len(rule.Windows)
	s := t.shardOf(key)
	for {
		s.mu.RLock()
		e := s.m[string(key)]
		s.mu.RUnlock()
		if e == nil {
			e = t.insert(s, key, n)
		}
		e.mu.Lock()
		if !e.dead {
			if len(e.counters) != n {
				e.counters = make([]WindowState, n)
			}
			e.rule = rule
			return e
		}
		e.mu.Unlock()
	}
}

// get returns key's entry without locking it, nil if absent.
func (t *table) get(key []byte) *entry {
	s := t.shardOf(key)
	s.mu.RLock()
	e := s.m[string(key)]
	s.mu.RUnlock()
	return e
}

// eachCredit calls fn for every key of a shared rule. fn must not take
// shard locks.
func (t *table) eachCredit(fn func(e *entry, cs *creditState)) {
	var batch []*entry
	for i := range t.shards {
		s := &t.shards[i]
		batch = batch[:0]
		s.mu.RLock()
		for _, e := range s.m {
			if e.cs.Load() != nil {
				batch = append(batch, e)
			}
		}
		s.mu.RUnlock()
		for _, e := range batch {
			fn(e, e.cs.Load())
		}
	}
}

func (t *table) insert(s *shard, key []byte, n int) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[string(key)]; e != nil {
		return e
	}
	e := &entry{key: string(key), counters: make([]WindowState, n)}
	s.m[e.key] = e
	t.size.Add(1)
	return e
}

// sweep removes the keys whose state is fresh at now and returns how many
// it removed.
func (t *table) sweep(now int64) int {
	removed := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.fresh.Load() > now {
				continue
			}
			e.mu.Lock()
			if e.fresh.Load() <= now {
				e.dead = true
				delete(s.m, k)
				removed++
			}
			e.mu.Unlock()
		}
		s.mu.Unlock()
	}
	t.size.Add(int64(-removed))
	return removed
}

// each calls fn for every key with the given prefix, with its entry locked.
func (t *table) each(prefix string, fn func(e *entry)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for k, e := range s.m {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				e.mu.Lock()
				fn(e)
				e.mu.Unlock()
			}
		}
		s.mu.RUnlock()
	}
}
