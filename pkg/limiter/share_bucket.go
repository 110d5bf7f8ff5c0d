package limiter

import "math"

// Static shares of a token bucket, the store's side. A bucket of rate
// L per period P and capacity B = L (shareableWindow) gives shares of one
// epoch of P each, as a sliding window does: spent and counted epoch by
// epoch in a fixed window's arithmetic, holding ShareFraction, half of
// share·L, between them. A bucket can be asked for a whole epoch's
// shares at its end and the next epoch's at its start; half of B each
// fits, and the shares of an epoch, spread over it, refill at most half
// of the bucket's rate.
//
// The bucket (its TAT) is charged with the share hits a replica pushes
// when they arrive, each at the instant it was admitted. The store counts
// what it has not been charged with:
//
//   - the shares of the current epoch not reported (h.all), and those of
//     the next (h.next), as a sliding window does; a unit granted now
//     may be spent just before the next epoch's sharers spend theirs;
//   - the shares of the epoch before, by settling them: the first sync of
//     an epoch charges the bucket with what the shares of the epoch
//     before did not report (settle), as if spent as that epoch ended,
//     and later pushes of their hits charge nothing more.
//
// A bucket charged later than its units were spent counts at least as
// few units left as one charged when they were: a GCRA's arrival time,
// max(TAT, at) + n·T, only grows with at, and charges applied out of
// order end no earlier than in order.
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

// chargeBucket charges a token bucket with shares in the order its units
// were spent in (an arrival time charged so ends lowest): the pushed hits
// of earlier epochs, the shares of the epoch before settled at its end
// (settle), then the hits of the current epoch.
func (r *KeyRecord) chargeBucket(it *SyncItem, ws []Window, h *heldShares, now int64) {
	edge := now / int64(ws[0].Period) * int64(ws[0].Period)
	r.charge(it, ws, now, math.MinInt64, edge)
	r.settle(ws[0], h, now)
	r.charge(it, ws, now, edge, math.MaxInt64)
}

// countBucket counts hit h of a token bucket with shares in the epoch it
// was admitted in, as a fixed window counts (Cur, Prev beside the TAT):
// the units its replicas reported, which a view shows the replicas, where
// the TAT counts the shares settled too (busyIn).
func (c *WindowState) countBucket(w Window, h Hit, now int64) {
	if h.N >= 0 {
		c.ChargeAt(w, FixedWindow, h.At, now, uint64(h.N))
	} else {
		c.RefundAt(w, FixedWindow, h.At, now, uint64(-h.N))
	}
	c.Cur, c.Prev = min(c.Cur, MaxExact), min(c.Prev, MaxExact)
}

// settle charges a token bucket with the shares of the epoch before the
// current one that were not reported (h.prev), once, at the epoch's first
// sync that knows their sharers: as if their replicas spent them as that
// epoch ended, no earlier than they did. From then on h.prev counts
// nothing, and pushed share hits of that epoch charge nothing (charge).
func (r *KeyRecord) settle(w Window, h *heldShares, now int64) {
	e := now / int64(w.Period)
	if r.Settled >= e-1 || h.prev >= maxExact {
		h.prev = 0
		return
	}
	if h.prev > 0 { // the TAT alone: nobody reported these units (countBucket)
		c := &r.Windows[0]
		c.ChargeAt(w, TokenBucket, e*int64(w.Period), now, h.prev)
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
// units in all, may outlive the epoch, into the first half of the next
// one at most (shareExpiry): the bucket must hold, at the start of the
// epoch after, the most its shares hold beside the margin. Spent by the
// next epoch's middle, the reservations leave half a period's refill to
// make up for them before then. So they may if the next epoch's shares
// (h.next), that most and the margin fit in the capacity, and with the
// reservations in the capacity and half a period's refill.
//
// Why: the grant left the bucket, at the next epoch's start, the next
// epoch's shares, the margin and the reservations (bucketRoom); as it
// refills a period and the margin, it is full at some instant of that
// epoch. If that instant comes after the middle, only the shares are
// spent after it; if before, the reservations and the shares, and half
// a period's refill comes after.
func bucketCarry(it *SyncItem, w Window, h heldShares, reserved uint64) bool {
	most := splitShare(w.Limit, ShareFraction(it.Algorithm, it.Share), 1)
	fixed := satAdd(h.next, satAdd(most, bucketMargin(w)))
	b := w.Capacity(TokenBucket)
	return fixed <= b && satAdd(reserved, fixed) <= satAdd(b, bucketHalfRefill(w))
}

// bucketHalfRefill is the whole units a token bucket refills in half a
// period.
func bucketHalfRefill(w Window) uint64 { return uint64(int64(w.Period) / 2 / interval(w)) }
