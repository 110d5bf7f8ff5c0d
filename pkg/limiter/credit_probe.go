package limiter

import "time"

// Probes: a waiter's units charged in the round it waits for.
//
// A key that holds no credit and is not busy, and has no static share
// on this replica (a rule without shares, or a replica that joined after
// the epoch's sharers, whose shares leave room: a founding epoch's),
// has its waiters' units charged as a hit in the round they wait for. The
// reply says whether they fit beside the other replicas' reservations;
// if so they are admitted. A key whose requests come too seldom for
// credit to pay (the round would ask for no more than its waiters need,
// or probeMost) asks for no credit beside, and nothing is left to push or
// hand back: one key sync a request, where credit took one to reserve and
// one to push the hit and hand the rest back. Units a reply does not
// admit (no room, or their waiters gave up) are refunded while every
// window they were charged to is still the current one; past its end they
// stay charged to it, which over-counts a window gone by (a sliding
// window's previous one: conservative). A round that fails drops them: a
// store that applied them anyway over-counts the same way. A probe that
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
	n, at    int64 // units the in-flight sync charges for waiters, at store µs at; none admitted yet
	admitted int64 // units probes admitted since the last round (want's rate)
	refunds  []Hit // units of probes not admitted, to refund
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
	if cs.share != nil && e.sharers(snow/int64(cs.ws[0].Period)*int64(cs.ws[0].Period), int64(cs.ws[0].Period), now) != 0 {
		return 0 // its share serves it, or the share's own waits apply
	}
	for _, w := range cs.waiters {
		w.probed = true
	}
	return int64(cs.waiting)
}

// sharesHeld is what the sharers of the epoch of snow hold of a key with
// static shares by the registry as last heard: the whole window when the
// copy is too old to count them.
func (e *engine) sharesHeld(cs *creditState, snow, now int64) uint64 {
	w := cs.ws[0]
	mv := e.members.Load()
	if !mv.fresh(now) {
		return w.Limit
	}
	p := int64(w.Period)
	n := mv.sharers(snow/p*p, p)
	if n == 0 {
		return 0
	}
	size := ShareSize(w, cs.rule.Tuning.share(), n)
	return satMul(size, uint64(max(n, -n)))
}

// probeWant is the credit a round that probes asks for: none when want
// is within what the waiters need or probeMost, else the rest of want.
func probeWant(want, waiting uint64) uint64 {
	if want <= max(waiting, probeMost) {
		return 0
	}
	return want - waiting
}

// addProbes appends to the item the probe, charged at snow, and the
// refunds of earlier probes still in their windows, not within
// boundaryLead of their end (the store refunds in the window current
// when it applies them); it keeps those near the end for the next round,
// which drops them once their window is over. cs.mu must be held.
func (cs *creditState) addProbes(it *SyncItem, probe, snow int64) {
	if probe == 0 && cs.prb() == nil {
		return
	}
	p := &cs.extras().probes
	p.n, p.at = probe, snow
	if probe > 0 {
		it.Hits = append(it.Hits, Hit{At: snow, N: probe})
	}
	var sent, kept []Hit
	near := cs.nearEnd(snow)
	for _, h := range p.refunds {
		switch {
		case !cs.sameWindows(h.At, snow):
		case near:
			kept = append(kept, h)
		default:
			it.Hits = append(it.Hits, Hit{At: snow, N: -h.N})
			sent = append(sent, h)
		}
	}
	p.refunds, p.sent = kept, sent
}

// nearEnd reports whether a window of the key ends within boundaryLead
// of store instant snow: a probe charged there may be applied in the next
// window, where its units, not admitted, could not be refunded.
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

// sameWindows reports whether store instants a and b fall in the same
// window of every period of the key (always for a token bucket).
func (cs *creditState) sameWindows(a, b int64) bool {
	if cs.rule.Algorithm == TokenBucket {
		return true
	}
	for _, w := range cs.ws {
		if a/int64(w.Period) != b/int64(w.Period) {
			return false
		}
	}
	return true
}

// takeBackProbes strips from a failed round's hits the probe and the
// probe refunds addProbes appended, and keeps the refunds for the next
// round. cs.mu must be held.
func (cs *creditState) takeBackProbes(hits []Hit) []Hit {
	p := cs.prb()
	if p == nil {
		return hits
	}
	n := len(p.sent)
	if p.n > 0 {
		n++
	}
	p.refunds = append(p.refunds, p.sent...)
	p.sent, p.n = nil, 0
	for _, w := range cs.waiters {
		w.probed = false
	}
	return hits[:len(hits)-n]
}

// settleProbe admits, in arrival order, the waiters the round's probe
// charged for that the reply has room for, and keeps the units it does
// not admit to refund. The rest wait on (settleWaiters decides on them).
// It reports whether the round probed. cs.mu must be held.
func (e *engine) settleProbe(cs *creditState, r *SyncResult) bool {
	p := cs.prb()
	if p == nil {
		return false
	}
	p.sent = nil
	n := p.n
	if n == 0 {
		return false
	}
	p.n = 0
	room := cs.probeRoom(r, n)
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
	if left := n - admitted; left > 0 {
		p.refunds = append(p.refunds, Hit{At: p.at, N: left})
		e.activate(cs)
		cs.kicked.Store(true)
	}
	return true
}

// probeRoom is how many of the n units the round charged (at probes.at) fit
// beside the other replicas' reservations and this one's: the reply's
// windows, which count them, less them, hold that much room, in the
// windows they were charged to; at most n.
func (cs *creditState) probeRoom(r *SyncResult, n int64) int64 {
	if len(r.Windows) != len(cs.ws) || !cs.sameWindows(cs.prb().at, r.Now) {
		return 0
	}
	held := satAdd(r.Others, r.Credit)
	room := uint64(n)
	for i, w := range cs.ws {
		before := r.Windows[i]
		before.Refund(w, cs.rule.Algorithm, r.Now, uint64(n))
		room = min(room, satSub(before.Remaining(w, cs.rule.Algorithm, r.Now), held))
	}
	return int64(room)
}
