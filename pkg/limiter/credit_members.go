package limiter

import "time"

// The replica's view of the registry: which epochs it holds a share of,
// and how many replicas share each.

// dropShares forgets every key's share of the current epochs after this
// replica joined the registry again (its lease had ended): it holds no
// share until it is counted again.
func (e *engine) dropShares() {
	e.keys.eachCredit(func(_ *entry, cs *creditState) {
		if sh := cs.share; sh != nil {
			sh.mu.Lock()
			sh.epoch = -1 // size and sharers are reckoned again
			sh.mu.Unlock()
			sh.none.Store(0)
		}
	})
}

// memberView is the registry as last heard, and when (local ns).
type memberView struct {
	m  Membership
	at int64
}

// shareBase is the start of the epoch whose sharers (Membership.Sharers)
// hold the static shares of the epoch of a window of algorithm a and
// period that began at start: that epoch for a fixed window, the one
// before for a sliding window or a token bucket (aheadShares). So their
// sharers of the next epoch are known once the current one begins, and
// the store counts their shares now (share_sliding.go, share_bucket.go);
// a replica holds such a share from the second epoch that begins a lease
// after it joined. While a replica of a version without them may be live
// (Membership.AheadReady), they have no shares: shareBase is then 0,
// before any registry, which counts no sharer.
func (mv *memberView) shareBase(a Algorithm, start, period int64) int64 {
	if !aheadShares(a) {
		return start
	}
	if mv != nil && !mv.m.AheadReady(start-period, period, lease) {
		return 0
	}
	return start - period
}

// shareBase is memberView.shareBase of the engine's copy of the registry.
func (e *engine) shareBase(a Algorithm, start, period int64) int64 {
	return e.members.Load().shareBase(a, start, period)
}

// sharers is n for an epoch that began at start of a window of period
// (both store µs), from copy mv (Membership.Sharers): what a sync tells
// the store to count; 0 without a copy.
func (mv *memberView) sharers(start, period int64) int {
	if mv == nil {
		return 0
	}
	return mv.m.Sharers(start, period, lease)
}

// registryFresh reports whether this replica's copy of the registry is
// young enough (lease less a heartbeat) for every replica to count the
// same sharers from it.
func (e *engine) registryFresh(now int64) bool { return e.members.Load().fresh(now) }

// fresh reports whether copy mv is young enough at now (registryFresh).
func (mv *memberView) fresh(now int64) bool {
	return mv != nil && now-mv.at <= int64(lease-heartbeatEvery)
}

// sharers is n for an epoch that began at start if this replica holds a
// share of it, else 0: the registry counts one of its incarnations among
// the epoch's sharers (a replica back after its lease ended still holds
// its shares of the epochs its earlier incarnation was counted in). It
// holds none while its copy of the registry is too old for every replica
// to count the same n.
func (e *engine) sharers(start, period, now int64) int {
	return e.sharersIn(e.members.Load(), start, period, now)
}

// sharersIn is sharers, read from the registry copy mv.
func (e *engine) sharersIn(mv *memberView, start, period, now int64) int {
	if !mv.fresh(now) {
		return 0
	}
	if j := e.joined.Load(); j == 0 || j+int64(lease/time.Microsecond) > start && !mv.m.holds(start, period, lease) {
		return 0
	}
	return mv.m.Sharers(start, period, lease)
}

// reckonShare reads from one copy of the registry the sharers of the
// epoch of period that began at start, if this replica holds a share of
// it (sharers), and, if it holds none, when a founding epoch's founders
// will be known (Membership.foundersDue; 0: not founding, or known). Read
// from two copies, a heartbeat between them, the first could find the
// founders not known yet and the second known: no share and nothing to
// look at again, for the rest of the epoch. known is false when no copy
// is young enough to count from (before the first heartbeat, or while
// they fail): no share for now, to be reckoned again.
func (e *engine) reckonShare(start, period, now int64) (n int, recheck int64, known bool) {
	mv := e.members.Load()
	if !mv.fresh(now) {
		return 0, 0, false
	}
	if n = e.sharersIn(mv, start, period, now); n == 0 {
		recheck = mv.m.foundersDue(start, period, lease)
	}
	return n, recheck, true
}

// gone is Membership.Gone for an epoch of period that began at start
// (store µs), from copy mv: what a sync tells the store.
func (mv *memberView) gone(start, period int64) []string {
	if mv == nil {
		return nil
	}
	return mv.m.Gone(start, period, lease)
}

// shrunk is Membership.ShrunkOf for an epoch of period that began at
// start of a rule of algorithm a whose sharers are those of base (store
// µs), from copy mv: what a sync tells the store.
func (mv *memberView) shrunk(a Algorithm, base, start, period int64) []ShrunkSharer {
	if mv == nil {
		return nil
	}
	return mv.m.ShrunkOf(base, start, period, lease, aheadShares(a))
}

// pushedPrev reports, for a sync made at store instant snow of a key of
// algorithm a and period p, whether this replica says it pushed every
// share hit of the epoch before (SyncItem.ReleasePrev): of a sliding
// window or a token bucket, whose store counts that epoch's unreported
// shares (share_sliding.go, share_bucket.go), if it was a sharer of it
// and is past its end by the clock's uncertainty, so that it admits no
// more from that share. Its hits of that epoch go with the item
// (takeShare), or went before; a key it does not hold has none. Unsaid,
// a sliding window's store counted, weighted, every sharer's whole share
// of the epoch before as spent and unreported for the whole of the
// epoch: a key first busy in an epoch after a quiet one had room for
// little more than half its limit, and its waiters polled the store
// round after round for the rest.
func (e *engine) pushedPrev(a Algorithm, mv *memberView, snow, p, now int64) bool {
	slack := e.clockErr.Load()/1000 + 1 // as spendShare reckons it
	return aheadShares(a) && (snow-slack)/p == snow/p && e.sharersIn(mv, mv.shareBase(a, (snow/p-1)*p, p), p, now) != 0
}

// shareFields fills in the static share fields of key cs's item it, made
// at store instant snow: the share hits and a release (takeShare), the
// share epoch and its sharers, and a loan held or asked for. cs.mu must
// be held.
func (e *engine) shareFields(cs *creditState, it *SyncItem, snow, now int64) {
	// One copy of the registry for all of it: the counts of a founding
	// epoch change as its founders become known.
	mv := e.members.Load()
	p := int64(cs.ws[0].Period)
	upTo := e.releaseUpTo(cs, mv, snow, now)
	start := snow / p * p
	base := mv.shareBase(cs.rule.Algorithm, start, p)
	cs.share.takeShare(it, snow, cs.ws[0], e.sharersIn(mv, base, p, now) != 0 || cs.share.holdsLoan(cs.ws[0], snow), upTo)
	if it.Release/p > snow/p {
		cs.share.keep.Store(now + ((it.Release/p+1)*p-snow)*1000)
	}
	it.ShareEpoch = snow / p
	it.Sharers = mv.sharers(base, p)
	it.SharersNext = mv.sharers(mv.shareBase(cs.rule.Algorithm, start+p, p), p)
	it.Gone = mv.gone(base, p)
	it.Shrunk = mv.shrunk(cs.rule.Algorithm, base, start, p)
	if cs.rule.Algorithm != FixedWindow { // the epoch before's count
		prev := mv.shareBase(cs.rule.Algorithm, start-p, p)
		it.SharersPrev, it.ShrunkPrev = mv.sharers(prev, p), mv.shrunk(cs.rule.Algorithm, prev, start-p, p)
		it.ReleasePrev = e.pushedPrev(cs.rule.Algorithm, mv, snow, p, now) // with takeShare's hits
	}
	e.loanFields(cs, it, mv, snow, now)
	if it.Borrow {
		it.Want = 0 // a loan serves the waiters, or else the last mile
	}
	if !mv.fresh(now) {
		// No copy of the registry young enough to count the sharers as
		// the others do (the first heartbeat failed, or the last few): an
		// epoch the store has left behind makes it count the whole window
		// as held, and grant nothing.
		it.ShareEpoch = max(it.ShareEpoch-2, 1)
	}
}
