package limiter

// Static shares of a sliding window, the store's side. A sliding window
// counts at an instant its own epoch's units and the epoch before's,
// weighted by the part of it still inside the window. Its static shares
// are shares of one epoch each, as a fixed window's, spent and counted
// epoch by epoch; but they hold ShareFraction, half of share·L, between
// them, so that the shares of two epochs side by side hold at most the
// limit. On top of a fixed window's sum, the store counts:
//
//   - the shares of the epoch before (prev), weighted like the window's
//     own previous count: what its sharers and borrowers may have
//     admitted of them and not pushed, until each says it pushed every
//     share hit of that epoch (SyncItem.ReleasePrev: its record then
//     counts as released in it);
//   - the shares of the next epoch (next): at that epoch's start, the
//     window counts this epoch's units whole, and the next epoch's
//     sharers spend their shares with no round trip. A unit granted now
//     is still counted then, so it is granted only if it fits beside
//     them; and a reservation lapses with the epoch unless the
//     reservations fit beside the next epoch's shares and the most the
//     shares of the epoch after hold (slidingCarry).
//
// So the budget a sync of epoch e may grant or probe is
//
//	min(L − (cur + ⌈(prev + held_prev)·w⌉ + reserved + held),
//	    L − (cur + reserved + held + held_next))
//
// The replicas of a busy key release their shares of the next epoch
// ahead (releaseUpTo), as those that read a key contended do: the next
// epoch's shares then hold nothing of the budget, and a key at its limit
// is shared by credit alone.

// unknownSharers stands for the sharers of an epoch an item does not
// say (it was made in the epoch before the store's): their shares hold
// at most ShareFraction of the limit between them, however many they are.
const unknownSharers = int(^uint(0) >> 1)

// dropShares forgets the share records that no longer count at now, in
// epoch: a record whose share hits the window no longer counts, and
// whose release, loan and shrink are of an epoch over. A sliding
// window's records of the epoch before still count (slidingShares), and
// a token bucket's of the two before (pend, settle).
func (r *KeyRecord) dropShares(it *SyncItem, w Window, epoch, now int64) {
	last := epoch - recordEpochs(it.Algorithm)
	for id, rec := range r.Shares {
		if recordFreshAt(rec.State, w, it.Algorithm) <= now && rec.Released < last && rec.LentEpoch < last && rec.ShrinkEpoch < last {
			delete(r.Shares, id)
		}
	}
}

// slidingShares sums up, for a sliding window in epoch, what the shares
// of the epoch before hold (nPrev sharers; a record that reported share
// hits, released or shrank in it counts as its record says, a loan of it
// as the loan, a sharer that declared a shrink of it, declared, a share
// at its count) and what those of the next epoch hold (nNext sharers, less
// those that released their share of it; unknownSharers: ShareFraction
// of the limit).
func (r *KeyRecord) slidingShares(it *SyncItem, w Window, epoch int64, nPrev, nNext int, declared map[string]int, now int64) (prev, next uint64) {
	frac := ShareFraction(it.Algorithm, it.Share)
	size := ShareSize(w, frac, nPrev)
	active, released := 0, 0
	for id, rec := range r.Shares {
		if rec.releasedIn(epoch + 1) {
			released++
		}
		s := rec.State
		s.Roll(w, now)
		loan := rec.lent(epoch - 1)
		if !loan && s.Prev == 0 && !rec.releasedIn(epoch-1) && !rec.shrunk(epoch-1) {
			// With the unreported shares, if a sharer of it: a release
			// of a later epoch alone says nothing of this one.
			continue
		}
		lim := size
		if loan {
			lim = rec.lentOf(epoch - 1)
		} else {
			active++
			lim = shrunkLimit(w, frac, rec, epoch-1, nPrev, lim, id, declared)
		}
		if !rec.releasedIn(epoch - 1) {
			prev = satAdd(prev, satSub(lim, s.Prev))
		}
	}
	prev = satAdd(prev, unreportedShares(w, frac, max(abs(nPrev)-active, 0), size, declared))
	if nNext == unknownSharers {
		return prev, splitShare(w.Limit, frac, 1)
	}
	return prev, satMul(uint64(max(abs(nNext)-released, 0)), ShareSize(w, frac, nNext))
}

// slidingCarry reports whether a sliding window's reservations, reserved
// units in all, may outlive the epoch, to the end of the next one at
// most (shareExpiry): units spent in the next epoch still count at the
// start of the one after, beside its shares, which nobody has counted
// yet. They may if they fit beside the next epoch's shares (h.next) and
// the most the shares of the one after hold.
func slidingCarry(it *SyncItem, w Window, h heldShares, reserved uint64) bool {
	most := splitShare(w.Limit, ShareFraction(it.Algorithm, it.Share), 1)
	return satAdd(reserved, satAdd(h.next, most)) <= w.Limit
}

// slidingRoom is what a sliding window of state c (rolled to now) has
// room for beside reserved units of reservations and the shares h holds:
// now, and at the next epoch's start.
func slidingRoom(c WindowState, w Window, h heldShares, reserved uint64, now int64) uint64 {
	taken := satAdd(reserved, h.all)
	c.Prev = satAdd(c.Prev, h.prev)
	room := satSub(c.Remaining(w, SlidingWindow, now), taken)
	return min(room, satSub(w.Limit, satAdd(c.Cur, satAdd(taken, h.next))))
}

// releaseUpTo is the last epoch a release of key cs's share, made at
// store instant snow, gives up: the current epoch, or for a sliding
// window the next one too if this replica holds a share of it. A sliding
// window's units granted now still count at the next epoch's start,
// beside the next epoch's shares (slidingShares): a key that needs more
// than its share gives its share of the next epoch up too. So a sync of
// a busy key (its last view counts a quarter of the limit in the epoch,
// half of what the epoch's shares hold) asks for that release itself,
// before its requests wait for it: a key at its limit is shared by
// credit alone, epoch after epoch, and one that turns quiet has its
// shares back the epoch after next. A key whose requests wait for the
// next epoch's shares is published contended, and every replica that
// holds one releases it (contention.go). cs.mu must be held.
func (e *engine) releaseUpTo(cs *creditState, mv *memberView, snow, now int64) int64 {
	p := int64(cs.ws[0].Period)
	ep := snow / p
	if !aheadShares(cs.rule.Algorithm) || e.sharersIn(mv, mv.shareBase(cs.rule.Algorithm, (ep+1)*p, p), p, now) == 0 {
		return ep
	}
	if cs.share.releasedThrough() <= ep && cs.busyIn(ep, snow) {
		cs.share.set(flagRelease)
	}
	return ep + 1
}

// releasedThrough is the last epoch the share was released through.
func (sh *shareState) releasedThrough() int64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.released
}

// busyIn reports a sliding-window or token-bucket key whose last view
// counts, in epoch ep, at least half of what the static shares of an
// epoch hold (a token bucket's view counts its reported units so beside
// its TAT, countBucket). A token bucket's that counted the shares' whole
// in the epoch before is busy from the epoch's start: a bucket refills
// from one epoch into the next, and a key kept busy releases its share
// of the next epoch as each begins, so that credit granted then need not
// lapse when the shares it was granted out of return.
func (cs *creditState) busyIn(ep, snow int64) bool {
	v := cs.view.Load()
	if v == nil {
		return false
	}
	c, busy := v.windows[0], splitShare(cs.ws[0].Limit, cs.rule.shareFraction(), 2)
	if cs.rule.Algorithm == TokenBucket {
		c.Roll(cs.ws[0], snow)
		return c.Epoch == ep && (c.Cur >= busy || c.Prev >= 2*busy)
	}
	return c.Epoch == ep && c.Cur >= busy
}
