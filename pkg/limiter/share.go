package limiter

import (
	"slices"
	"time"
)

// Static shares, the store's side. A rule of one fixed window gives each
// of the n replicas that may hold a share of the window's current epoch
// (SyncItem.Sharers) a static share S = ⌊share·L/n⌋ of it (a sliding
// window's: see share_sliding.go),
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
//
// Loans. A replica that is not a sharer of the current epoch (it joined
// less than a lease before the epoch began, or after a founding epoch's
// founders) may ask to borrow a share of it (SyncItem.Borrow). The store
// lends it a share (lend) out of the budget no reservation or share
// holds, and keeps the loan in the replica's record: through the
// epoch, the record counts as the loan (Lent less its share hits held,
// until reported or released), not as one of the n sharers. A loan
// lapses with its epoch. So a replica that joins in the middle of a long
// window (a rolling update's new replica, once the one it replaces has
// left) decides a key locally after one round, not a round for every
// request until the epoch ends.
//
// Shrinking. Replicas added to a deployment (a scale-out, none leaving)
// are not sharers of the epoch under way, whose sharers hold all of it.
// A newcomer's borrow that finds nothing free is contended and, while
// the live replicas outnumber the epoch's sharers and some sharer has
// neither shrunk its share to a share at that count nor released it,
// marked to shrink (SyncResult.Shrink): the sharers shrink their shares
// to ShareSize at the live count (SyncItem.Shrink), keeping what they
// spent beyond it, and the newcomers borrow what that frees. A release
// would leave the sharers no share, and a round for each of their
// requests until the epoch ends. A shrink counts, like a release, until
// the epoch ends, and only ever shrinks the share further.

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
	// From is the first epoch of the run of epochs, ending at Released,
	// whose shares the replica gave up one release after another: a
	// release made in an epoch gives up its share of that epoch on (of the
	// next alone if it held none of it, SyncItem.ReleaseAhead), and one
	// that leaves a gap after Released begins a new run. A sliding
	// window's epoch before counts its shares (share_sliding.go). Zero:
	// every epoch up to Released.
	From int64
	// Lent is the size of a share of epoch LentEpoch the store lent the
	// replica (SyncItem.Borrow), which is not one of that epoch's
	// sharers; zero: none. Through that epoch the record counts as the
	// loan, not as one of the sharers: Lent less its share hits is held.
	Lent      uint64
	LentEpoch int64
	// LentPrev is the size of the loan of epoch LentEpoch − 1, if the
	// replica held one (zero: none): a sliding window's, or a token
	// bucket's, loans of the epoch before still count, as loans.
	LentPrev uint64
	// ShrinkN is the replica count at which the replica shrank its share
	// of epoch ShrinkEpoch (SyncItem.Shrink): through that epoch the
	// record counts ShareSize at ShrinkN, not at the epoch's sharers.
	ShrinkN     int
	ShrinkEpoch int64
	// ShrinkPrevN is the count the replica shrank its share of epoch
	// ShrinkEpoch − 1 to, if it did (zero: it did not): a sliding
	// window's, or a token bucket's, shares of the epoch before still
	// count, as shrunk.
	ShrinkPrevN int
}

// releasedIn reports a record whose share of epoch e was given up.
func (rec ShareRecord) releasedIn(e int64) bool { return rec.From <= e && e <= rec.Released }

// release records a release made in epoch now whose last epoch is last
// (the current epoch or the next), of the next alone if ahead.
func (rec *ShareRecord) release(now, last int64, ahead bool) {
	first := min(now, last)
	if ahead && last > now {
		first = last
	}
	if rec.Released < first-1 {
		rec.From = first // a gap: a new run
	}
	rec.Released = max(rec.Released, last)
}

// releasePast records the end of epoch x, over at the replica: it gives
// up the rest of its share of x (SyncItem.ReleasePrev). A record whose
// run of releases begins after x+1 is left as it is.
func (rec *ShareRecord) releasePast(x int64) {
	switch {
	case rec.releasedIn(x):
	case rec.Released < x:
		if rec.Released < x-1 {
			rec.From = x // a gap: a new run
		}
		rec.Released = x
	case rec.From == x+1:
		rec.From = x
	}
}

// releasesPrev reports an item that says its replica pushed every share
// hit of the epoch before (SyncItem.ReleasePrev), of a rule whose store
// counts that epoch's shares: a sliding window's or a token bucket's.
func (it *SyncItem) releasesPrev() bool { return it.ReleasePrev && aheadShares(it.Algorithm) }

// prevEpoch is the epoch a ReleasePrev of it, synced in epoch, speaks
// of: the one before its share epoch, or before the store's epoch for an
// item of none (a release of a key its replica does not hold, bareItem).
func (it *SyncItem) prevEpoch(epoch int64) int64 {
	if it.ShareEpoch > 0 {
		return min(it.ShareEpoch, epoch) - 1
	}
	return epoch - 1
}

// lent reports a record that holds a loan of epoch e.
func (rec ShareRecord) lent(e int64) bool { return rec.lentOf(e) > 0 }

// lentOf is the size of the record's loan of epoch e; zero: none.
func (rec ShareRecord) lentOf(e int64) uint64 {
	return ofEpoch(e, rec.LentEpoch, rec.Lent, rec.LentPrev)
}

// ofEpoch is what a record keeps of epoch e, holding cur of epoch at and
// prev of the one before: zero of any other.
func ofEpoch[T uint64 | int](e, at int64, cur, prev T) T {
	switch e {
	case at:
		return cur
	case at - 1:
		return prev
	}
	return 0
}

// lend sets the record's loan of epoch e, keeping the epoch before's.
func (rec *ShareRecord) lend(size uint64, e int64) {
	if rec.LentEpoch != e {
		rec.LentPrev = rec.lentOf(e - 1)
	}
	rec.Lent, rec.LentEpoch = size, e
}

// shrunk reports a record whose share of epoch e was shrunk.
func (rec ShareRecord) shrunk(e int64) bool { return rec.shrunkN(e) > 0 }

// shrunkN is the count the record's share of epoch e was shrunk to;
// zero: not shrunk.
func (rec ShareRecord) shrunkN(e int64) int {
	return ofEpoch(e, rec.ShrinkEpoch, rec.ShrinkN, rec.ShrinkPrevN)
}

// sharesOf reports whether it gives its rule static shares.
func sharesOf(it *SyncItem) bool {
	return it.ShareEpoch > 0 && len(it.Windows) == 1 && shareableWindow(it.Algorithm, it.Windows[0])
}

// shareableWindow reports whether a rule of the one window w and
// algorithm a gives static shares: a fixed or sliding window, or a
// token bucket that holds what it refills in a period (share_bucket.go).
func shareableWindow(a Algorithm, w Window) bool {
	switch a {
	case FixedWindow, SlidingWindow:
		return true
	case TokenBucket:
		return w.Capacity(a) == w.Limit
	}
	return false
}

// aheadShares reports an algorithm whose store counts, beside the shares
// of the current epoch, those of the next one: a sliding window's units,
// and a token bucket's, granted now still count when the next epoch's
// sharers spend their shares with no round trip.
func aheadShares(a Algorithm) bool { return a == SlidingWindow || a == TokenBucket }

// shareAlgorithm is the arithmetic a share record counts its share hits
// in: a token bucket's shares are spent and counted epoch by epoch, as a
// fixed window's.
func shareAlgorithm(a Algorithm) Algorithm {
	if a == TokenBucket {
		return FixedWindow
	}
	return a
}

// recordFreshAt is when share record state s of a window w of algorithm
// a counts nothing any more: at the end of its epoch, of the next one
// where the store counts the epoch before's shares (a sliding window's),
// or of the one after (a token bucket's, settled then: settle).
func recordFreshAt(s WindowState, w Window, a Algorithm) int64 {
	return (s.Epoch + 1 + recordEpochs(a)) * int64(w.Period)
}

// recordEpochs is how many epochs after its own a share record of
// algorithm a still counts (recordFreshAt, dropShares).
func recordEpochs(a Algorithm) int64 {
	switch a {
	case SlidingWindow:
		return 1
	case TokenBucket:
		return 2
	}
	return 0
}

// ShareFraction is the part of a window's limit the static shares of one
// of its epochs hold between them: share (local_allowance, clamped to
// (0, 1]) for a fixed window, half of it for a sliding window, whose
// count at an instant adds the epoch before's, weighted, to its own, and
// for a token bucket, which may be asked for the shares of two epochs
// back to back: the shares of two epochs side by side hold at most the
// limit.
func ShareFraction(a Algorithm, share float64) float64 {
	if aheadShares(a) {
		return clampShare(share) / 2
	}
	return share
}

// sliding reports an item of a sliding window with shares.
func (it *SyncItem) sliding() bool { return it.Algorithm == SlidingWindow && sharesOf(it) }

// bucket reports an item of a token bucket with shares.
func (it *SyncItem) bucket() bool { return it.Algorithm == TokenBucket && sharesOf(it) }

// ahead reports an item with shares whose store counts the next epoch's
// shares too (aheadShares).
func (it *SyncItem) ahead() bool { return aheadShares(it.Algorithm) && sharesOf(it) }

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
// (store µs), bringing its share back, whether a reservation may
// outlive the epoch, and whether sharers may shrink their shares to a
// share at the caller's live count (SyncResult.Shrink).
type heldShares struct {
	all, own, released uint64
	returns            int64
	carry, shrinkable  bool
	// prev and next, of a sliding window or a token bucket only
	// (slidingShares): what the shares of the epoch before and of the
	// next one hold.
	prev, next uint64
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
	epoch := now / int64(w.Period)
	frac := ShareFraction(it.Algorithm, it.Share)
	floor := sharesOf(it) && it.ShareFloor != (WindowState{})
	// A loan of the epoch the replica says it holds and the record does
	// not (the store lost it) is made again, at most a share: the replica
	// spends from it.
	var relend uint64
	if sharesOf(it) && it.ShareEpoch == epoch && it.Sharers != 0 {
		relend = min(it.Lent, ShareSize(w, frac, it.Sharers))
	}
	// A shrink of the epoch the replica names, by a sharer of it.
	shrink := sharesOf(it) && it.ShareEpoch == epoch && it.Sharers > 0 && it.Shrink > it.Sharers
	if len(it.ShareHits) > 0 || it.Release != 0 || floor || relend > 0 || shrink || it.releasesPrev() {
		rec := r.Shares[replica]
		if relend > 0 && rec.LentEpoch != epoch {
			rec.lend(relend, epoch)
		}
		if shrink && !rec.lent(epoch) {
			if !rec.shrunk(epoch) {
				rec.ShrinkN, rec.ShrinkPrevN = 0, rec.shrunkN(epoch-1)
			}
			rec.ShrinkN, rec.ShrinkEpoch = max(rec.ShrinkN, it.Shrink), epoch
		}
		if floor {
			rec.State.Raise(exact(it.ShareFloor))
		}
		for _, h := range it.ShareHits {
			if h.N > 0 {
				rec.State.ChargeAt(w, shareAlgorithm(it.Algorithm), h.At, now, uint64(h.N))
				rec.State.Cur, rec.State.Prev = min(rec.State.Cur, maxExact), min(rec.State.Prev, maxExact)
			}
		}
		if it.Release != 0 {
			rec.release(epoch, min(it.Release/int64(w.Period), epoch+1), it.ReleaseAhead)
		}
		if it.releasesPrev() {
			rec.releasePast(it.prevEpoch(epoch))
		}
		r.Shares[replica] = rec
	}
	r.dropShares(it, w, epoch, now)
	if !sharesOf(it) {
		return heldShares{}
	}
	n, prev, next := it.Sharers, it.SharersPrev, it.SharersNext
	switch epoch {
	case it.ShareEpoch:
	case it.ShareEpoch + 1:
		n, prev, next = it.SharersNext, it.Sharers, unknownSharers
	default:
		return heldShares{all: maxExact, returns: maxExact, prev: maxExact, next: maxExact}
	}
	size := ShareSize(w, frac, n)
	sw := Window{Limit: size, Period: w.Period}
	// A sliding window's reservations, or a token bucket's, may outlive
	// the epoch only as slidingCarry or bucketCarry says, once the grant
	// is known (KeyRecord.Sync).
	h := heldShares{returns: maxExact, carry: epoch == it.ShareEpoch && it.SharersNext == it.Sharers && !it.ahead()}
	if it.ahead() {
		h.prev, h.next = r.slidingShares(it, w, epoch, prev, next, declaredPrev(it, epoch), now)
	}
	active, gone, settled := 0, 0, 0
	var declared map[string]int // sharers' declared shrinks (SyncItem.Shrunk): name → N
	if epoch == it.ShareEpoch {
		gone = distinct(it.Gone)
		declared = declaredShrinks(it)
	}
	for id, rec := range r.Shares {
		rec.State.Roll(sw, now)
		rw := sw
		switch {
		case rec.lent(epoch):
			rw.Limit = rec.Lent // a loan: not one of the n sharers
		case rec.State.Cur == 0 && !rec.releasedIn(epoch) && !rec.shrunk(epoch):
			// Nothing reported, released or shrunk this epoch: counted
			// with the unreported shares, if its replica is a sharer of it.
			continue
		default:
			active++
			if gone > 0 && epoch == it.ShareEpoch && slices.Contains(it.Gone, id) {
				gone-- // a gone sharer's record counts as any other
			}
			k, ok := declared[id]
			rw.Limit = shrunkLimit(w, frac, rec, epoch, n, size, id, declared) // a declared one counted with its record
			if rec.releasedIn(epoch) || rec.shrunkN(epoch) >= it.Replicas || ok && k >= it.Replicas ||
				epoch == it.ShareEpoch && slices.Contains(it.Gone, id) {
				settled++
			}
		}
		left := rec.State.Remaining(rw, FixedWindow, now) // a share is of one epoch
		if rec.releasedIn(epoch) {
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
	// Of the unreported shares, those of sharers that declared a shrink
	// count a share at their count; all at S if more declared than are
	// unreported, which no registry says.
	if dn, dsum, dsettled := unreportedDeclared(it, w, declared); dn <= unreported {
		h.all = satAdd(h.all, dsum)
		unreported -= dn
		settled += dsettled
	}
	h.all = satAdd(h.all, satMul(unreported, size))
	h.shrinkable = n > 0 && epoch == it.ShareEpoch && it.Replicas > n && settled < n-gone &&
		ShareSize(w, frac, it.Replicas) < size
	return h
}

// declaredShrinks maps the sharers of it's epoch that declared a shrink
// of their shares (SyncItem.Shrunk) to their counts, the largest if
// named twice; nil when none shrinks a share (a founding epoch's, or at
// no more than Sharers).
func declaredShrinks(it *SyncItem) map[string]int { return declaredOf(it.Shrunk, it.Sharers) }

// declaredPrev is declaredShrinks of the epoch before now's (epoch): of
// it.ShrunkPrev, or of it.Shrunk for an item of the epoch before.
func declaredPrev(it *SyncItem, epoch int64) map[string]int {
	switch epoch {
	case it.ShareEpoch:
		return declaredOf(it.ShrunkPrev, it.SharersPrev)
	case it.ShareEpoch + 1:
		return declaredShrinks(it)
	}
	return nil
}

// declaredOf maps the sharers in shrunk, n sharers of their epoch, to
// their counts above n, the largest if named twice; nil: none.
func declaredOf(shrunk []ShrunkSharer, n int) map[string]int {
	var m map[string]int
	for _, s := range shrunk {
		if s.N > n && n > 0 {
			if m == nil {
				m = make(map[string]int, len(shrunk))
			}
			m[s.Name] = max(m[s.Name], s.N)
		}
	}
	return m
}

// unreportedDeclared sums up the declared shrinks of sharers with no
// record counted (declared, less those counted with their records): how
// many, the shares at their counts, and how many shrank to a share at
// the caller's live count or at more. One that left (Gone) holds nothing.
func unreportedDeclared(it *SyncItem, w Window, declared map[string]int) (n, sum uint64, settled int) {
	for id, k := range declared {
		if !slices.Contains(it.Gone, id) {
			n++
			sum = satAdd(sum, ShareSize(w, ShareFraction(it.Algorithm, it.Share), k))
			if k >= it.Replicas {
				settled++
			}
		}
	}
	return n, sum, settled
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
// epoch's end unless h carries (a sliding window's that carries, the
// next epoch's end; a token bucket's, its middle); when the first released share returns if
// the units reach into released shares. perm is what avail would be with
// those shares back.
func shareExpiry(it *SyncItem, ws []Window, h heldShares, units, perm uint64, now int64) int64 {
	exp := now + int64(it.Lease/time.Microsecond)
	if !sharesOf(it) {
		return exp
	}
	p := int64(ws[0].Period)
	switch {
	case !h.carry:
		exp = min(exp, (now/p+1)*p)
	case it.bucket():
		exp = min(exp, (now/p+2)*p-p/2) // spent by the next epoch's middle (bucketCarry)
	case it.ahead():
		exp = min(exp, (now/p+2)*p) // spent in the next epoch at most (slidingCarry)
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
