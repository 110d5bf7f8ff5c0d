package limiter

// Static shares of a token bucket, the store's side. A bucket of rate
// L per period P and capacity B = L (shareableWindow) gives shares of one
// epoch of P each, as a sliding window does: spent and counted epoch by
// epoch in a fixed window's arithmetic, holding ShareFraction, half of
// share·L, between them. A bucket can be asked for a whole epoch's
// shares at its end and the next epoch's at its start; half of B each
// fits, and the shares of an epoch, spread over it, refill at most half
// of the bucket's rate.
//
// The bucket (its TAT) is charged with the share hits a replica pushes,
// when it pushes them: later than they were admitted, which a bucket
// counts as at least as full. The store counts what it has not been
// charged with:
//
//   - the shares of the current epoch not reported (h.all), and those of
//     the next (h.next), as a sliding window does; a unit granted now
//     may be spent just before the next epoch's sharers spend theirs;
//   - the shares of the epoch before, by settling them: the first sync of
//     an epoch charges the bucket with what the shares of the epoch
//     before did not report (settle), as if spent then, and later pushes
//     of their hits charge nothing more.
//
// So a sync may grant or probe, with ℓ(t) the units the bucket holds at
// t and t₁ the next epoch's start,
//
//	min(ℓ(now) − (reserved + held), ℓ(t₁) − (reserved + held + held_next + m))
//
// where m = B − ⌊P/T⌋ (bucketMargin), what a period's refill falls short
// of the capacity by (T: the emission interval, rounded up to the
// store's µs). Why settling once is enough: an epoch x whose next epoch
// saw no sync that settled it granted nothing in x+1 either. Its spends
// in x+1 are the shares of x+1 and the reservations carried from x,
// which the grants of x left room for beside m at x+1's start (the
// second term, and bucketCarry); so the bucket, refilling ⌊P/T⌋ + m ≥ B
// over x+1, is full at some instant of it, whatever x's shares spent,
// and from that instant on the hits of x make no difference.

// settle charges a token bucket with the shares of the epoch before the
// current one that were not reported (h.prev), once, at the epoch's first
// sync that knows their sharers: as if their replicas spent them now.
// From then on h.prev counts nothing, and pushed share hits of that epoch
// charge nothing (charge).
func (r *KeyRecord) settle(w Window, h *heldShares, now int64) {
	e := now / int64(w.Period)
	if r.Settled >= e-1 || h.prev >= maxExact {
		h.prev = 0
		return
	}
	if h.prev > 0 {
		c := &r.Windows[0]
		c.Charge(w, TokenBucket, now, h.prev)
		c.TAT = min(c.TAT, MaxExact)
	}
	r.Settled, h.prev = e-1, 0
}

// settledAt reports a token bucket's share hit admitted at store instant
// at whose epoch is settled (settle).
func (r *KeyRecord) settledAt(w Window, at, now int64) bool {
	return r.Settled > 0 && min(at, now)/int64(w.Period) <= r.Settled
}

// bucketMargin is what a period's refill of bucket w falls short of its
// capacity by, in units: B − ⌊P/T⌋.
func bucketMargin(w Window) uint64 {
	return satSub(w.Capacity(TokenBucket), uint64(int64(w.Period)/interval(w)))
}

// bucketRoom is what a token bucket of state c has room for beside
// reserved units of reservations and the shares h holds: now, and at the
// next epoch's start beside the next epoch's shares and the margin.
func bucketRoom(c WindowState, w Window, h heldShares, reserved uint64, now int64) uint64 {
	p := int64(w.Period)
	taken := satAdd(reserved, h.all)
	room := satSub(c.Remaining(w, TokenBucket, now), taken)
	next := satSub(c.Remaining(w, TokenBucket, (now/p+1)*p), satAdd(taken, satAdd(h.next, bucketMargin(w))))
	return min(room, next)
}

// bucketCarry reports whether a token bucket's reservations, reserved
// units in all, may outlive the epoch, to the end of the next one at
// most (shareExpiry): spent in the next epoch, they must leave the
// bucket, at the start of the one after, the most its shares hold beside
// the margin. They may if they fit in the capacity beside the next
// epoch's shares (h.next), that most and the margin.
func bucketCarry(it *SyncItem, w Window, h heldShares, reserved uint64) bool {
	most := splitShare(w.Limit, ShareFraction(it.Algorithm, it.Share), 1)
	return satAdd(reserved, satAdd(h.next, satAdd(most, bucketMargin(w)))) <= w.Capacity(TokenBucket)
}
