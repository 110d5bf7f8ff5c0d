package limiter

import "slices"

// Loans, the store's side (see ShareRecord and credit_loan.go).

// lend lends the caller a share of the current epoch (SyncItem.Borrow)
// out of left, the budget no reservation or share holds: ShareSize at
// the epoch's sharers (a founding epoch's: a founder's share) and at the
// N replicas live (several may borrow at once: a founding epoch's late
// joiners), or less if less is left; its part of left, ⌊share·left/N⌋,
// if a replica still live released its share of the epoch (releasedIn):
// that one may need the rest as credit. A replica that left released
// its share for good: a rolling update's new replica borrows a whole
// share. A replica
// that holds a loan of the epoch is told its size again (a reply may
// have been lost); one that released its share of the epoch, or asks of
// an epoch the store is not in, or of one without sharers, gets none.
// With whole set (a sliding window or a token bucket whose sharers may
// shrink their shares for the caller, heldShares.shrinkable) it lends a whole share
// or none: a loan cut short by the epoch before's shares would run dry
// in the epoch, and the replica's requests wait for a release of every
// share (a plain publication) rather than a shrink.
// It returns the loan's size and what of left it took.
func (r *KeyRecord) lend(replica string, it *SyncItem, ws []Window, left uint64, whole bool, now int64) (lent, took uint64) {
	if !it.Borrow || !sharesOf(it) || it.Sharers == 0 || now/int64(ws[0].Period) != it.ShareEpoch {
		return 0, 0
	}
	epoch := it.ShareEpoch
	rec := r.Shares[replica]
	switch {
	case rec.releasedIn(epoch):
		return 0, 0
	case rec.lent(epoch):
		return rec.Lent, 0
	}
	part := 1
	if r.releasedIn(replica, it, epoch) {
		part = it.Replicas
	}
	frac := ShareFraction(it.Algorithm, it.Share)
	size := min(ShareSize(ws[0], frac, it.Sharers), ShareSize(ws[0], frac, max(it.Replicas, 1)))
	g := min(size, splitShare(left, it.Share, part))
	if g == 0 || whole && g < size {
		return 0, 0
	}
	rec.lend(g, epoch)
	if r.Shares == nil {
		r.Shares = make(map[string]ShareRecord)
	}
	r.Shares[replica] = rec
	return g, g
}

// releasedIn reports whether a replica other than the caller, not one
// that left by Leave (SyncItem.Gone), released its share of epoch: the
// key was contended, and that replica may need the rest of what it gave
// up as credit.
func (r *KeyRecord) releasedIn(replica string, it *SyncItem, epoch int64) bool {
	for id, rec := range r.Shares {
		if id != replica && rec.releasedIn(epoch) && !slices.Contains(it.Gone, id) {
			return true
		}
	}
	return false
}
