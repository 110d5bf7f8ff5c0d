// Tests of the contended keys' walk and of the locks it shares with new keys and the sweep.

package limiter

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// deadlockWait is how long a test waits for work that finishes in
// microseconds unless it waits on a lock that is never released.
const deadlockWait = 20 * time.Second

// TestSweepPassesLockedEntry: a sweep does not wait for an entry whose
// lock is held (as a key being made holds it while it reads the
// contended keys) and leaves it in the table.
func TestSweepPassesLockedEntry(t *testing.T) {
	tb := newTable()
	rule := &Rule{Windows: []Window{{Limit: 1, Period: 1}}}
	held := tb.lock([]byte("held"), rule, true) // fresh 0: due for the sweep
	other := tb.lock([]byte("other"), rule, true)
	other.mu.Unlock()
	done := make(chan int)
	go func() { done <- tb.sweep(1) }()
	select {
	case n := <-done:
		if n != 1 {
			t.Fatalf("swept %d keys, want 1 (the unlocked one)", n)
		}
	case <-time.After(deadlockWait):
		t.Fatal("the sweep waits for a locked entry")
	}
	held.mu.Unlock()
	if tb.get([]byte("held")) == nil {
		t.Fatal("the locked entry was swept")
	}
}

// TestNewKeysBesideReleasesAndSweeps makes keys while releases walks
// many contended keys and sweeps run: a key being made holds its entry's
// lock and takes the contended keys' lock, releases holds that lock
// while it looks keys up (the shard's lock), and a sweep holding a
// shard's lock once waited for an entry's, which hung the three.
func TestNewKeysBesideReleasesAndSweeps(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	const sec = int64(time.Second / time.Microsecond)
	snow := 1_000_000*sec + sec/2
	now := snow * 1000
	twoSharers(l, snow)
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	const keys = 2000
	publishShrinks(l, rule, 0, keys, snow, 3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(fn func()) {
		for {
			select {
			case <-stop:
				return
			default:
				fn()
			}
		}
	}
	wg.Go(func() { loop(func() { l.eng.releases(now) }) })
	wg.Go(func() { loop(func() { l.keys.sweep(now + 3*int64(time.Second)) }) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for round := range 20 {
			for i := range keys {
				l.eng.creditFor([]byte("k"+strconv.Itoa(i)), rule, now+int64(round))
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(deadlockWait):
		t.Fatal("making keys hangs beside releases and sweeps")
	}
	close(stop)
	wg.Wait()
}

// TestReleasesVisitsOnlyDue: a tick visits the contended keys read since
// the last, not every key of the epoch (a scale-out publishes every key
// its newcomers see, and the walk of them all every 10 ms took a core);
// a new copy of the registry makes it visit them all once.
func TestReleasesVisitsOnlyDue(t *testing.T) {
	l, snow, now, rule := midMinute()
	const keys = 10000
	publish := func(from, to int) { publishShrinks(l, rule, from, to, snow, 3) }
	visits := func(at int64) int64 {
		before := l.eng.work.visits
		l.eng.releases(at)
		return l.eng.work.visits - before
	}
	publish(0, keys)
	if got := visits(now); got != keys {
		t.Fatalf("first tick visited %d entries, want %d", got, keys)
	}
	if got := visits(now + int64(tick)); got != 0 {
		t.Fatalf("a tick with nothing read visited %d entries, want 0", got)
	}
	publish(5, 8)
	if got := visits(now + 2*int64(tick)); got != 3 {
		t.Fatalf("a tick after 3 keys were read visited %d entries, want 3", got)
	}
	l.eng.members.Store(&memberView{m: l.eng.members.Load().m, at: now + 3*int64(tick)})
	if got := visits(now + 3*int64(tick)); got != keys {
		t.Fatalf("a tick after a new copy of the registry visited %d entries, want %d", got, keys)
	}
	if got := visits(now + 3*int64(tick) + int64(contWalkEvery)); got != keys {
		t.Fatalf("a tick a second after the last walk visited %d entries, want %d", got, keys)
	}
	if got := visits(now + int64(time.Minute)); got != keys || l.eng.contN.Load() != 0 {
		t.Fatalf("after the epoch: visited %d, %d entries left, want every one visited and forgotten", got, l.eng.contN.Load())
	}
}

// TestShrinkPublicationKicksARound: a publication asking to shrink the
// shares to a smaller share than before wakes the sync loop, whose round
// says the shrink a newcomer's requests wait for; a repeat, or a
// publication to release (which a round of a waiting replica would make
// again), does not.
func TestShrinkPublicationKicksARound(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	const sec = int64(time.Second / time.Microsecond)
	snow := 1_000_000*sec*60 + sec/2
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 100, Period: time.Minute}}}
	kicked := func() bool {
		select {
		case <-l.eng.kickCh:
			return true
		default:
			return false
		}
	}
	for _, tt := range []struct {
		name   string
		key    string
		shrink int
		want   bool
	}{
		{"a shrink", "a", 3, true},
		{"the same shrink again", "a", 3, false},
		{"a shrink to a smaller share", "a", 4, true},
		{"a release", "b", 0, false},
		{"a shrink of a key published to release", "b", 5, false},
	} {
		l.eng.contendAll([]Contended{{Key: tt.key, Windows: rule.Windows, Replica: "other", At: snow, Shrink: tt.shrink}})
		if got := kicked(); got != tt.want {
			t.Errorf("%s: kicked %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestReleaseOfAnEpochAhead: a key published with an instant of the next
// epoch, by a clock a little ahead of this replica's, is visited at every
// tick until that epoch begins here, and released then; it used to wait
// for the walk of every key, a second later, when its epoch was over.
func TestReleaseOfAnEpochAhead(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	const sec = int64(time.Second / time.Microsecond)
	boundary := 1_000_000 * sec
	snow := boundary - 2000 // 2 ms before a second ends (offset 0)
	now := snow * 1000
	twoSharers(l, snow)
	rule := &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	l.eng.contendAll([]Contended{{Key: "k", Windows: rule.Windows, Replica: "other", At: boundary + 1000}})
	for _, at := range []int64{now, now + int64(time.Millisecond)} {
		if items := l.eng.releases(at); len(items) != 0 {
			t.Fatalf("released before the epoch began: %+v", items)
		}
	}
	items := l.eng.releases(now + 3*int64(time.Millisecond))
	if len(items) != 1 || items[0].Key != "k" || items[0].Release == 0 {
		t.Fatalf("once the epoch began: items %+v, want the release of k", items)
	}
}

// TestRepublishedKeyPushesSpentCredit: a key published contended again
// after this replica released its share has its next round push the hits
// of the credit it spent, and hand back what it holds: the waiters on the
// other replicas then see the window full, or its units free, rather
// than poll on a reservation this replica spent and has not pushed. A
// key that holds neither is left alone.
func TestRepublishedKeyPushesSpentCredit(t *testing.T) {
	for _, tt := range []struct {
		name          string
		credit, hits  int64
		queued, yield bool
	}{
		{"spent credit not pushed", 0, 1, true, false},
		{"credit held", 2, 0, true, true},
		{"nothing held or owed", 0, 0, false, false},
	} {
		l, snow, now, rule := midMinute()
		cs := l.eng.creditFor([]byte("k"), rule, now)
		cs.share.released = snow / int64(time.Minute/time.Microsecond) // its share of this epoch released
		cs.credit.Store(tt.credit)
		cs.hits.Store(tt.hits)
		l.eng.contendAll([]Contended{{Key: "k", Windows: rule.Windows, Replica: "other", At: snow}})
		l.eng.pending = nil
		l.eng.releases(now)
		if queued := len(l.eng.pending) == 1 && l.eng.pending[0] == cs; queued != tt.queued || cs.yield.Load() != tt.yield {
			t.Errorf("%s: queued for a round %v, yield %v; want %v, %v", tt.name, queued, cs.yield.Load(), tt.queued, tt.yield)
		}
	}
}

// BenchmarkReleasesFullWalk is the walk of every contended key, once a
// second or on a new copy of the registry, over 100 000 keys a scale-out
// published to shrink, already shrunk (ns/op is the whole walk).
func BenchmarkReleasesFullWalk(b *testing.B) {
	l, snow, now, rule := midMinute()
	const keys = 100_000
	publishShrinks(l, rule, 0, keys, snow, 4)
	l.eng.releases(now)
	for b.Loop() {
		l.eng.work.walked = 0
		l.eng.releases(now)
	}
}

// twoSharers gives l a registry copy, taken at store instant snow (µs,
// offset 0), of two replicas that joined long before, this one of them.
func twoSharers(l *Limiter, snow int64) {
	l.eng.joined.Store(1)
	two := Membership{Members: []Member{{Joined: 1, Expires: 2 * snow}, {Joined: 1, Expires: 2 * snow}}, Now: snow}
	l.eng.members.Store(&memberView{m: two, at: snow * 1000})
}

// publishShrinks has l read the keys k<from> to k<to-1> of rule published
// at store instant at, to shrink the shares to a share at shrink.
func publishShrinks(l *Limiter, rule *Rule, from, to int, at int64, shrink int) {
	cs := make([]Contended, 0, to-from)
	for i := from; i < to; i++ {
		cs = append(cs, Contended{Key: "k" + strconv.Itoa(i), Windows: rule.Windows, Replica: "other", At: at, Shrink: shrink})
	}
	l.eng.contendAll(cs)
}

// midMinute is a limiter with a store, two sharers by its registry copy,
// half a second into a minute of store time (snow µs, now ns), and a rule
// of 100 a minute.
func midMinute() (l *Limiter, snow, now int64, rule *Rule) {
	l = New(WithStore(nopStore{}, "r"))
	const sec = int64(time.Second / time.Microsecond)
	snow = 1_000_000*sec*60 + sec/2
	twoSharers(l, snow)
	return l, snow, snow * 1000, &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 100, Period: time.Minute}}}
}
