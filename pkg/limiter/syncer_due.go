package limiter

import (
	"math"
	"time"
)

// Which keys a sync round takes: those that asked, and on a full scan
// every key that is due.

// fullScanDue reports whether this round looks at every key: every
// fullScanEvery, on the tick before each whole second, where every window
// boundary falls, to set aside the hits admitted before it, and on the
// first tick after it, to refill keys the old window left without credit.
func (e *engine) fullScanDue(now int64) bool {
	lead := int64(boundaryLead / time.Microsecond)
	snow := e.storeNow(now)
	newSecond := snow/1e6 != e.storeNow(e.lastScan)/1e6
	if now-e.lastScan < int64(fullScanEvery) && snow%1e6 < 1e6-lead && !newSecond {
		return false
	}
	e.lastScan = now
	return true
}

// collectDue lists the credit keys to sync at now: on a full scan every
// key that is due, and always the keys that asked since the last round.
// Riding along is limited to keys due within a tenth of their interval:
// enough to merge rounds of keys due together, without making every key
// sync early when many keys keep a round going on every tick.
func (e *engine) collectDue(now int64, full bool) []*creditState {
	var due []*creditState
	if full {
		due = e.scanDue(now)
	}
	e.pendingMu.Lock()
	asked := e.pending
	e.pending = nil
	e.pendingMu.Unlock()
	var later []*creditState
	for _, cs := range asked {
		cs.mu.Lock()
		switch {
		case cs.inflight || cs.collected || !cs.needsSync(now):
		case cs.refill && now < cs.nextSync && !cs.kicked.Load() && len(cs.waiters) == 0,
			cs.heldWait && now < cs.nextSync:
			later = append(later, cs) // a refill, or held elsewhere: not due yet
		default:
			cs.collected = true
			due = append(due, cs)
			e.activate(cs)
		}
		cs.mu.Unlock()
	}
	if len(later) > 0 {
		e.pendingMu.Lock()
		e.pending = append(e.pending, later...)
		e.pendingMu.Unlock()
	}
	return due
}

// probedQuiet reports a quiet key its last round gave no credit (a probe)
// whose shortest window does not end before it has been idle a quiet
// interval: no new window can find it starved while it is scanned, so it
// may leave the scans now rather than be looked at for a quiet interval.
// A key of a window that ends sooner stays, for the round a new window
// that finds it starved asks (starvedInNewWindow). cs.mu must be held.
func (cs *creditState) probedQuiet(now, snow int64) bool {
	if cs.busy || cs.grant.Load() != 0 {
		return false
	}
	p := shortest(cs.ws)
	leaves := snow + (cs.lastUse.Load()+int64(quietInterval)-now)/int64(time.Microsecond)
	return (snow/p+1)*p > leaves
}

// scanDue looks at every active key (one that has synced and not gone
// idle since): those due, asked for or waited on, and when any is, those
// due within a tenth of their interval (riding along). A key that holds
// nothing and owes nothing leaves the active keys once it has been idle
// a quiet interval, its share has room or, quiet, its last round gave it
// no credit and no new window can begin before it would go idle
// (probedQuiet), evictable two periods after its last use; keys that
// admit from their static share alone never join them, so idle, probed
// and share-only keys cost a scan nothing.
func (e *engine) scanDue(now int64) []*creditState {
	var due, half []*creditState
	snow := e.storeNow(now)
	e.eachActive(func(cs *creditState) {
		ent := cs.ent
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.snapshotBoundary(snow)
		if cs.inflight || cs.collected { // in a round, or listed for one
			return
		}
		starved := cs.starvedInNewWindow(snow, e.replicas.Load()) && now-cs.lastUse.Load() < int64(quietInterval)
		if !cs.needsSync(now) && !starved {
			idle, keep := now-cs.lastUse.Load(), 2*int64(maxPeriod(cs.rule))
			switch {
			case idle > keep:
				ent.fresh.Store(now) // nothing held, nothing owed: evictable
				e.deactivate(cs)
			case idle > int64(quietInterval) || cs.share.ample(cs.ws[0], snow) || cs.probedQuiet(now, snow):
				// Nothing to watch for until its next request, which asks
				// for a round if it needs one (its share serves it, or no
				// new window finds it starved): it leaves the scans now,
				// evictable two periods after its last use.
				ent.fresh.Store(cs.lastUse.Load() + keep)
				e.deactivate(cs)
			}
			return
		}
		ent.fresh.Store(math.MaxInt64)
		interval := cs.nextSync - cs.lastSync
		switch {
		case cs.kicked.Load() || len(cs.waiters) > 0 || starved || cs.tight && len(cs.late) > 0:
			// A tight key's hits set aside at a boundary go at once, and
			// it gets the new window's credit with them: the old window's
			// count is not final without them, and a tight key is short.
			cs.collected = true
			due = append(due, cs)
		case cs.holdsStill(now):
			// Busy, but nothing to push and a unit in hand: the next
			// request or the quiet interval syncs it.
		case now >= cs.nextSync:
			cs.collected = true
			due = append(due, cs)
		case now >= cs.nextSync-interval/10:
			cs.collected = true
			half = append(half, cs)
		}
	})
	if len(due) == 0 {
		for _, cs := range half {
			cs.mu.Lock()
			cs.collected = false
			cs.mu.Unlock()
		}
		return nil
	}
	return append(due, half...)
}

func maxPeriod(r *Rule) time.Duration {
	var p time.Duration
	for _, w := range r.Windows {
		p = max(p, w.Period)
	}
	return p
}
