package limiter

import (
	"math"
	"time"
)

// Waiting on the store: a request that found no credit waits for a sync
// round, or past its StoreTimeout for the other replicas to release what
// they hold of a contended key; the rounds serve the waiters.

// wait registers a request that found no credit, asks for a sync and waits
// the rule's StoreTimeout, or longer while the store answers (the loop
// says how long, never past StoreTimeout + contentionWait, 180 ms). Past
// that the request is an overrun: it is admitted from the credit the hot
// path holds back (a quarter of the last grant), which the reservation
// covers; failing that, while the store is usually fast, on the last
// view within this replica's share of it; else it is denied.
func (e *engine) wait(cs *creditState, rule *Rule, n int64, now int64) Result {
	w := &waiter{n: n, done: make(chan bool, 1)}
	cold := cs.view.Load() == nil
	cs.mu.Lock()
	cs.waiters = append(cs.waiters, w)
	cs.waiting += uint64(n)
	cs.mu.Unlock()
	if cs.kicked.CompareAndSwap(false, true) {
		e.enqueue(cs)
	}
	e.kick()
	timeout := rule.Tuning.storeTimeout()
	t := time.NewTimer(timeout)
	defer t.Stop()
	start, last := now, now+int64(timeout+contentionWait)
	for {
		select {
		case ok := <-w.done:
			return e.afterWait(cs, ok, n, cold)
		case <-t.C:
		}
		// Past StoreTimeout a waiter waits on while the store answers:
		// until its round may be expected (roundDue: the round it asked
		// for may have had to wait for the one in flight); on a key the
		// store published as contended, and a store fast enough for the
		// releases and the next round to come in time, for the other
		// replicas to release their shares: the window is not full, only
		// held. A waiter about to give up on a key with a static share
		// waits instead for its next epoch, if that begins in time, whose
		// share serves it (nextShareEpoch). Never past StoreTimeout +
		// contentionWait.
		now := e.now()
		until := e.roundDue(start, timeout, last)
		if e.fastStore() {
			until = max(until, min(cs.releasing.Load(), last))
		}
		if until <= now {
			until = e.nextShareEpoch(cs, now, last)
		}
		if until <= now {
			break
		}
		t.Reset(time.Duration(until - now))
	}
	if ok, served := cs.dropWaiter(w); served {
		return e.afterWait(cs, ok, n, cold)
	}
	now = e.now()
	if e.degraded(rule, now) || e.settling(cs, now) {
		// The store went unreachable while it waited: decided as a
		// request arriving now is, in the key's fail-static windows, which
		// must count every unit the replica admits in the outage.
		return e.degradedDecide(cs, rule, n, now)
	}
	// The round is late (a slow store). The credit held back for this
	// case pays, so the admit is still covered by this replica's
	// reservation; without it the request is denied rather than decided
	// on a view every other replica may be spending too.
	ok, wait := false, time.Duration(0)
	if now < cs.backedTo.Load() {
		if _, ok = cs.spendCredit(n, 0, e.hitSec(now)); ok {
			e.count(ModeOverrun)
		}
	}
	if !ok && cs.share != nil {
		if ok = e.shareAfterWait(cs, n, now); ok {
			e.count(ModeOverrun)
		}
	}
	if !ok {
		ok, wait = e.viewAdmits(cs, now, n)
		if ok = ok && e.overrunOnView(cs, rule, n); ok {
			cs.addHits(n, e.hitSec(now))
			e.count(ModeOverrun)
		} else {
			wait = max(wait, rule.Tuning.syncInterval())
		}
	}
	if ok {
		e.missedBySeed(cs, rule, n)
	}
	var res Result
	e.viewResult(&res, cs, now, ok, wait)
	res.Mode = ModeOverrun
	return res
}

// nextShareEpoch is when a waiter about to give up on a key with a
// static share waits until instead: the local instant this replica
// knows the key's next epoch has begun, if that comes by last, on a
// store fast enough for its clock's uncertainty to be narrow. The next
// epoch's share serves it there (serveFromShare, shareAfterWait): a
// request a few milliseconds from a window's end, denied for units the
// other replicas held of that window, is admitted from the next one,
// which counts it as the store would. Zero otherwise.
func (e *engine) nextShareEpoch(cs *creditState, now, last int64) int64 {
	if cs.share == nil || !e.fastStore() {
		return 0
	}
	slack := e.clockErr.Load()/1000 + 1
	p := int64(cs.ws[0].Period)
	snow := e.storeNow(now)
	if at := e.localOf((snow/p+1)*p + slack); at > now && at <= last {
		return at
	}
	return 0
}

// shareAfterWait admits a timed-out waiter from the key's static share:
// a window may have begun while it waited. Within the clock's uncertainty
// of the boundary it waits until the epoch is known, on a fast store only
// and at most another StoreTimeout: a slow store's uncertainty is too
// wide to wait out.
func (e *engine) shareAfterWait(cs *creditState, n, now int64) bool {
	ok, known := e.spendShare(cs, n, now, false)
	if ok || known <= now || !e.fastStore() || known-now > int64(cs.rule.Tuning.storeTimeout()) {
		return ok
	}
	time.Sleep(time.Duration(known - now))
	ok, _ = e.spendShare(cs, n, e.now(), false)
	return ok
}

// overrunOnView reports whether a timed-out waiter that no held-back
// credit covers may be admitted on the last view, which the view says has
// room: only while the store answers in time as a rule (a round that is
// late now and then), and within this replica's share (1/N, once per
// window) of what the view left free. A store that is slow as a rule gets
// no such admits: every replica would spend the same free budget, which
// the store keeps granting until the admits are pushed. Neither does a
// key with static shares: a view does not show the shares of an epoch
// that began after it. Nor does a replica whose N is not settled: the
// replicas' parts add up to what is free only where they count the same
// N, and a replica that joined, or heard N change, within a lease may
// count one the others do not know yet (or that knows only itself).
func (e *engine) overrunOnView(cs *creditState, rule *Rule, n int64) bool {
	if cs.share != nil || !e.storeHealthy() || time.Duration(e.roundTrip.Load()) >= rule.Tuning.storeTimeout() || !e.settledN(e.now()) {
		return false
	}
	if cs.overrunLeft.Add(-n) < 0 {
		cs.overrunLeft.Add(n)
		return false
	}
	return true
}

// settledN reports whether N has been the same for a lease, by a young
// copy of the registry.
func (e *engine) settledN(now int64) bool {
	since := e.replicasSince.Load()
	return since != 0 && now-since >= int64(lease) && e.registryFresh(now)
}

// roundDue is when a waiter that began at start stops waiting for the
// round it asked for, past its StoreTimeout, on a store that answers.
// A store usually fast (its fastest recent round trips, which bound the
// uncertainty of its clock, fit well within StoreTimeout) whose round is
// late now and then is waited for until last: a late round there is a
// busy moment, and waiting is the only answer that neither denies a key
// under its limit nor admits one over it. Otherwise two of the store's
// usual round trips (the one in flight and its own), at least
// StoreTimeout, after the timeout, if that ends within lateRoundWait;
// zero when it does not, or the store does not answer: on a store that
// slow a waiter does not wait past its StoreTimeout.
func (e *engine) roundDue(start int64, timeout time.Duration, last int64) int64 {
	if !e.storeHealthy() || e.lastOK.Load() == 0 {
		return 0
	}
	if 4*e.clockErr.Load() < int64(timeout) {
		return last
	}
	due := start + int64(timeout) + max(int64(timeout), 2*e.roundTrip.Load())
	if due > start+int64(timeout+lateRoundWait) {
		return 0
	}
	return due
}

// fastStore reports a store known to answer fast enough for a release
// and a round to fit in contentionWait: its smoothed round trip, and
// twice the uncertainty of its clock, both well within it.
func (e *engine) fastStore() bool {
	rt := max(time.Duration(e.roundTrip.Load()), 2*time.Duration(e.clockErr.Load()))
	return e.lastOK.Load() != 0 && 3*rt < contentionWait
}

func (e *engine) afterWait(cs *creditState, ok bool, n int64, cold bool) Result {
	now := e.now()
	mode := ModeSync
	if cold {
		mode = ModeCold
	}
	e.count(mode)
	var wait time.Duration
	if !ok {
		_, wait = e.viewAdmits(cs, now, n)
	}
	var res Result
	e.viewResult(&res, cs, now, ok, wait)
	res.Mode = mode
	return res
}

// dropWaiter removes w after its timeout; served reports that a sync
// decided it meanwhile, with ok its answer.
func (cs *creditState) dropWaiter(w *waiter) (ok, served bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, x := range cs.waiters {
		if x == w {
			cs.waiters = append(cs.waiters[:i], cs.waiters[i+1:]...)
			cs.waiting -= uint64(w.n)
			return false, false
		}
	}
	select {
	case ok = <-w.done:
		return ok, true
	default:
		return false, false
	}
}

// serveFromShare admits the waiters the key's static share now holds
// units for: those that arrived in an epoch whose share was spent or not
// held, or too near its end to use it, still waiting when the next epoch
// began. Asking the store for them would find the budget held by the
// shares, this replica's among them, and make the others release theirs.
// cs.mu must be held.
func (cs *creditState) serveFromShare(e *engine, now int64) {
	if cs.share == nil || len(cs.waiters) == 0 {
		return
	}
	cs.serveWith(func(n int64) bool {
		ok, _ := e.spendShare(cs, n, now, false)
		return ok
	})
}

// serveWaiters hands fresh credit to the waiters in arrival order; those it
// cannot serve are denied when the view says they cannot fit soon. cs.mu
// must be held. Their hits are of second sec of the store clock.
func (cs *creditState) serveWaiters(sec int64) {
	cs.serveWith(func(n int64) bool {
		_, ok := cs.spendCredit(n, 0, sec)
		return ok
	})
}

// serveWith admits, in arrival order, the waiters admit lets through;
// the others keep waiting. cs.mu must be held.
func (cs *creditState) serveWith(admit func(n int64) bool) { cs.answerWaiters(admit, true) }

// answerWaiters answers ok, in arrival order, to the waiters pick picks;
// the others keep waiting. cs.mu must be held.
func (cs *creditState) answerWaiters(pick func(n int64) bool, ok bool) {
	kept := cs.waiters[:0]
	for _, w := range cs.waiters {
		if pick(w.n) {
			cs.waiting -= uint64(w.n)
			w.done <- ok
			continue
		}
		kept = append(kept, w)
	}
	clear(cs.waiters[len(kept):])
	cs.waiters = kept
}

// refreshOverrun sets the overrun budget from the new view: a fresh share
// in a new window, never more than what is left of the window's share
// within one, since overruns not yet pushed are missing from every view.
// cs.mu must be held.
func (cs *creditState) refreshOverrun(e *engine, now int64) {
	share := cs.overrunShare(e, now)
	snow := e.storeNow(now)
	epoch := snow / int64(cs.ws[0].Period)
	if epoch == cs.overrunEpoch {
		share = min(share, cs.overrunLeft.Load())
	}
	cs.overrunEpoch = epoch
	cs.overrunLeft.Store(share)
}

// overrunShare is this replica's share (1/N) of what the view leaves free
// after the other replicas' reservations, the hits not yet pushed and its
// own credit. cs.mu must be held.
func (cs *creditState) overrunShare(e *engine, now int64) int64 {
	v := cs.view.Load()
	snow := e.storeNow(now)
	free := uint64(math.MaxUint64)
	for i, w := range cs.ws {
		free = min(free, satSub(v.windows[i].Remaining(w, cs.rule.Algorithm, snow), v.others))
	}
	held := max(cs.hits.Load(), 0) + max(cs.credit.Load(), 0)
	return max(int64(min(free, math.MaxInt64/2))-held, 0) / max(e.replicas.Load(), 1)
}

// settleWaiters handles the waiters a sync could not serve. Those that
// cannot fit even once the other replicas release the static shares they
// hold are denied at once; the window is full but for reservations. If
// not even one unit fits so and no credit is left, the key denies
// locally until it would (for at most deniedFor). The rest ask for
// another round: at once, unless the reply's credit had lapsed, the
// shares they need are held or the round asked for them all and got
// nothing, when they wait for the next tick, and for the release
// (releasing) past their StoreTimeout. cs.mu must be held.
func (cs *creditState) settleWaiters(e *engine, now int64, contended, usable, gained bool) {
	snow := e.storeNow(now)
	cs.answerWaiters(func(n int64) bool { return cs.releasedWait(snow, n) > 0 }, false)
	if cs.credit.Load() <= 0 {
		cs.deniedIfFull(e, now)
	}
	if len(cs.waiters) == 0 {
		return
	}
	cs.kicked.Store(true)
	v := cs.view.Load()
	held := cs.keptElsewhere(v) < v.others
	if held {
		// The next round says they wait, and the store has the other
		// replicas give up what they hold: they wait for that.
		cs.releasing.Store(max(cs.releasing.Load(), now+int64(contentionWait)))
	}
	// At once only when this round could not have served them: it granted
	// units it did not hold before (gained), or more are waiting than it
	// asked for. A round that asked for them all and got nothing new
	// would get nothing again: the next tick's round asks, rather than a
	// loop of rounds with no pause. (One that kept the credit it had, too
	// little for a request of several units, and kicked again, looped in
	// one instant: a simulation's virtual clock stopped there.)
	if usable && !contended && !held && (gained || cs.waiting > cs.asked) {
		e.kick()
	}
}

// deniedIfFull has the key deny locally while not even one unit fits in
// its view once the other replicas release what they hold (deniedFor).
// cs.mu must be held.
func (cs *creditState) deniedIfFull(e *engine, now int64) {
	if wait := cs.releasedWait(e.storeNow(now), 1); wait > 0 {
		cs.deniedTo.Store(now + int64(cs.deniedFor(e, wait)))
	}
}

// fullRead has a key this replica holds deny locally once another
// replica's round filled its epoch with hits (Contended.Full), as its own
// round would have had it (deniedIfFull): in workload B each replica
// learnt that a window was full in a round of its own, a tenth of the
// key syncs. A full window frees units only by a refund; a key with one
// not pushed yet, or with credit (a local refund returns units to it),
// is left to its round. snow is the store's instant as this replica
// reckons it; a publication of another epoch than that one is ignored.
func (e *engine) fullRead(c Contended, snow int64) {
	ent := e.keys.getString(c.Key)
	if ent == nil || c.Algorithm != FixedWindow || len(c.Windows) != 1 {
		return
	}
	cs := ent.cs.Load()
	if cs == nil || cs.rule.Algorithm != FixedWindow || len(cs.ws) != 1 || cs.refunds.Load() != 0 || cs.credit.Load() > 0 {
		return
	}
	p := int64(cs.ws[0].Period)
	if p <= 0 || c.At/p != snow/p {
		return
	}
	now := e.now()
	wait := time.Duration((snow/p+1)*p-snow) * time.Microsecond
	cs.deniedTo.Store(max(cs.deniedTo.Load(), now+int64(cs.deniedFor(e, wait))))
}

// deniedFor is how long a key whose window has no room for another wait
// denies locally: a sync interval; for a key with static shares, whose
// window is then full of hits (the shares the other replicas hold do not
// count), until the window clears, less the clock's uncertainty, and at
// most quietInterval. Asking the store sooner finds it full again: on a
// busy key, each replica's request waited for a round every sync
// interval only to be denied. Only a refund frees units in a window
// full of hits: a local one ends the denial at once (engine.refund),
// another replica's is seen within quietInterval.
func (cs *creditState) deniedFor(e *engine, wait time.Duration) time.Duration {
	if cs.share == nil {
		return min(wait, cs.rule.Tuning.syncInterval())
	}
	return max(min(wait-2*time.Duration(e.clockErr.Load()), quietInterval), 0)
}
