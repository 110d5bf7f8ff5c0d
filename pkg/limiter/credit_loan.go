package limiter

// Loans, the replica's side (see share.go for the store's). A replica
// that is not a sharer of a window's current epoch (it joined less than a
// lease before the epoch began: a rolling update's new replica, a
// scale-out's) holds no share of it, and without one every request of a
// key far below its limit costs a round, until the first epoch it is a
// sharer of: for an hour or a day rule, hours. The round a key's waiters
// wait for on such a replica asks to borrow a share of the epoch
// (SyncItem.Borrow); a store that has room lends one (SyncResult.Lent),
// and the key's later requests in the epoch are decided from it as from
// a share, with no round trip. Its hits are pushed, and it is released,
// as a share's are; every sync of the key in the epoch says the loan's
// size (SyncItem.Lent), so a store that lost it makes it again. A loan
// lapses with its epoch; at shutdown it is released, spent from or not.

// loanFields sets the item's loan fields: the loan of the epoch of snow
// the key holds, or, with requests waiting and a fresh copy of the
// registry mv that counts sharers of the epoch (a founding epoch's
// founders, once they are known: until then this replica may turn out
// one), this replica not one of them, a request to borrow one. cs.mu
// must be held.
func (e *engine) loanFields(cs *creditState, it *SyncItem, mv *memberView, snow, now int64) {
	sh := cs.share
	if sh == nil {
		return
	}
	p := int64(cs.ws[0].Period)
	ep := snow / p
	base := mv.shareBase(cs.rule.Algorithm, ep*p, p)
	sh.mu.Lock()
	held, released := sh.has(flagLent) && sh.epoch == ep, sh.released >= ep
	size := sh.size
	sh.mu.Unlock()
	switch {
	case released:
	case held:
		it.Lent = size
	case len(cs.waiters) > 0 && mv.fresh(now) && mv.sharers(base, p) != 0 && mv.m.foundersDue(base, p, lease) == 0 &&
		e.sharersIn(mv, base, p, now) == 0:
		it.Borrow = true
	}
}

// holdsLoan reports whether the key holds a loan of the epoch of snow.
func (sh *shareState) holdsLoan(w Window, snow int64) bool {
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.has(flagLent) && sh.epoch == snow/int64(w.Period) && sh.released < sh.epoch
}

// takeLoan installs the loan a reply lends, of the store's epoch at
// r.Now. A key that already holds a share or a loan of it keeps it.
// Spent only while this replica's clock puts it in that epoch (an admit
// within the clock's uncertainty of a boundary needs a share of both
// epochs, share_boundary.go); a spend in another epoch reckons the share
// again and drops the loan, and the key borrows it again, told its size
// (KeyRecord.lend). cs.mu must be held.
func (e *engine) takeLoan(cs *creditState, r *SyncResult) {
	sh := cs.share
	if sh == nil || r.Lent == 0 {
		return
	}
	ep := r.Now / int64(cs.ws[0].Period)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.released >= ep || sh.epoch == ep && sh.size > 0 {
		return
	}
	sh.epoch, sh.size, sh.recheck, sh.sharers = ep, r.Lent, 0, 0
	sh.set(flagLent)
	sh.none.Store(0)
}

// lentIn reports a loan of epoch ep not released: a replica that stops
// gives it back, spent from or not. sh.mu must be held.
func (sh *shareState) lentIn(ep int64) bool {
	return sh.has(flagLent) && sh.epoch == ep && sh.released < ep
}

// lentOf reports whether the key holds a loan of epoch, not released.
func (sh *shareState) lentOf(epoch int64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lentIn(epoch)
}
