package limiter

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const shardCount = 256

// table maps keys to their state. It is sharded, and a lookup of a key
// already promoted to its shard's read map takes no lock at all: one hash
// of the key, one atomic pointer load, a map read by that hash and a
// comparison of the key, with no allocation.
//
// Each shard keeps an immutable read map, by hash, and under its mutex a
// dirty map of the keys added since, by key. Once the dirty keys have
// been looked up often enough (an eighth of the read map, and at least
// promoteMin times), the two are merged into a new read map, so a map copy
// costs each key a bounded number of copies however the table grows. A
// key whose hash another key already holds in the read map (a 64-bit
// collision) stays in the dirty map. A sweep writes new maps without the
// dead keys.
type table struct {
	seed   maphash.Seed
	shards [shardCount]shard
	size   atomic.Int64
	max    int64 // the most keys held; the bound is soft by the decisions in flight
}

// full reports whether the table holds its most keys.
func (t *table) full() bool { return t.size.Load() >= t.max }

// promoteMin is how many lookups of dirty keys a shard takes under its
// mutex before it merges them into the read map, however small it is.
const promoteMin = 32

type shard struct {
	read   atomic.Pointer[map[uint64]*entry] // by hash; immutable once published
	mu     sync.Mutex
	dirty  map[string]*entry // keys missing from read; guarded by mu
	misses int               // lookups served from dirty since the last merge
	_      [64]byte          // keep neighbouring shards off one cache line
}

// entry is one key's state. mu guards counters and rule; the atomics are
// read without it. dead is set under both the shard's and the entry's
// mutex.
type entry struct {
	// The lookup's fields first, on one cache line.
	key      string
	hash     uint64                      // of key, with the table's seed
	cs       atomic.Pointer[creditState] // set for rules shared through a store
	dead     atomic.Bool                 // swept from the table: look the key up again
	fresh    atomic.Int64                // ns instant from which the state equals a new key's
	mu       sync.Mutex
	rule     *Rule
	counters []WindowState
}

func newTable() *table {
	t := &table{seed: maphash.MakeSeed(), max: defaultMaxKeys}
	for i := range t.shards {
		s := &t.shards[i]
		s.read.Store(&map[uint64]*entry{})
		s.dirty = make(map[string]*entry)
	}
	return t
}

func (t *table) hash(key []byte) (uint64, *shard) {
	h := maphash.Bytes(t.seed, key)
	return h, &t.shards[h%shardCount]
}

// lock returns key's entry, created if missing, with its mutex held and
// one counter per window of rule, or none for a rule the credit engine
// decides (its state is the entry's creditState).
func (t *table) lock(key []byte, rule *Rule, shared bool) *entry {
	n := len(rule.Windows)
	if shared {
		n = 0
	}
	h, s := t.hash(key)
	for {
		e := s.lookup(h, key)
		if e == nil {
			e = t.insert(s, h, key, n)
		}
		e.mu.Lock()
		if !e.dead.Load() {
			if len(e.counters) != n {
				e.counters = nil
				if n > 0 {
					e.counters = make([]WindowState, n)
				}
			}
			e.rule = rule
			return e
		}
		e.mu.Unlock()
	}
}

// get returns key's entry without locking it, nil if absent.
func (t *table) get(key []byte) *entry {
	h, s := t.hash(key)
	return s.lookup(h, key)
}

// getString is get of a key held as a string, with no copy of it.
func (t *table) getString(key string) *entry {
	h := maphash.String(t.seed, key)
	s := &t.shards[h%shardCount]
	if e := (*s.read.Load())[h]; e != nil && e.key == key && !e.dead.Load() {
		return e
	}
	return s.lookup(h, []byte(key))
}

// lookup finds key, of hash h, in the read map without a lock, else in
// the dirty map.
func (s *shard) lookup(h uint64, key []byte) *entry {
	if e := (*s.read.Load())[h]; e != nil && e.key == string(key) && !e.dead.Load() {
		return e
	}
	s.mu.Lock() // after a sweep of the shard, which publishes a map without the dead
	defer s.mu.Unlock()
	if e := (*s.read.Load())[h]; e != nil && e.key == string(key) { // merged meanwhile
		return e
	}
	e := s.dirty[string(key)]
	if e != nil {
		s.missed()
	}
	return e
}

// missed counts a lookup served from the dirty map and merges it into the
// read map when they have been frequent enough. s.mu must be held.
func (s *shard) missed() {
	s.misses++
	if read := *s.read.Load(); s.misses >= max(promoteMin, len(read)/8) {
		s.publish(read, s.dirty)
	}
}

// publish makes the live entries of maps the read map, leaving in the
// dirty map only the keys whose hash clashes. s.mu must be held.
func (s *shard) publish(read map[uint64]*entry, dirty map[string]*entry) {
	live := 0
	for _, e := range read {
		if !e.dead.Load() {
			live++
		}
	}
	for _, e := range dirty {
		if !e.dead.Load() {
			live++
		}
	}
	// Sized for the live keys: maps never shrink, so a map built after a
	// sweep is how the memory of swept keys is returned.
	merged := make(map[uint64]*entry, live)
	for h, e := range read {
		if !e.dead.Load() {
			merged[h] = e
		}
	}
	clash := make(map[string]*entry)
	for k, e := range dirty {
		switch {
		case e.dead.Load():
		case merged[e.hash] != nil:
			clash[k] = e
		default:
			merged[e.hash] = e
		}
	}
	s.read.Store(&merged)
	s.dirty, s.misses = clash, 0
}

// all returns every entry of the shard. s.mu must be held.
func (s *shard) all(buf []*entry) []*entry {
	for _, e := range *s.read.Load() {
		buf = append(buf, e)
	}
	for _, e := range s.dirty {
		buf = append(buf, e)
	}
	return buf
}

// eachCredit calls fn for every key of a shared rule. fn must not take
// shard locks.
func (t *table) eachCredit(fn func(e *entry, cs *creditState)) {
	var batch []*entry
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		batch = s.all(batch[:0])
		s.mu.Unlock()
		for _, e := range batch {
			if cs := e.cs.Load(); cs != nil {
				fn(e, cs)
			}
		}
	}
}

func (t *table) insert(s *shard, h uint64, key []byte, n int) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := (*s.read.Load())[h]; e != nil && e.key == string(key) {
		return e
	}
	if e := s.dirty[string(key)]; e != nil {
		return e
	}
	e := &entry{key: string(key), hash: h}
	if n > 0 {
		e.counters = make([]WindowState, n)
	}
	s.dirty[e.key] = e
	t.size.Add(1)
	return e
}

// sweep removes the keys whose state is fresh at now and returns how many
// it removed.
func (t *table) sweep(now int64) int {
	removed := 0
	for i := range t.shards {
		removed += t.shards[i].sweep(now)
	}
	t.size.Add(int64(-removed))
	return removed
}

// sweep removes the shard's fresh keys, publishing a read map without
// them, and returns how many it removed. A key whose entry is locked
// meanwhile is left for the next sweep.
func (s *shard) sweep(now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	read := *s.read.Load()
	removed := 0
	mark := func(e *entry) {
		// An entry whose lock is held is in use, not swept this time.
		// The sweep holds the shard's lock and must not wait for an
		// entry's: a key being made holds its entry's lock while it
		// reads the contended keys, and releases holds those while it
		// looks keys up, which takes the shard's lock.
		if e.fresh.Load() > now || !e.mu.TryLock() {
			return
		}
		if cs := e.cs.Load(); cs != nil {
			if used, until := cs.stillUsed(now); used {
				e.fresh.Store(until)
			}
		}
		if e.fresh.Load() <= now {
			e.dead.Store(true)
			if cs := e.cs.Load(); cs != nil {
				cs.orphanShare()
				cs.orphan.Store(true)
			}
			removed++
		}
		e.mu.Unlock()
	}
	for _, e := range read {
		mark(e)
	}
	for _, e := range s.dirty {
		mark(e)
	}
	if removed > 0 {
		s.publish(read, s.dirty)
	}
	return removed
}

// each calls fn for every key with the given prefix, with its entry locked.
func (t *table) each(prefix string, fn func(e *entry)) {
	var batch []*entry
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		batch = s.all(batch[:0])
		s.mu.Unlock()
		for _, e := range batch {
			if len(e.key) < len(prefix) || e.key[:len(prefix)] != prefix {
				continue
			}
			e.mu.Lock()
			if !e.dead.Load() {
				fn(e)
			}
			e.mu.Unlock()
		}
	}
}
