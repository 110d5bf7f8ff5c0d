package limiter

import (
	"math"
	"runtime"
	"time"
)

// The per-key half of a sync round: what a key sends, and what it does
// with the store's answer.

// reserveShare: a quarter of each grant is held back for waiters whose
// round runs past their StoreTimeout.
const reserveShare = 4

// boundaryLead is how close to a window boundary the hits admitted so far
// are set aside: within one tick, plus a margin.
const boundaryLead = tick + 2*time.Millisecond

// starvedInNewWindow reports a key whose view predates the current window
// of its shortest period while it holds less than half its last grant: the
// old window's tight budget left it short, and the new window has room, so
// it syncs now rather than make its next request wait (a sliding
// window's, if the view leaves a unit for each of the n replicas at
// snow). A token bucket's
// whose share of the new epoch was released ahead (a busy key) syncs too,
// to release the share of the epoch after: until every replica has, the
// credit granted out of the released shares lapses as the epoch ends.
// cs.mu must be held.
func (cs *creditState) starvedInNewWindow(snow, n int64) bool {
	v := cs.view.Load()
	if v != nil && cs.rule.Algorithm == TokenBucket && cs.share != nil {
		ep := snow / int64(cs.ws[0].Period)
		return v.windows[0].Epoch < ep && cs.share.releasedThrough() == ep
	}
	if v == nil || cs.rule.Algorithm == TokenBucket || cs.share.ample(cs.ws[0], snow) {
		return false
	}
	i := 0
	for j, w := range cs.ws {
		if w.Period < cs.ws[i].Period {
			i = j
		}
	}
	if v.windows[i].Epoch >= snow/int64(cs.ws[i].Period) || 2*cs.credit.Load() >= max(cs.grant.Load(), 1) {
		return false
	}
	// A sliding window's new epoch counts the old one whole at its
	// start: one the old epoch nearly filled has room for a unit or two,
	// which every starved replica's round would race for at the boundary
	// (one round a replica an epoch, for every key at its limit, most of
	// them granted nothing). It syncs now only if the view leaves
	// starvedRoom units for each of the n replicas; else its next request
	// asks.
	return cs.rule.Algorithm != SlidingWindow ||
		v.windows[i].Remaining(cs.ws[i], SlidingWindow, snow) >= satAdd(v.others, starvedRoom*uint64(max(n, 1)))
}

// starvedRoom is the units a sliding window's view must leave for each
// replica at an epoch's start for a starved key to sync then. The view
// is up to a sync interval old and does not count what the others spent
// since: with one unit a replica, the rounds of workload B's keys near
// their limit most often got nothing (with 4, the simulation of workload
// B of a sliding window at 10 000 requests a second took 5 % fewer key
// syncs, at 3 000 10 %, its waits 2 % more).
const starvedRoom = 4

// holdsStill reports a key that has nothing to push, no waiter and one
// unit of credit, at most, within a quiet interval of its last sync: its
// busy interval would only refresh its view. cs.mu must be held.
func (cs *creditState) holdsStill(now int64) bool {
	c := cs.credit.Load()
	return c >= 0 && c <= 1 && !cs.refill && cs.hits.Load() == 0 && cs.refunds.Load() == 0 && len(cs.late) == 0 && !cs.prb().owed() &&
		now-cs.lastSync < int64(quietInterval)
}

// needsSync: a key with nothing to push, no credit backed at now (local
// ns) and no waiters has nothing to say to the store: credit whose
// reservation lapsed is not handed back, the store drops the
// reservation itself (a sync a key, a second after a grant its requests
// did not spend, found nothing to say). cs.mu must be held.
func (cs *creditState) needsSync(now int64) bool {
	return cs.hits.Load() != 0 || cs.refunds.Load() != 0 || len(cs.late) > 0 || cs.prb().owed() ||
		cs.credit.Load() > 0 && now < cs.backedTo.Load() || len(cs.waiters) > 0 || cs.refill ||
		cs.kicked.Load() || cs.view.Load() == nil && cs.share == nil || cs.share != nil && cs.share.has(flagRelease|flagShrink)
}

// prepare takes the key's pending hits and builds its item.
func (e *engine) prepare(cs *creditState, now int64) SyncItem {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.serveFromShare(e, now)
	cs.inflight, cs.sentAt, cs.asked, cs.collected = true, now, cs.waiting, false
	cs.kicked.Store(false)
	snow := e.storeNow(now)
	want := cs.want(now, snow, max(cs.hits.Load(), 0)+cs.share.pendingUnits()+cs.prb().takeAdmitted())
	if len(cs.waiters) == 0 && cs.share.ample(cs.ws[0], snow) {
		want = 0 // the share has room: no credit beside it
	}
	cs.handBack(want)
	if yield := cs.yield.Swap(false); len(cs.waiters) == 0 && (yield || now-cs.lastUse.Load() > int64(quietInterval) || cs.settlingLocked(e, now)) {
		// Idle, or asked to yield to another replica's waiters: hand the
		// reservation back. Its credit leaves the hot path's reach first:
		// a request arriving while the round is in flight would spend
		// units the store no longer backs.
		cs.withdraw()
		want = 0
	}
	var taken []Hit
	probe := e.probeFor(cs, snow, now)
	if probe > 0 {
		want = probeWant(want, cs.waiting) // the probe asks for the waiters' units
	}
	cs.unused, taken = cs.settle(snow)
	it := SyncItem{
		Key: cs.key, Algorithm: cs.rule.Algorithm, Windows: cs.rule.Windows,
		Unused: uint64(cs.unused), Want: want, Waiting: cs.waitingFor(e, now), Denied: uint64(cs.denied.Swap(0)),
		Share: cs.rule.Tuning.share(), Replicas: int(e.replicas.Load()), Lease: lease,
	}
	it.Hits = cs.pushHits(taken, snow)
	if probe > 0 {
		it.Waiting = 0 // the probe is their request
	}
	cs.addProbes(&it, probe, snow)
	if v := cs.view.Load(); v != nil {
		it.Floor, it.FloorGen = v.windows, v.gen
	}
	if cs.share != nil {
		e.shareFields(cs, &it, snow, now)
	}
	cs.settleHold(e, &it, now)
	cs.flying = 0
	for _, hs := range [][]Hit{it.Hits, it.ShareHits} {
		for _, h := range hs {
			cs.flying += max(h.N, 0)
		}
	}
	return it
}

// waitingFor is the units the round asks the store for on behalf of the
// waiters: none while the key's share is within the clock's uncertainty
// of an epoch boundary. The share of the epoch that begins may serve
// them once it is known; the store, which counts that share as held by
// this replica, would see them as pressing for the other replicas'
// shares, and have those released for the rest of the epoch. cs.mu must
// be held.
func (cs *creditState) waitingFor(e *engine, now int64) uint64 {
	if cs.waiting > 0 && cs.share != nil {
		if _, at := e.spendShare(cs, 1, now, true); at > 0 {
			return 0
		}
	}
	return cs.waiting
}

// want sizes the credit to ask for from the key's rate until its next
// regular sync (one sync interval when busy, a second when quiet), doubled,
// at least what waiters need. For a tight fixed-window key the horizon
// ends with the first window: credit held past it blocks the other
// replicas from that window's last units, and the key syncs again when
// the next one starts. A tight sliding-window key, whose units free a few
// at a time, looks one sync interval ahead.
func (cs *creditState) want(now, snow, pushed int64) uint64 {
	if cs.lastSync > 0 && now > cs.lastSync {
		sample := float64(max(pushed, 0)) / (float64(now-cs.lastSync) / 1e9)
		cs.rate = (cs.rate + sample) / 2
	}
	horizon := quietInterval.Seconds()
	if cs.busy {
		horizon = cs.rule.Tuning.syncInterval().Seconds()
	}
	if cs.tight && cs.rule.Algorithm == SlidingWindow {
		horizon = min(horizon, cs.rule.Tuning.syncInterval().Seconds())
	}
	if cs.tight && cs.rule.Algorithm == FixedWindow {
		for _, w := range cs.ws {
			p := int64(w.Period)
			horizon = min(horizon, float64((snow/p+1)*p-snow)/1e6)
		}
	}
	w := uint64(math.Ceil(cs.rate * horizon * 2))
	w = max(w, cs.waiting, 1)
	return min(w, cs.capacity)
}

// handBack gives up the credit above want for a tight fixed- or
// sliding-window key, so the store can grant it to the replicas that need
// it while the window has room.
// The units leave the hot path's reach before the round reports the
// smaller reservation. cs.mu must be held.
func (cs *creditState) handBack(want uint64) {
	if !cs.tight || cs.rule.Algorithm == TokenBucket || len(cs.waiters) > 0 {
		return
	}
	for {
		c := cs.credit.Load()
		if c <= int64(want) || cs.credit.CompareAndSwap(c, int64(want)) {
			return
		}
	}
}

// settle reads the credit a round reports unused and takes the hits it
// pushes, consistently with the hot path: every unit spent is in the
// credit read or among the hits taken (both only over-counts), never in
// neither. A spend between taking its credit and counting its hit is in
// transit (spending); the read is made again until none is. cs.mu must
// be held. The hits are taken stamped for a push at store instant snow
// (takeHits).
func (cs *creditState) settle(snow int64) (unused int64, hits []Hit) {
	for {
		c := cs.credit.Load()
		if cs.spending.Load() == 0 {
			return max(c, 0), cs.takeHits(snow)
		}
		runtime.Gosched()
	}
}

// withdraw takes all the key's positive credit out of the hot path's
// reach.
func (cs *creditState) withdraw() {
	for {
		c := cs.credit.Load()
		if c <= 0 || cs.credit.CompareAndSwap(c, 0) {
			return
		}
	}
}

// pushHits lists what a round pushes: the hits set aside before a window
// boundary, the refunds, at snow, then the hits admitted since, taken
// (takeHits). cs.mu must be held.
func (cs *creditState) pushHits(taken []Hit, snow int64) []Hit {
	hits := cs.late
	cs.late = nil
	if rf := cs.refunds.Swap(0); rf != 0 {
		hits = append(hits, Hit{At: snow, N: -rf})
	}
	return append(hits, taken...)
}

// abort puts back what a failed round took. The hits are set aside with
// the instants they were stamped with, ahead of those set aside since:
// pushed after recovery, each charges the window it was admitted in, so
// an outage's admits count in the windows of the outage, not in the one
// current at recovery (where they would deny keys under their limit).
// One entry per window of the shortest period, at most maxLate: past
// that the oldest are merged into the next.
func (cs *creditState) abort(it SyncItem) {
	cs.share.untake(it)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	p := shortest(cs.ws)
	var back []Hit
	for _, h := range cs.takeBackProbes(it.Hits) {
		if h.N < 0 {
			cs.refunds.Add(-h.N)
			continue
		}
		back = appendHit(back, h, p)
	}
	for _, h := range cs.late {
		back = appendHit(back, h, p)
	}
	for len(back) > maxLate {
		back[1].N += back[0].N
		back = back[1:]
	}
	cs.late = back
	cs.inflight, cs.flying = false, 0
}

// maxLate bounds the hits a key sets aside by window (abort).
const maxLate = 8

// appendHit appends h to hits, into the last one if both fall in one
// window of period p (store µs), stamped with the later instant.
func appendHit(hits []Hit, h Hit, p int64) []Hit {
	if k := len(hits) - 1; k >= 0 && hits[k].At/p == h.At/p {
		hits[k] = Hit{At: max(hits[k].At, h.At), N: hits[k].N + h.N}
		return hits
	}
	return append(hits, h)
}

// apply installs a store reply: the credit (minus what was admitted while
// the round was in flight), the view, the waiters served, the next due
// time and, for an exhausted key, a local denial window.
func (e *engine) apply(cs *creditState, r *SyncResult) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	now := e.now()
	cs.credit.Add(int64(r.Credit) - cs.unused)
	cs.grant.Store(int64(r.Credit))
	backed := cs.sentAt + int64(lease) - int64(cs.rule.Tuning.syncInterval())
	if r.Expires > 0 {
		// Credit from shares released in this epoch lapses at its end.
		backed = min(backed, e.localOf(r.Expires)-max(int64(boundaryLead), 2*e.clockErr.Load()))
	}
	cs.backedTo.Store(backed)
	cs.view.Store(newView(r))
	e.takeLoan(cs, r)
	cs.inflight, cs.flying, cs.lastSync = false, 0, now
	probed := e.settleProbe(cs, r)
	if now < backed {
		// A reply that arrives after its reservation lapsed (an epoch's
		// end, on a slow store) serves nobody.
		cs.serveWaiters(e.hitSec(now))
	}
	cs.serveFromShare(e, now)
	cs.refreshOverrun(e, now)
	snow := e.storeNow(now)
	cs.busy = len(cs.waiters) > 0 || cs.halfUsed(snow, false)
	cs.tight = cs.busy || cs.halfUsed(snow, true) && e.replicas.Load() > 1
	interval := quietInterval
	if cs.busy {
		interval = cs.rule.Tuning.syncInterval()
	}
	cs.refill = cs.rule.Algorithm == SlidingWindow && !r.Pressed && cs.busy && cs.credit.Load() <= 0 && len(cs.waiters) == 0
	if cs.refill {
		// A sliding window frees units one at a time: a busy key left
		// without credit asks again once the view says one is free, not a
		// whole interval later, when its next request would wait.
		interval = min(interval, max(cs.viewWait(snow, 1), tick))
		e.enqueue(cs)
	}
	cs.heldWait = r.Contended
	if r.Contended {
		// Other replicas release their shares once they read the key
		// published: ask again soon rather than deny on this view, and
		// let the waiters wait for it.
		cs.releasing.Store(now + int64(contentionWait))
		if r.Held > 0 {
			// A holder may be a replica that just left: a fresh copy of
			// the registry names it gone (SyncItem.Gone).
			e.beatSoon.Store(true)
		}
		interval = min(interval, e.heldRetry())
		cs.refill = true
		e.enqueue(cs)
	}
	cs.nextSync = now + int64(interval)
	if cs.share != nil && cs.rule.Algorithm == TokenBucket && cs.credit.Load() > 0 && now-cs.lastUse.Load() < int64(quietInterval) {
		// A token bucket's credit lapses in the middle of an epoch, when
		// it carried over from the one before (bucketCarry): a key in use
		// asks again before then, not after its next request waits (a
		// key due is taken by the next full scan).
		cs.nextSync = min(cs.nextSync, max(now, backed-int64(fullScanEvery+tick)))
	}
	if probed && cs.busy && cs.credit.Load() <= 0 && cs.kicked.CompareAndSwap(false, true) {
		// Probed, and busy: credit now, before its next request waits.
		e.enqueue(cs)
		e.kick()
	}
	if len(cs.waiters) > 0 {
		cs.settleWaiters(e, now, r.Contended, now < backed, int64(r.Credit) > cs.unused)
	} else if cs.credit.Load() <= 0 {
		cs.deniedIfFull(e, now)
	}
	if cs.kicked.Load() || len(cs.waiters) > 0 {
		e.enqueue(cs) // asked again while the round was in flight
	}
}

// heldRetry is how soon a key whose budget others hold is asked again:
// the release or shrink it waits for takes the others a read of the feed
// and a round, two round trips at least, and rounds other keys start
// meanwhile would only find it held again (a newcomer asked 3 to 35
// times a key). At least a millisecond, at most a tick.
func (e *engine) heldRetry() time.Duration {
	return min(max(2*time.Duration(e.roundTrip.Load()), time.Millisecond), tick)
}

// halfUsed reports whether over half of a window of the view is used,
// or with reserved, used or reserved by any replica. cs.mu must be held.
func (cs *creditState) halfUsed(snow int64, reserved bool) bool {
	v := cs.view.Load()
	var held uint64
	if reserved {
		held = satAdd(v.others, uint64(max(cs.credit.Load(), 0)))
	}
	for i, w := range cs.ws {
		capacity := w.Capacity(cs.rule.Algorithm)
		if 2*satAdd(satSub(capacity, v.windows[i].Remaining(w, cs.rule.Algorithm, snow)), held) > capacity {
			return true
		}
	}
	return false
}

// snapshotBoundary sets the unpushed hits aside, stamped as takeHits
// stamps them, when the key's shortest window ends within boundaryLead,
// so the round after the boundary charges them to the window they were
// admitted in rather than starving the new one. For windows of whole
// seconds, every window the RLS API can express, takeHits alone already
// does that; this remains for shorter ones. cs.mu must be held.
func (cs *creditState) snapshotBoundary(snow int64) {
	if cs.hits.Load() == 0 {
		return
	}
	p := shortest(cs.ws)
	if (snow/p+1)*p-snow > int64(boundaryLead/time.Microsecond) {
		return
	}
	cs.late = append(cs.late, cs.takeHits(snow)...) // rides the next round
}
