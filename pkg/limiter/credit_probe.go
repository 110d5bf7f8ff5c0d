package limiter

import (
	"math"
	"time"
)

// Probes: a waiter's units charged in the round it waits for.
//
// A key that holds no credit and is not busy, and has no static share
// on this replica (a rule without shares, or a replica that joined after
// the epoch's sharers, whose shares leave room: a founding epoch's),
// has its waiters' units sent as a probe (SyncItem.Probe) in the round
// they wait for. The store charges, at its own instant, as many of them
// as fit beside the other replicas' reservations and shares, and says
// how many (SyncResult.Probed); the waiters they cover are admitted, in
// arrival order. Units that do not fit are not charged: a window charged
// with units nobody was granted would make the store revoke reservations
// other replicas may be spending while their rounds fly, and grant them
// again once the probe was refunded (one over the limit, found in
// TestSimSkewedRoundsLongTail). A key whose requests come too seldom for
// credit to pay (the round would ask for no more than its waiters need,
// or probeMost) asks for no credit beside, and nothing is left to push or
// hand back: one key sync a request, where credit took one to reserve and
// one to push the hit and hand the rest back. Units charged that no
// waiter takes (their waiters gave up, or a waiter's units did not fit
// whole) are refunded, stamped with the instant they were charged at, so
// the store frees them in that window (WindowState.RefundAt) while it
// still counts. A round that fails drops the probe: a store that applied
// it anyway over-counts the window, which is conservative. A probe that
// finds the key busy asks for credit at once, before the key's next
// request waits.
//
// A probe's item says no request waits (SyncItem.Waiting): the probe is
// their request. For a sliding window that keeps a key's first requests
// on a replica from marking it pressed, which would stop the store from
// handing units to replicas that run dry (KeyRecord.dryGetsOne) for as
// long as requests then wait.

// probeMost is the most credit a key may want (twice the requests its
// rate expects before its next sync) and be probed with no credit asked:
// credit costs a round to reserve it and one to push its hits and hand
// the rest back, a probe one round a request, so credit pays from three
// requests on. A key that wants more gets the rest in the probe's round.
const probeMost = 4

// probes is a key's probe bookkeeping, in its extras (keyExtras),
// made by its first probe. Its creditState's mu guards it.
type probes struct {
	n        int64 // units the in-flight sync probes for waiters; none admitted yet
	admitted int64 // units probes admitted since the last round (want's rate)
	refunds  []Hit // units charged for probes and not admitted, to refund
	sent     []Hit // those of refunds the in-flight sync pushes
}

// owed reports refunds to push.
func (p *probes) owed() bool { return p != nil && len(p.refunds) > 0 }

// takeAdmitted returns the units probes admitted since it was last
// called.
func (p *probes) takeAdmitted() int64 {
	if p == nil {
		return 0
	}
	a := p.admitted
	p.admitted = 0
	return a
}

// probeFor picks the units the round charges for the waiters: all of
// them, when the key has no credit, is not busy (its rounds come every
// sync interval, and credit rides them), no window of it ends within
// boundaryLead (nearEnd), and its last view, if any, has room for them
// beside the others' reservations and shares. A key with static shares
// is probed only while this replica holds no share of the epoch (it
// joined after the epoch's sharers) and, with no view, the sharers leave
// room (a founding epoch's hold half the window). cs.mu must be held.
func (e *engine) probeFor(cs *creditState, snow, now int64) int64 {
	if cs.busy || len(cs.waiters) == 0 || cs.waiting == 0 || cs.credit.Load() > 0 || cs.nearEnd(snow) {
		return 0
	}
	v := cs.view.Load()
	switch {
	case v != nil:
		if cs.waitOn(v, snow, int64(cs.waiting), v.others) != 0 {
			return 0
		}
	case cs.share != nil:
		if satAdd(e.sharesHeld(cs, snow, now), cs.waiting) > cs.ws[0].Limit {
			return 0
		}
	}
	if p := int64(cs.ws[0].Period); cs.share != nil && e.sharers(e.shareBase(cs.rule.Algorithm, snow/p*p, p), p, now) != 0 {
		return 0 // its share serves it, or the share's own waits apply
	}
	for _, w := range cs.waiters {
		w.probed = true
	}
	return int64(cs.waiting)
}

// sharesHeld is what the sharers of the epoch of snow hold of a key with
// static shares by the registry as last heard (a sliding window's or a
// token bucket's, with those of the next epoch): the whole window when the copy is too old to
// count them.
func (e *engine) sharesHeld(cs *creditState, snow, now int64) uint64 {
	w := cs.ws[0]
	mv := e.members.Load()
	if !mv.fresh(now) {
		return w.Limit
	}
	p := int64(w.Period)
	held := func(start int64) uint64 {
		n := mv.sharers(mv.shareBase(cs.rule.Algorithm, start, p), p)
		return satMul(ShareSize(w, cs.rule.shareFraction(), n), uint64(max(n, -n)))
	}
	h := held(snow / p * p)
	if aheadShares(cs.rule.Algorithm) {
		h = satAdd(h, held(snow/p*p+p))
	}
	return h
}

// probeWant is the credit a round that probes asks for: none when want
// is within what the waiters need or probeMost, else the rest of want.
func probeWant(want, waiting uint64) uint64 {
	if want <= max(waiting, probeMost) {
		return 0
	}
	return want - waiting
}

// addProbes puts in the item the probe and the refunds of units earlier
// probes had charged and no waiter took, each stamped with the instant
// it was charged at; those no window of the key counts at store instant
// snow any more are dropped. cs.mu must be held.
func (cs *creditState) addProbes(it *SyncItem, probe, snow int64) {
	if probe == 0 && cs.prb() == nil {
		return
	}
	p := &cs.extras().probes
	p.n = probe
	it.Probe = uint64(probe)
	var sent []Hit
	for _, h := range p.refunds {
		if cs.stillCounts(h.At, snow) {
			it.Hits = append(it.Hits, Hit{At: h.At, N: -h.N})
			sent = append(sent, h)
		}
	}
	p.refunds, p.sent = nil, sent
}

// stillCounts reports whether a unit charged at store instant at counts
// in a window of the key at store instant snow: at falls in the current
// or the previous window of its longest period (always, for a token
// bucket).
func (cs *creditState) stillCounts(at, snow int64) bool {
	if cs.rule.Algorithm == TokenBucket {
		return true
	}
	p := int64(maxPeriod(cs.rule) / time.Microsecond)
	return at/p >= snow/p-1
}

// nearEnd reports whether a window of the key ends within boundaryLead
// of store instant snow: a probe sent there is likely charged in the
// next window, which its waiters, asked for in this one, would rather
// have credit of. cs.mu must be held.
func (cs *creditState) nearEnd(snow int64) bool {
	if cs.rule.Algorithm == TokenBucket {
		return false
	}
	lead := int64(boundaryLead / time.Microsecond)
	for _, w := range cs.ws {
		if p := int64(w.Period); (snow/p+1)*p-snow <= lead {
			return true
		}
	}
	return false
}

// takeBackProbes strips from a failed round's hits the probe refunds
// addProbes appended, and keeps them for the next round; the probe is
// dropped, its waiters wait on. cs.mu must be held.
func (cs *creditState) takeBackProbes(hits []Hit) []Hit {
	p := cs.prb()
	if p == nil {
		return hits
	}
	n := len(p.sent)
	p.refunds = append(p.refunds, p.sent...)
	p.sent, p.n = nil, 0
	for _, w := range cs.waiters {
		w.probed = false
	}
	return hits[:len(hits)-n]
}

// settleProbe admits, in arrival order, the waiters the round's probe
// was charged for (SyncResult.Probed), and keeps the units charged that
// it does not admit to refund. The rest wait on (settleWaiters decides
// on them). It reports whether the round probed. cs.mu must be held.
func (e *engine) settleProbe(cs *creditState, r *SyncResult) bool {
	p := cs.prb()
	if p == nil {
		return false
	}
	p.sent = nil
	if p.n == 0 {
		return false
	}
	p.n = 0
	room := int64(min(r.Probed, math.MaxInt64/2))
	var admitted int64
	kept := cs.waiters[:0]
	for _, w := range cs.waiters {
		if w.probed && admitted+w.n <= room {
			w.probed = false
			admitted += w.n
			cs.waiting -= uint64(w.n)
			w.done <- true
			continue
		}
		w.probed = false
		kept = append(kept, w)
	}
	clear(cs.waiters[len(kept):])
	cs.waiters = kept
	p.admitted += admitted
	if left := room - admitted; left > 0 {
		p.refunds = append(p.refunds, Hit{At: r.Now, N: left})
		e.activate(cs)
		cs.kicked.Store(true)
	}
	return true
}
