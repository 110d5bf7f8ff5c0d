package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// creditState is one key's replica-side state in the credit engine: its
// lock-free half, which the hot path reads and writes (an admission is one
// add on credit and one on hits), and the half mu guards, which the sync
// loop and waiters use.
type creditState struct {
	creditAtomics
	mu sync.Mutex
	creditLocked
}

// creditAtomics is the lock-free half of a key's credit state.
type creditAtomics struct {
	// The hot path's fields fill 64 bytes, one cache line where the
	// object's size class keeps it 64-byte aligned (384 bytes; with a
	// share, 480 bytes, every other key's straddles two lines: padding
	// to 512 would cost each key 32 bytes more for the collector to
	// mark). The view starts the next 64. The flags are kept together
	// at the end, where they pack into two words.
	credit   atomic.Int64 // units admissible locally now (backed by the reservation)
	hits     atomic.Int64 // units admitted, not yet pushed
	backedTo atomic.Int64 // local ns until which the reservation backs credit
	deniedTo atomic.Int64 // local ns until which an exhausted key denies locally
	// grant is the last reservation: early sync comes at half of it, and
	// the hot path leaves a quarter of it (reserveShare) to waiters whose
	// sync round is late, still admitted from this replica's reservation.
	grant    atomic.Int64
	lastUse  atomic.Int64                // local ns of the last decision
	summary  atomic.Pointer[viewSummary] // fixed windows: the view, summed up for now
	capacity uint64                      // the smallest window's capacity: no request above it fits

	view atomic.Pointer[storeView] // the store's state after the last sync; nil: cold
	// overrunLeft is this replica's share of the budget the last view left
	// free: what timed-out waiters may be admitted on that view when the
	// store is usually fast and only this round was late.
	overrunLeft atomic.Int64
	// refunds are units refunded beyond this replica's unpushed admits,
	// pushed as a negative hit ahead of the admits that follow them.
	refunds atomic.Int64
	// denied counts the requests denied since the last round.
	denied atomic.Int64
	// spending counts spends and refunds in transit between the credit
	// and the hits (settle).
	spending atomic.Int64
	// releasing is the local ns until which waiters wait past their
	// StoreTimeout: the last reply said other replicas hold shares of the
	// key that the store asked them to release (SyncResult.Contended).
	releasing atomic.Int64
	// share is the key's static share; nil for rules without one.
	share *shareState
	// ent is the key's table entry.
	ent *entry
	// secs notes the second of the store clock of the latest hit counted
	// (credit_hits.go): 24 bytes, so a key with a share stays in the
	// 512-byte size class; read by every spend, written once a second,
	// away from the lines every spend writes.
	secs hitSeconds

	kicked atomic.Bool // a sync was asked for
	// orphan: swept from the table (idle, holding nothing) while a
	// decision may still hold it; that decision moves to the key's new
	// state rather than wait for a sync this state will never get.
	orphan atomic.Bool
	// yield asks the next round to hand back the key's unused credit: the
	// store published the key, whose waiters on another replica need it.
	yield atomic.Bool
	// active says the sync loop's scans visit the key; listed (guarded by
	// the Limiter's activeMu) that it is in their list.
	active atomic.Bool
	listed bool
}

// creditLocked is the half of a key's credit state its mu guards.
type creditLocked struct {
	key     string
	rule    *Rule
	ws      []Window // rule.Windows with periods in µs, the store's unit
	waiters []*waiter
	waiting uint64 // units the waiters want
	asked   uint64 // waiting units the in-flight sync asked for
	flying  int64  // units admitted that the in-flight sync pushes (hits, share hits)
	late    []Hit  // hits snapshotted just before a window boundary
	// extra is what few keys need: their probes and fail-static windows;
	// nil until the first.
	extra *keyExtras
	// overrunEpoch is the window (of the first period) overrunLeft was set in.
	overrunEpoch int64
	unused       int64 // credit when the in-flight sync was sent
	sentAt       int64 // local ns the in-flight sync was sent
	lastSync     int64 // local ns of the last completed sync
	nextSync     int64 // local ns when the key is next due
	rate         float64
	inflight     bool // a sync of the key is in flight
	collected    bool // listed for the round being built
	busy         bool // syncs every sync interval: a window is over half used, or requests wait
	tight        bool // over half of a window is used or reserved: credit is held only to its end
	refill       bool // a busy sliding-window key left without credit: due again when a unit frees
	// heldWait: the last round found the budget held by other replicas'
	// shares (SyncResult.Contended); its waiters wait for them to
	// release or shrink, and the key is asked again at nextSync, not in
	// every round other keys start meanwhile.
	heldWait bool
}

// keyExtras is the part of a key's credit state few keys need, apart
// so that the rest of the keys (a key with a static share: 480 bytes with
// it) do not carry it. The creditState's mu guards it.
type keyExtras struct {
	probes   probes    // its probes (credit_probe.go)
	fallback *fallback // set while degraded (fail-static); nil before the first outage
}

// extras returns the key's extras, made on first use. cs.mu must be held.
func (cs *creditState) extras() *keyExtras {
	if cs.extra == nil {
		cs.extra = &keyExtras{}
	}
	return cs.extra
}

// prb is the key's probes, nil before its first. cs.mu must be held.
func (cs *creditState) prb() *probes {
	if cs.extra == nil {
		return nil
	}
	return &cs.extra.probes
}

// fb is the key's fail-static windows, nil before its first outage.
// cs.mu must be held.
func (cs *creditState) fb() *fallback {
	if cs.extra == nil {
		return nil
	}
	return cs.extra.fallback
}

// fallback is a key's local windows while the store is unreachable
// (fail-static), apart from the credit state: most keys never see an
// outage.
type fallback struct {
	ws []WindowState
	// ok names the outage the windows were seeded in (engine.outageOK):
	// a later outage seeds them again.
	ok int64
	n  uint64 // N the windows were seeded at
}

// waiter is a request that found no credit and waits for a sync.
type waiter struct {
	n      int64
	done   chan bool // receives whether the sync admitted it
	probed bool      // the in-flight round charges its units (credit_probe.go); cs.mu guards it
}

// creditDecide decides one request of a shared rule. A dry run charges
// nothing.
func (e *engine) creditDecide(res *Result, cs *creditState, r *Request, hits uint64, now int64, dry bool) {
	if now-cs.lastUse.Load() > int64(tick) { // one write per tick keeps the line shared
		cs.lastUse.Store(now)
	}
	n := int64(min(hits, math.MaxInt64/2))
	switch {
	case r.Op == Refund:
		if cs.orphan.Load() {
			cs = e.creditFor(r.Key, r.Rule, now)
		}
		if !dry {
			e.refund(cs, n, now)
		}
		e.viewResult(res, cs, now, true, 0)
		return
	case r.Op == Check:
		n = 1
		if cs.credit.Load() >= 1 && now < cs.backedTo.Load() || e.shareFits(cs, 1, now) {
			e.viewResult(res, cs, now, true, 0)
			return
		}
		ok, wait := e.viewAdmits(cs, now, 1)
		e.viewResult(res, cs, now, ok, wait)
		return
	case dry:
		ok, wait := e.viewAdmits(cs, now, n)
		e.viewResult(res, cs, now, ok || (cs.credit.Load() >= n && now < cs.backedTo.Load()) || e.shareFits(cs, n, now), wait)
		return
	}
	if uint64(n) > cs.capacity {
		e.viewResult(res, cs, now, false, Never)
		return
	}
	if e.degraded(r.Rule, now) || e.settling(cs, now) {
		*res = e.degradedDecide(cs, r.Rule, n, now)
		return
	}
	if ok, at := e.spendShare(cs, n, now, false); ok {
		e.missedBySeed(cs, r.Rule, n)
		e.viewResult(res, cs, now, true, 0)
		return
	} else if at > 0 && at-now <= int64(r.Rule.Tuning.storeTimeout()) && !cs.share.has(flagFounding) {
		// Within the clock's uncertainty of a boundary, which the store
		// cannot help with, and the share of one of the two epochs is
		// spent: wait until the epoch is known.
		time.Sleep(time.Duration(at - now))
		e.creditDecide(res, cs, r, hits, e.now(), dry)
		return
	} else if at > 0 && e.awaitFounders(cs, n, at, now, r.Rule) {
		e.viewResult(res, cs, e.now(), true, 0)
		return
	}
	if now < cs.deniedTo.Load() {
		cs.denied.Add(1)
		_, wait := e.viewAdmits(cs, now, n)
		e.viewResult(res, cs, now, false, wait)
		return
	}
	if e.spend(cs, n, now) {
		e.missedBySeed(cs, r.Rule, n)
		e.viewResult(res, cs, now, true, 0)
		return
	}
	if cs.orphan.Load() {
		e.creditDecide(res, e.creditFor(r.Key, r.Rule, now), r, hits, now, dry)
		return
	}
	if *res = e.wait(cs, r.Rule, n, now); !res.Allowed {
		cs.denied.Add(1)
	}
}

// spend admits n units from the credit the reservation backs, leaving
// the quarter of the last grant held back for late rounds; at half the
// grant spent it asks for an early sync.
func (e *engine) spend(cs *creditState, n, now int64) bool {
	if now >= cs.backedTo.Load() {
		return false
	}
	g := cs.grant.Load()
	c, ok := cs.spendCredit(n, g/reserveShare, e.hitSec(now))
	if !ok {
		return false
	}
	if 2*c < g && !cs.kicked.Load() && cs.roomBeyond(e, c, now) && cs.kicked.CompareAndSwap(false, true) {
		// Early sync at half credit: due at the next tick, batched with
		// the other keys; only waiters wake the loop at once.
		e.enqueue(cs)
	}
	return true
}

// roomBeyond reports whether the last view of a fixed window leaves a
// unit free beyond the credit c and the hits not yet pushed: else a
// round asking for credit ahead would get none (over workload B's keys
// at their limit, an eighth of the key syncs pushed a unit and got
// nothing), and the next request that finds no credit asks instead. A
// sliding window's and a token bucket's units free as time passes.
func (cs *creditState) roomBeyond(e *engine, c, now int64) bool {
	return cs.rule.Algorithm != FixedWindow || cs.view.Load() == nil || cs.viewWait(e.storeNow(now), max(c, 0)+1) == 0
}

// chargeDebt records the hits of a denied request of an AlwaysCharge
// rule: pushed with the key's next round, they are charged past the
// limit, a debt the window's later requests pay.
func (e *engine) chargeDebt(r *Request, hits uint64, now int64) {
	cs := e.creditFor(r.Key, r.Rule, now)
	cs.addHits(int64(min(hits, math.MaxInt64/2)), e.hitSec(now))
	e.activate(cs)
}

// spendCredit admits n units from the credit if at least floor remains
// after them (take), counting them among the hits to push, of second sec
// of the store clock; the spend is in transit between the two, which
// settle waits out.
func (cs *creditState) spendCredit(n, floor, sec int64) (int64, bool) {
	cs.spending.Add(1)
	defer cs.spending.Add(-1)
	c, ok := cs.take(n, floor)
	if ok {
		cs.addHits(n, sec)
	}
	return c, ok
}

// take spends n units of credit if at least floor remains after them,
// and returns what remains. Credit never shows a value it does not hold,
// even for an instant: the sync loop reads it to hand units back (prepare)
// and must not hand back units a request is about to spend.
func (cs *creditState) take(n, floor int64) (int64, bool) {
	for {
		c := cs.credit.Load()
		if c-n < floor {
			return c, false
		}
		if cs.credit.CompareAndSwap(c, c-n) {
			return c - n, true
		}
	}
}

// refund takes n units back: first from the share hits not yet pushed,
// then as credit (creditState.refund).
func (e *engine) refund(cs *creditState, n, now int64) {
	cs.deniedTo.Store(0) // the window may have room again
	if cs.share != nil {
		n -= cs.share.refundShare(cs.ws[0], FixedWindow, n, e.storeNow(now))
	}
	if n > 0 {
		cs.refund(n, cs.refundable(e.storeNow(now)))
		e.activate(cs) // a refund beyond the unpushed hits is pushed
	}
}

// refundable bounds what a refund beyond this replica's unpushed admits
// may free of a fixed or sliding window: what the windows held at the
// last view, less the refunds on their way. The negative hit is pushed a
// round later; by then the window holds admits made after the refund,
// which it must not free. A token bucket's refill is not bounded.
func (cs *creditState) refundable(snow int64) int64 {
	if cs.rule.Algorithm == TokenBucket {
		return math.MaxInt64 / 2
	}
	v := cs.view.Load()
	if v == nil {
		return 0
	}
	used := uint64(math.MaxInt64 / 2)
	for i, w := range cs.ws {
		c := v.windows[i]
		c.Roll(w, snow)
		used = min(used, c.Cur)
	}
	return max(int64(used)-cs.refunds.Load(), 0)
}

// refund takes n units back. Those this replica admitted and has not
// pushed yet return to its credit, which its reservation still covers;
// the rest is pushed as a negative hit, freeing the store's budget (never
// below an empty window or a full bucket) without handing this replica
// credit that no reservation backs, and at most limit of it.
func (cs *creditState) refund(n, limit int64) {
	cs.spending.Add(1) // units move from the hits to the credit
	defer cs.spending.Add(-1)
	for {
		h := cs.hits.Load()
		back := min(n, max(h, 0))
		if cs.hits.CompareAndSwap(h, h-back) {
			cs.credit.Add(back)
			if rest := min(n-back, limit); rest > 0 {
				cs.refunds.Add(rest)
			}
			return
		}
	}
}

// viewAdmits reports whether n more units fit in the last store view,
// counting other replicas' reservations and the hits not yet pushed, and
// otherwise how long until they would.
func (e *engine) viewAdmits(cs *creditState, now int64, n int64) (bool, time.Duration) {
	if cs.view.Load() == nil {
		return false, cs.rule.Tuning.syncInterval()
	}
	wait := cs.viewWait(e.storeNow(now), n)
	return wait == 0, wait
}

// viewWait is the time until n units fit in the view at store instant
// snow, counting other replicas' reservations and the hits not yet
// pushed. When those alone fill a window, it is certainly full until the
// window clears (and at least a sync interval). The view must exist.
func (cs *creditState) viewWait(snow int64, n int64) time.Duration {
	return cs.waitOn(cs.view.Load(), snow, n, cs.view.Load().others)
}

// releasedWait is viewWait once the other replicas have released what
// they hold and do not use: the static shares, and for a key with shares
// their credit too (SyncResult.Contended). It is what a waiter on a
// contended key may expect.
func (cs *creditState) releasedWait(snow int64, n int64) time.Duration {
	v := cs.view.Load()
	return cs.waitOn(v, snow, n, cs.keptElsewhere(v))
}

// keptElsewhere is what of v.others the other replicas keep when the key
// is published contended: their reservations, unless the key has shares.
func (cs *creditState) keptElsewhere(v *storeView) uint64 {
	if cs.share != nil {
		return 0
	}
	return v.others - v.held
}

// waitOn is the time until n units fit in view v at store instant snow
// beside others and the hits not yet pushed, those of a fixed window's
// earlier epoch apart: charged to the epoch they were admitted in
// (takeHits), they take nothing of the current one.
func (cs *creditState) waitOn(v *storeView, snow, n int64, others uint64) time.Duration {
	hits, last := uint64(max(cs.hits.Load(), 0)), int64(cs.secs.last.Load())*1_000_000
	a := cs.rule.Algorithm
	var longest time.Duration
	for i, w := range cs.ws {
		c := v.windows[i]
		need := uint64(max(n, 1)) + others
		if p := int64(w.Period); a != FixedWindow || last == 0 || last/p >= snow/p {
			need += hits
		}
		if capacity := w.Capacity(a); need > capacity {
			clear := max(c.Wait(w, a, snow, capacity), c.UntilReset(w, a, snow))
			longest = max(longest, clear*time.Microsecond, cs.rule.Tuning.syncInterval())
			continue
		}
		if wt := c.Wait(w, a, snow, need); wt == Never {
			longest = Never
		} else {
			longest = max(longest, wt*time.Microsecond)
		}
	}
	return longest
}

func minCapacity(r *Rule) uint64 {
	c := uint64(math.MaxUint64)
	for _, w := range r.Windows {
		c = min(c, w.Capacity(r.Algorithm))
	}
	return c
}
