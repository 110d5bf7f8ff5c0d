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
//   - the shares of the epoch before not reported (h.prev, pend), counted
//     as spent as this epoch began (no earlier than they were): a
//     sharer's share less what it pushed, until it says it pushed all of
//     that epoch's hits (SyncItem.ReleasePrev, with every sync of an
//     epoch: then it holds nothing more of the epoch before). A key that
//     turns busy is published contended, and every sharer's release says
//     so too, so the shares its quiet replicas never spent stop holding
//     its bucket within a round;
//   - through the epoch after that, what is still not reported: its
//     first sync settles it (settle), charging the bucket with it as if
//     spent as that epoch began, and later pushes of those hits charge
//     nothing more.
//
// A bucket charged later than its units were spent counts at least as
// few units left as one charged when they were: a GCRA's arrival time,
// max(TAT, at) + n·T, only grows with at, and charges applied out of
// order end no earlier than in order.
//
// So a sync may grant or probe, with ℓ(t) the units the bucket holds at
// t and t₁ the next epoch's start,
//
//	min(ℓ′(now) − (reserved + held), ℓ′(t₁) − (reserved + held + held_next + m))
//
// where ℓ′ is the bucket charged with held_prev as this epoch began, and
// m = B − ⌊P/T⌋ (bucketMargin) what a period's refill falls short
// of the capacity by (T: the emission interval, rounded up to the
// store's µs). Why settling once, an epoch late, is enough: an epoch
// x+1 that saw no sync granted nothing; its spends are the shares of x+1
// and the reservations carried from x, which the grants of x left room
// for beside m at x+1's start (the second term, and bucketCarry), with
// the unreported shares of x−1 counted; so the bucket, refilling
// ⌊P/T⌋ + m ≥ B over x+1, is full at some instant of it, whatever the
// shares of x and x−1 spent, and from that instant on their hits make no
// difference. If x+1 saw syncs, they held x's unreported shares, and the
// first sync of x+2 settles what is still unreported of them.

// chargeBucket charges a token bucket with shares in the order its units
// were spent in (an arrival time charged so ends lowest): the pushed hits
// of the epochs before the last, the shares of the epoch two before
// settled as the last began (settle), then the later hits; then it
// records the share hits and releases (chargeShares) and holds the shares
// of the epoch before that no replica has reported (pend).
func (r *KeyRecord) chargeBucket(replica string, it *SyncItem, ws []Window, now int64) heldShares {
	p := int64(ws[0].Period)
	edge := (now/p - 1) * p
	r.charge(it, ws, now, math.MinInt64, edge)
	r.settle(it, ws[0], now)
	r.charge(it, ws, now, edge, math.MaxInt64)
	h := r.chargeShares(replica, it, ws, now)
	r.pend(it, ws[0], &h, now)
	return h
}

// settle, at the first sync of epoch e, charges the bucket with what the
// shares of e−2 hold that no record reports (bucketLeft), as spent as
// e−1 began, if a sync held them through e−1 (pend). If none did,
// nothing was granted in e−1: the bucket was full at some instant of it
// (the argument above), and e−2's hits make no difference. Later pushes
// of e−2's hits charge nothing (charge).
func (r *KeyRecord) settle(it *SyncItem, w Window, now int64) {
	p := int64(w.Period)
	e := now / p
	if r.Synced >= e || r.Settled >= e-2 {
		return
	}
	if r.Synced == e-1 {
		if left := r.bucketLeft(it, w, e-2, r.SyncedPrevN, nil); left > 0 {
			c := &r.Windows[0]
			c.ChargeAt(w, TokenBucket, (e-1)*p, now, left)
			c.TAT = min(c.TAT, MaxExact)
		}
	}
	r.Settled = e - 2
}

// pend holds, in h.prev, what the shares of the epoch before now's hold
// that no record reports (bucketLeft: each sharer that has not pushed
// its hits of that epoch and said so, SyncItem.ReleasePrev, holds its
// share less what it pushed), and notes the sync for settle.
func (r *KeyRecord) pend(it *SyncItem, w Window, h *heldShares, now int64) {
	e := now / int64(w.Period)
	n := unknownSharers
	switch it.ShareEpoch {
	case e:
		n = it.SharersPrev
	case e - 1:
		n = it.Sharers
	}
	h.prev = r.bucketLeft(it, w, e-1, n, declaredPrev(it, e))
	r.Synced, r.SyncedPrevN = e, n
}

// bucketLeft is what the shares of past epoch x, n sharers of it, hold
// that no share record reports: a record that reported share hits of x,
// released or shrank its share of x counts as its record says, a loan
// of x as the loan; each other sharer holds a share, or one that declared
// a shrink of it (declared: name → N) a share at its count. n
// unknownSharers: ShareFraction of the limit.
func (r *KeyRecord) bucketLeft(it *SyncItem, w Window, x int64, n int, declared map[string]int) uint64 {
	frac := ShareFraction(it.Algorithm, it.Share)
	if n == unknownSharers {
		return splitShare(w.Limit, frac, 1)
	}
	size := ShareSize(w, frac, n)
	var left uint64
	active := 0
	for id, rec := range r.Shares {
		count, loan := rec.State.countIn(x), rec.lent(x)
		if !loan && count == 0 && !rec.releasedIn(x) && !rec.shrunk(x) {
			continue // with the unreported shares, if its replica is a sharer
		}
		lim := size
		if loan {
			lim = rec.lentOf(x)
		} else {
			active++
			lim = shrunkLimit(w, frac, rec, x, n, lim, id, declared)
		}
		if !rec.releasedIn(x) {
			left = satAdd(left, satSub(lim, count))
		}
	}
	return satAdd(left, unreportedShares(w, frac, max(abs(n)-active, 0), size, declared))
}

// shrunkLimit is what record rec, one of n sharers of epoch x, may hold
// of share size lim: a share at the count it shrank its share of x to,
// or declared it shrank it to (declared: name → N; the name is deleted,
// counted with its record), if less.
func shrunkLimit(w Window, frac float64, rec ShareRecord, x int64, n int, lim uint64, id string, declared map[string]int) uint64 {
	if rec.shrunk(x) && n > 0 {
		lim = min(lim, ShareSize(w, frac, rec.shrunkN(x)))
	}
	if k, ok := declared[id]; ok {
		lim = min(lim, ShareSize(w, frac, k))
		delete(declared, id)
	}
	return lim
}

// unreportedShares is what the shares of unreported sharers with no
// record hold, size each: those that declared a shrink (declared, less
// those counted with their records) a share at their count, if no more
// of them declared than are unreported.
func unreportedShares(w Window, frac float64, unreported int, size uint64, declared map[string]int) uint64 {
	var held uint64
	if dn := len(declared); dn > 0 && dn <= unreported {
		for _, k := range declared {
			held = satAdd(held, ShareSize(w, frac, k))
		}
		unreported -= dn
	}
	return satAdd(held, satMul(uint64(unreported), size))
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
// reserved units of reservations and this epoch's shares h holds, with
// the epoch before's shares not reported (h.prev) counted as spent as
// this epoch began: now, and at the next epoch's start beside the next
// epoch's shares and the margin.
func bucketRoom(c WindowState, w Window, h heldShares, reserved uint64, now int64) uint64 {
	p := int64(w.Period)
	if h.prev > 0 {
		c.ChargeAt(w, TokenBucket, now/p*p, now, h.prev)
		c.TAT = min(c.TAT, MaxExact) // as the store's doubles hold it
	}
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
