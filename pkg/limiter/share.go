package limiter

import (
	"slices"
	"time"
)

// Static shares, the store's side. A rule of one fixed window gives each
// of the n replicas that may hold a share of the window's current epoch
// (SyncItem.Sharers) a static share S = ⌊share·L/n⌋ of it,
// which the replica admits with no round trip and reports when it syncs
// the key anyway. The store counts every share it has not been told about
// as reserved, so credit granted beyond the shares stays exact:
//
//	usage + Σ reservations + Σ unreported shares ≤ L
//
// A reservation outlives the epoch only if the next epoch has as many
// sharers: otherwise it lapses at the epoch's end, as the shares of the
// next epoch were not counted when it was granted. An item whose epoch
// the store has already left behind by more than one counts every unit
// as held (no grant).
//
// A replica with no share record counts S, or nothing if it left by
// Leave (SyncItem.Gone: it pushed every share hit first); one with a
// record counts S less the share hits it pushed (its State); nothing
// through the epochs of which it released its share. A record with no share hits and no
// release in the current epoch counts as no record: it may be left from
// an epoch its replica held a share of and this one it holds none of,
// and must not stand for a sharer's unreported share. Shares are counted
// at the n of the caller: every replica reading the registry counts the
// same n for an epoch (Membership.Sharers).

// ShareRecord is what a store keeps of one replica's static share of a
// rate key.
type ShareRecord struct {
	// State counts the share hits the replica pushed, in the window's own
	// arithmetic.
	State WindowState
	// Released is the last epoch (window index) of which the replica gave
	// up the rest of its share, from the sync that said so on; zero:
	// never. A release names the current epoch or the next.
	Released int64
}

// sharesOf reports whether it gives its rule static shares.
func sharesOf(it *SyncItem) bool {
	return it.ShareEpoch > 0 && len(it.Windows) == 1 && it.Algorithm == FixedWindow
}

// ShareSize is each replica's static share of window w when n replicas
// may hold one: ⌊share·Limit/n⌋, share as SyncItem.Share; for a founding
// epoch (n = −m, registry.go) ⌊share·Limit/2⌋/m.
func ShareSize(w Window, share float64, n int) uint64 {
	if n < 0 { // a founding epoch: its founders' shares hold half
		return splitShare(w.Limit, clampShare(share)/2, -n)
	}
	return splitShare(w.Limit, share, n)
}

// heldShares is what a key's static shares hold of its window at an
// instant: all unreported shares, the caller's own, the part released
// through the current epoch, when the first of those releases ends
// (store µs), bringing its share back, and whether a reservation may
// outlive the epoch.
type heldShares struct {
	all, own, released uint64
	returns            int64
	carry              bool
}

// chargeShares records the caller's share hits and release in its share
// record, drops the records that no longer count, and sums up the shares.
// ws are the item's windows in store units; the windows are charged with
// the share hits by charge. It returns the zero heldShares for a rule
// without shares.
func (r *KeyRecord) chargeShares(replica string, it *SyncItem, ws []Window, now int64) heldShares {
	if !sharesOf(it) && len(it.ShareHits) == 0 && it.Release == 0 {
		return heldShares{}
	}
	w := ws[0]
	if r.Shares == nil {
		r.Shares = make(map[string]ShareRecord)
	}
	floor := sharesOf(it) && it.ShareFloor != (WindowState{})
	if len(it.ShareHits) > 0 || it.Release != 0 || floor {
		rec := r.Shares[replica]
		if floor {
			rec.State.Raise(exact(it.ShareFloor))
		}
		for _, h := range it.ShareHits {
			if h.N > 0 {
				rec.State.ChargeAt(w, it.Algorithm, h.At, now, uint64(h.N))
				rec.State.Cur, rec.State.Prev = min(rec.State.Cur, maxExact), min(rec.State.Prev, maxExact)
			}
		}
		if it.Release != 0 {
			e := now / int64(w.Period)
			rec.Released = max(rec.Released, min(it.Release/int64(w.Period), e+1))
		}
		r.Shares[replica] = rec
	}
	epoch := now / int64(w.Period)
	for id, rec := range r.Shares {
		if rec.State.FreshAt(w, it.Algorithm) <= now && rec.Released < epoch {
			delete(r.Shares, id)
		}
	}
	if !sharesOf(it) {
		return heldShares{}
	}
	n := it.Sharers
	switch epoch {
	case it.ShareEpoch:
	case it.ShareEpoch + 1:
		n = it.SharersNext
	default:
		return heldShares{all: maxExact, returns: maxExact}
	}
	size := ShareSize(w, it.Share, n)
	sw := Window{Limit: size, Period: w.Period}
	h := heldShares{returns: maxExact, carry: epoch == it.ShareEpoch && it.SharersNext == it.Sharers}
	active, gone := 0, 0
	if epoch == it.ShareEpoch {
		gone = distinct(it.Gone)
	}
	for id, rec := range r.Shares {
		rec.State.Roll(sw, now)
		if rec.State.Cur == 0 && rec.Released < epoch {
			// Nothing reported or released this epoch: counted with the
			// unreported shares, if its replica is a sharer of it.
			continue
		}
		active++
		if gone > 0 && epoch == it.ShareEpoch && slices.Contains(it.Gone, id) {
			gone-- // a gone sharer's record counts as any other
		}
		left := rec.State.Remaining(sw, it.Algorithm, now)
		if rec.Released >= epoch {
			h.released = satAdd(h.released, left)
			h.returns = min(h.returns, (rec.Released+1)*int64(w.Period))
			left = 0
		}
		h.all = satAdd(h.all, left)
		if id == replica {
			h.own = left
		}
	}
	unreported := uint64(max(abs(n)-active-gone, 0))
	h.all = satAdd(h.all, satMul(unreported, size))
	return h
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// distinct counts the distinct names in names.
func distinct(names []string) int {
	n := 0
	for i, x := range names {
		if !slices.Contains(names[:i], x) {
			n++
		}
	}
	return n
}

// shareExpiry is when a reservation of units lapses: now + lease; the
// epoch's end unless h carries; when the first released share returns if
// the units reach into released shares. perm is what avail would be with
// those shares back.
func shareExpiry(it *SyncItem, ws []Window, h heldShares, units, perm uint64, now int64) int64 {
	exp := now + int64(it.Lease/time.Microsecond)
	if !sharesOf(it) {
		return exp
	}
	if !h.carry {
		p := int64(ws[0].Period)
		exp = min(exp, (now/p+1)*p)
	}
	if units > perm {
		exp = min(exp, h.returns)
	}
	return exp
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > maxExact/a {
		return maxExact
	}
	return a * b
}
