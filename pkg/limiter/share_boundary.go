package limiter

// Admits at an epoch boundary. The replica knows the store's clock only
// to within clockErr (what its round trips tell, storeclock.go): a request
// that close to a boundary may fall in either epoch as the store counts
// them. Rather than wait until the epoch is known, the share admits it
// in both: the unit is charged to the share of the epoch that ends and
// to the share of the one that begins, and pushed as a hit in each, so
// whichever epoch it fell in, it was within that epoch's share. The
// store counts it twice, which is conservative; the cost is one unit of
// the next epoch's share per such admit.

// spendAcross admits n units from key cs's shares of epochs e2-1 and
// e2, both; a dry run only reports whether they fit. snow is the
// store's instant as this replica estimates it, in one of the two.
func (e *engine) spendAcross(cs *creditState, n, now, snow, e2 int64, dry bool) bool {
	sh := cs.share
	w := cs.ws[0]
	p := int64(w.Period)
	e1 := e2 - 1
	s1, s2 := e.shareSize(cs, e1, now), e.shareSize(cs, e2, now)
	if s1 == 0 || s2 == 0 || n <= 0 {
		return false
	}
	sh.roll(w, snow)
	used1, used2 := sh.state.Cur, uint64(0) // snow in e1
	if sh.nextEpoch == e2 {
		used2 = sh.next
	}
	if snow/p == e2 {
		used1, used2 = sh.state.Prev, sh.state.Cur
	}
	if used1+uint64(n) > s1 || used2+uint64(n) > s2 {
		return false
	}
	if dry {
		return true
	}
	if snow/p == e2 {
		sh.state.Prev += uint64(n)
		sh.state.Cur += uint64(n)
	} else {
		sh.state.Cur += uint64(n)
		sh.next, sh.nextEpoch = used2+uint64(n), e2
	}
	sh.pending = append(sh.pending, Hit{At: e2*p - 1, N: n}, Hit{At: e2 * p, N: n})
	sh.pendingN.Add(2 * n)
	return true
}

// shareSize is S for key cs's share of epoch: zero when this replica
// holds none or released it.
func (e *engine) shareSize(cs *creditState, epoch, now int64) uint64 {
	if cs.share.released >= epoch {
		return 0
	}
	w := cs.ws[0]
	p := int64(w.Period)
	base := e.shareBase(cs.rule.Algorithm, epoch*p, p)
	n := e.sharers(base, p, now)
	if n == 0 {
		return 0
	}
	if dn := e.declaredN(base, epoch*p, p, n); dn > 0 {
		n = dn // this replica's shrink covers the epoch (credit_declare.go)
	}
	return ShareSize(w, cs.rule.shareFraction(), n)
}

// roll moves the share's state to the epoch of snow, counting in the
// units charged ahead to that epoch. w is the rule's window in store
// units (its limit does not matter). sh.mu must be held.
func (sh *shareState) roll(w Window, snow int64) {
	sh.state.Roll(w, snow)
	if sh.next > 0 && sh.state.Epoch >= sh.nextEpoch {
		if sh.state.Epoch == sh.nextEpoch {
			sh.state.Cur += sh.next
		}
		sh.next = 0
	}
}
