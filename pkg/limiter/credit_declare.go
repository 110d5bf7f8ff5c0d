package limiter

import (
	"context"
	"sync"
	"time"
)

// Declared shrinks, the replica's side (Declaration; share.go counts
// them). Replicas added in the middle of an epoch are not its sharers,
// and the sharers hold all of it: key by key, each newcomer's first
// request would find nothing to borrow, have the key published and
// every sharer shrink its share of it in a round of its own before the
// newcomer borrows again (credit_shrink.go), four key syncs or so where
// one would do. A sharer that hears of replicas its epochs under way do
// not count shrinks its shares of all of them at once:
//
//  1. it decides the shrink, Declaration{At, N, Until}: N the live
//     replicas, Until when the last of them is a lease old (an epoch that
//     begins then counts them all), At a moment from now, past the clock's
//     uncertainty;
//  2. from then on every share of an epoch the shrink covers is at most a
//     share at N, or what the key spent of it if more (reckonEpoch), and a
//     key that spent more, with share hits not pushed, is asked to sync;
//  3. once those keys have pushed them, it declares the shrink in the
//     registry (Store.Declare).
//
// The newcomers read it with the registry and name it in their syncs
// (SyncItem.Shrunk): the store counts the shrunk shares, and their first
// request of a key borrows a share (credit_loan.go) in one round. A
// larger scale-out while a shrink covers epochs under way declares a
// larger N, never a smaller one; a sharer that joins again after its
// lease ended loses its shrink with its shares (dropShares). A sliding
// window's or a token bucket's epoch after the scale-out's has the
// scale-out's sharers (shareBase): the shrink covers it too (coversOf),
// and the newcomers name the shrinks of the epoch before in their syncs
// (SyncItem.ShrunkPrev), whose shares still count.

// declState is the shrink this replica decided (d), and, until it is
// declared, the keys whose share hits must be pushed first.
type declState struct {
	d Declaration

	mu       sync.Mutex
	declared bool
	flagged  []*creditState
}

// shrinkSettle is how far past its decision a shrink begins (At), at
// least: past the clock's uncertainty (clockErr), so that an epoch it
// covers is, by this replica's clock, one under way or to come, whose
// shares it shrank; not one it holds for over while the store is still
// in it.
const shrinkSettle = 50 * time.Millisecond

// declareShrink decides, after a heartbeat read m, whether this replica
// shrinks its shares (a new shrink, or a larger one), and declares a
// decided one once its keys have pushed. now is local ns.
func (e *engine) declareShrink(ctx context.Context, m Membership, now int64) {
	cur := e.decl.Load()
	if d, ok := e.shrinkWanted(m, cur); ok {
		ds := &declState{d: d}
		e.decl.Store(ds)
		e.applyShrink(ds)
		cur = ds
	}
	if cur == nil || !cur.ready() {
		return
	}
	if err := e.store.Declare(ctx, e.replica, cur.d); err != nil {
		return // declared at a later heartbeat; the shares stay shrunk meanwhile
	}
	cur.mu.Lock()
	cur.declared = true
	cur.mu.Unlock()
}

// shrinkPeriods are the periods whose epochs under way a replica looks
// at for sharers fewer than the live replicas, beside the longest of
// its rules with shares: a replica that holds no key yet still holds,
// as the store counts, a share of every key.
var shrinkPeriods = [...]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}

// shrinkWanted reports the shrink to decide now, if any: when the live
// replicas outnumber the sharers of an epoch under way of which this
// replica is one, and no shrink decided covers them yet. A shrink that
// may still cover epochs under way is only ever made larger.
func (e *engine) shrinkWanted(m Membership, cur *declState) (Declaration, bool) {
	live, until := 0, int64(0)
	for _, x := range m.Members {
		if x.Expires > m.Now {
			live++
			until = max(until, x.Joined+int64(lease/time.Microsecond))
		}
	}
	periods := append(shrinkPeriods[:], time.Duration(e.sharePeriod.Load())*time.Microsecond)
	want, longest := false, int64(0)
	for _, p := range periods {
		pu := int64(p / time.Microsecond)
		if pu <= 0 {
			continue // no rule with shares seen yet
		}
		longest = max(longest, pu)
		start := m.Now / pu * pu
		n := m.Sharers(start, pu, lease)
		want = want || n > 0 && n < live && m.holds(start, pu, lease)
	}
	if !want {
		return Declaration{}, false
	}
	settle := max(int64(shrinkSettle/time.Microsecond), e.clockErr.Load()/1000+1000)
	d := Declaration{At: m.Now + settle, N: live, Until: until}
	if cur != nil && cur.d.Until > m.Now-longest {
		if cur.d.N >= live && cur.d.Until >= until {
			return Declaration{}, false // covered
		}
		d.N, d.Until = max(d.N, cur.d.N), max(d.Until, cur.d.Until)
	}
	return d, true
}

// applyShrink shrinks every key's share of an epoch ds covers, and lists
// the keys that spent more than the shrunk share with share hits not yet
// pushed, asking each to sync.
func (e *engine) applyShrink(ds *declState) {
	var flagged []*creditState
	e.keys.eachCredit(func(_ *entry, cs *creditState) {
		if cs.share != nil && e.shrinkKey(cs, ds.d) {
			flagged = append(flagged, cs)
			if cs.kicked.CompareAndSwap(false, true) {
				e.enqueue(cs)
			}
		}
	})
	ds.mu.Lock()
	ds.flagged = flagged
	ds.mu.Unlock()
	if len(flagged) > 0 {
		e.kick()
	}
}

// shrinkKey shrinks key cs's share of the epoch it last reckoned, if d
// covers it, and reports whether the key spent more than the shrunk
// share and has share hits to push.
func (e *engine) shrinkKey(cs *creditState, d Declaration) bool {
	sh := cs.share
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w := cs.ws[0]
	p := int64(w.Period)
	if sh.epoch < 0 || sh.size == 0 || sh.has(flagLent) || sh.released >= sh.epoch ||
		!d.coversOf(e.shareBase(cs.rule.Algorithm, sh.epoch*p, p), sh.epoch*p, p, int(sh.sharers)) {
		return false
	}
	if d.N > sh.shrinkN() {
		sh.setShrinkN(d.N)
	}
	sh.roll(w, sh.epoch*p)
	sh.size = sh.shrunkSize(w, cs.rule.shareFraction(), sh.size)
	small := ShareSize(w, cs.rule.shareFraction(), d.N)
	spent := sh.state.Cur
	if sh.state.Epoch != sh.epoch {
		spent = 0
	}
	return sh.pendingN.Load() > 0 && (spent > small || sh.next > small)
}

// ready reports whether ds may be declared: not yet, and every key it
// listed has pushed its share hits (none pending, no round in flight
// that carries them).
func (ds *declState) ready() bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.declared {
		return false
	}
	keep := ds.flagged[:0]
	for _, cs := range ds.flagged {
		cs.mu.Lock()
		busy := cs.inflight
		cs.mu.Unlock()
		if busy || cs.share.pendingUnits() > 0 {
			keep = append(keep, cs)
		}
	}
	clear(ds.flagged[len(keep):])
	ds.flagged = keep
	return len(keep) == 0
}

// declaredN is the count this replica's shrink holds its share of an
// epoch of period that began at start to, one of n sharers, those of the
// epoch that began at base (shareBase): 0 if none covers it.
func (e *engine) declaredN(base, start, period int64, n int) int {
	if ds := e.decl.Load(); ds != nil && ds.d.coversOf(base, start, period, n) {
		return ds.d.N
	}
	return 0
}
