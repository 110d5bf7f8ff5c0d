package limiter

// Shrinking, the replica's side (see share.go for the store's). Replicas
// added to a deployment in the middle of an epoch (a scale-out) are not
// its sharers, and the sharers hold all of it. A newcomer's first request
// of a key asks to borrow a share; finding nothing free, the store
// publishes the key, marked to shrink (Contended.Shrink). Every sharer
// that reads it shrinks its share of the epoch to a share at the live
// count N, ⌊share·L/N⌋, keeping what it spent beyond that, and tells the
// store (SyncItem.Shrink), which frees the rest for the newcomers' loans.
// The sharers go on deciding locally from their smaller shares; a release
// (a plain publication) would have left them none, and a round for each
// of their requests until the epoch ended (for an hour or a day rule,
// hours after every scale-out). Every sync of the key in the epoch says
// the shrink again. A key this replica does not hold is shrunk by an item
// of its own, and a key made later in the epoch starts shrunk
// (initShare). A sliding window's sharers and a token bucket's shrink
// so too, in the epoch of the scale-out and the next (share_sliding.go).
//
// The count a share was shrunk to is kept in the high bits of the share's
// flags: the state of a key with a share fills its size class.

const (
	shrinkShift = 16
	maxShrinkN  = 1<<(32-shrinkShift) - 1
)

// shrinkN is the live count the share of sh.epoch was shrunk to; zero:
// not shrunk.
func (sh *shareState) shrinkN() int { return int(sh.flags.Load() >> shrinkShift) }

// setShrinkN sets shrinkN, leaving the flags as they are.
func (sh *shareState) setShrinkN(n int) {
	n = max(min(n, maxShrinkN), 0)
	for {
		old := sh.flags.Load()
		if sh.flags.CompareAndSwap(old, old&(1<<shrinkShift-1)|uint32(n)<<shrinkShift) {
			return
		}
	}
}

// shrunkSize is the share of sh.epoch, of size S, shrunk to a share at
// shrinkN (none: S), but never below what it spent. w is the rule's
// window in store units; sh.mu must be held and the state rolled to the
// epoch.
func (sh *shareState) shrunkSize(w Window, share float64, size uint64) uint64 {
	m := sh.shrinkN()
	if m == 0 || size == 0 {
		return size
	}
	var spent uint64
	if sh.state.Epoch == sh.epoch {
		spent = sh.state.Cur
	}
	return min(size, max(ShareSize(w, share, m), spent))
}

// askShrink shrinks key cs's share of epoch ep to a share at n replicas,
// reckoning the epoch's share first if the key has not spent from it
// yet, and asks the next sync to tell the store (flagShrink); it reports
// whether it asked. A share released, a loan, a share already shrunk to
// n or more (told again if again is set: a newcomer still asks) and an
// epoch this replica holds no share of are left as they are.
func (e *engine) askShrink(cs *creditState, ep int64, n int, again bool, now int64) bool {
	sh := cs.share
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.released >= ep || sh.epoch > ep || cs.orphan.Load() {
		return false
	}
	w := cs.ws[0]
	if sh.epoch != ep {
		e.reckonEpoch(cs, ep, now)
	}
	if sh.epoch != ep || sh.size == 0 || sh.has(flagLent) || sh.sharers <= 0 || n <= int(sh.sharers) {
		return false
	}
	if n <= sh.shrinkN() {
		if again && !sh.has(flagShrink) {
			sh.set(flagShrink)
			return true
		}
		return false
	}
	sh.set(flagShrink)
	sh.setShrinkN(n)
	sh.roll(w, ep*int64(w.Period))
	sh.size = sh.shrunkSize(w, cs.rule.shareFraction(), sh.size)
	return true
}

// reckonEpoch reckons key cs's share of epoch ep by the registry: its
// sharers and size, shrunk as the share was if it was shrunk in ep
// before (initShare). sh.mu must be held.
func (e *engine) reckonEpoch(cs *creditState, ep, now int64) {
	sh := cs.share
	w := cs.ws[0]
	p := int64(w.Period)
	base := e.shareBase(cs.rule.Algorithm, ep*p, p)
	k, recheck, known := e.reckonShare(base, p, now)
	if sh.epoch != ep && sh.epoch != -1 {
		sh.setShrinkN(0) // a shrink is of its epoch
	}
	sh.epoch, sh.sharers, sh.size, sh.recheck = ep, int32(k), 0, recheck
	sh.unset(flagLent) // a loan lapses with its epoch
	if dn := e.declaredN(base, ep*p, p, k); dn > sh.shrinkN() {
		sh.setShrinkN(dn) // this replica's shrink covers the epoch (credit_declare.go)
	}
	if !known {
		// No copy of the registry to count from (the heartbeats fail):
		// no share now, reckoned again at the next spend, not given up
		// for the rest of the epoch, which the store counts it as
		// holding.
		sh.epoch = -1
	} else if k != 0 {
		sh.roll(w, ep*p)
		sh.size = sh.shrunkSize(w, cs.rule.shareFraction(), ShareSize(w, cs.rule.shareFraction(), k))
	}
}

// shrinkField says the shrink of the share of epoch ep in a sync of it:
// a store that lost the record would count the whole share as held by
// this replica, which will not spend it. sh.mu must be held.
func (sh *shareState) shrinkField(it *SyncItem, ep int64) {
	if m := sh.shrinkN(); m > 0 && sh.epoch == ep && !sh.has(flagLent) && sh.released < ep {
		it.Shrink = m
	}
}
