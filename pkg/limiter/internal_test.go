package limiter

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestTablePromotesAndSweeps follows keys from the dirty map into the
// lock-free read map and out again when swept.
func TestTablePromotesAndSweeps(t *testing.T) {
	tb := newTable()
	rule := &Rule{Windows: []Window{{Limit: 1, Period: 1}}}
	const n = 5000
	key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
	for i := range n {
		e := tb.lock(key(i), rule)
		e.fresh.Store(int64(i))
		e.mu.Unlock()
	}
	for range promoteMin + 1 { // lookups of dirty keys merge them into the read map
		for i := range n {
			if e := tb.get(key(i)); e == nil || e.key != string(key(i)) {
				t.Fatalf("key %d: got %v", i, e)
			}
		}
	}
	inRead := 0
	for i := range tb.shards {
		inRead += len(*tb.shards[i].read.Load())
	}
	if inRead != n {
		t.Fatalf("%d of %d keys in the read maps after repeated lookups", inRead, n)
	}
	if got := tb.sweep(n / 2); got != n/2+1 || tb.size.Load() != int64(n-got) {
		t.Fatalf("sweep removed %d, size %d", got, tb.size.Load())
	}
	for i := range n {
		if e := tb.get(key(i)); (e != nil) != (i > n/2) {
			t.Fatalf("key %d after sweep: present %v", i, e != nil)
		}
	}
}

// TestTableHashClash keeps two keys of one hash apart: the second stays
// in the dirty map when the first is published.
func TestTableHashClash(t *testing.T) {
	tb := newTable()
	s := &tb.shards[7]
	a := tb.insert(s, 7, []byte("a"), 1)
	b := tb.insert(s, 7, []byte("b"), 1)
	for range promoteMin + 1 {
		if s.lookup(7, []byte("a")) != a || s.lookup(7, []byte("b")) != b {
			t.Fatal("a clashing key found the other's entry")
		}
	}
	if len(*s.read.Load()) != 1 || len(s.dirty) != 1 {
		t.Fatalf("read %d, dirty %d: want one key in each", len(*s.read.Load()), len(s.dirty))
	}
	if s.lookup(7, []byte("c")) != nil {
		t.Fatal("a missing key of a known hash was found")
	}
}

// TestViewFixedAtMatchesWindowMaths checks the division-free description
// of fixed windows against WindowState's maths at random instants.
func TestViewFixedAtMatchesWindowMaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		w := Window{Limit: 1 + rng.Uint64N(100), Period: time.Duration(1 + rng.Int64N(5000))}
		p := int64(w.Period)
		c := WindowState{Epoch: rng.Int64N(1000), Cur: rng.Uint64N(120)}
		v := newView([]Window{w}, FixedWindow, []WindowState{c}, 0)
		snow := c.Epoch*p - 3*p + rng.Int64N(7*p)
		rem, reset, ok := v.fixedAt(w, 0, snow)
		if !ok {
			if snow >= c.Epoch*p && snow < (c.Epoch+2)*p {
				t.Fatalf("%+v at %d: not described", c, snow)
			}
			continue
		}
		if want := c.Remaining(w, FixedWindow, snow); rem != want {
			t.Fatalf("%+v %v at %d: remaining %d, want %d", c, w, snow, rem, want)
		}
		if want := c.UntilReset(w, FixedWindow, snow); time.Duration(reset) != want {
			t.Fatalf("%+v %v at %d: reset %d, want %v", c, w, snow, reset, want)
		}
	}
}
