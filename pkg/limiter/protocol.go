package limiter

import (
	"math"
	"slices"
	"time"
)

// The store protocol counts time in microseconds since the Unix epoch:
// exact in the doubles of Redis's Lua until the year 2255, and fine enough
// for a token bucket of a million units per second. KeyRecord.Sync runs
// the window maths with now and periods in that unit.

// storeWindows expresses ws with periods counted in microseconds, the unit
// of the store's clock.
func storeWindows(ws []Window) []Window {
	out := make([]Window, len(ws))
	for i, w := range ws {
		out[i] = w
		out[i].Period = w.Period / time.Microsecond
	}
	return out
}

// KeyRecord is what a store keeps for one rate key: its windows' state and
// the replicas' reservations. Sync is the credit protocol; the Redis
// scripts are a port of it.
//
// Invariant: after every Sync, for every window, usage + Σ reservations ≤
// capacity (while no replica pushes hits it was not granted). A replica
// admits locally only what its reservation covers, so the replicas
// together never admit more than the limit.
type KeyRecord struct {
	Windows      []WindowState
	Reservations map[string]Reservation
	// Shares are the replicas' static share records (a rule of one fixed
	// or sliding window; see ShareRecord).
	Shares map[string]ShareRecord
	// Pressed is when a key stops counting as pressed (store clock, Unix
	// µs): a sliding window's, one period of its shortest window after a
	// replica last reported requests waiting or denied; a fixed window's
	// with static shares, the end of the epoch in which a replica's
	// waiters found the units they needed held by others (contended).
	// While a fixed window is pressed, its free units go to waiters only
	// (waitersFirst).
	Pressed int64
	// Gen is when the record began (store clock, Unix µs): at its first
	// sync, or the first after the store lost it (lost). Base is, per
	// window, the highest floor of an earlier generation applied since
	// (SyncItem.Floor); nil: zero states.
	Gen  int64
	Base []WindowState
	// Settled is the last epoch of a token bucket with shares whose
	// shares the bucket has been charged with, or no longer needs to be
	// (settle); zero: none. Synced is the epoch of the bucket's last sync,
	// and SyncedPrevN the sharers of the epoch before it (held then,
	// settled at the next epoch's first sync).
	Settled, Synced int64
	SyncedPrevN     int
}

// Reservation is one replica's claim on a key's budget.
type Reservation struct {
	Units   uint64
	Expires int64 // store clock, Unix µs
}

// Sync applies one replica's item at now (store clock, µs):
//
//  1. drop expired reservations and sum the other replicas' live ones;
//  2. raise the windows, if the record lost them (all zero), to the
//     replica's floor (SyncItem.Floor), then charge the pushed hits, each to the window it was admitted in (always
//     recorded, even past the limit: the excess is debt later denials pay);
//  3. avail = min over windows (remaining − others − unreported static
//     shares, see ShareRecord);
//  4. keep the part of the replica's unused credit its old reservation
//     still backs and avail still holds; charge, at now, the units of
//     the probe (SyncItem.Probe) that fit in what is left;
//  5. lend a replica that asks (SyncItem.Borrow) a share of the epoch out
//     of what is left (lend, see ShareRecord), which serves its waiters;
//     grant min(want, ⌊share · free / N⌋) of what is left, or one unit
//     to a replica that holds none where that rounds to zero (see
//     dryGetsOne); a sliding window is pressed for a period from a
//     report of requests waiting or denied;
//  6. last mile: when waiters need more than that split gives, grant them
//     directly from what is left, whatever N;
//  7. record the reservation (kept + granted) until now + lease, or the
//     epoch's end where it reaches into shares released in the epoch;
//     or, where the replica holds more on its own (SyncItem.Hold), that
//     until the later of the two ends.
func (r *KeyRecord) Sync(replica string, it *SyncItem, now int64) SyncResult {
	ws := storeWindows(it.Windows)
	if len(r.Windows) != len(ws) {
		r.Windows = make([]WindowState, len(it.Windows))
	}
	if r.Reservations == nil {
		r.Reservations = make(map[string]Reservation)
	}
	var own, others uint64
	for id, res := range r.Reservations {
		switch {
		case res.Expires <= now:
			delete(r.Reservations, id)
		case id == replica:
			own = res.Units
		default:
			others = min(satAdd(others, res.Units), MaxExact) // as a store in doubles sums them
		}
	}
	before := r.fixedCount(it, ws, now)
	r.lift(it, ws, now)
	var held heldShares
	if it.bucket() {
		held = r.chargeBucket(replica, it, ws, now)
	} else {
		r.charge(it, ws, now, math.MinInt64, math.MaxInt64)
		held = r.chargeShares(replica, it, ws, now)
	}
	if it.Algorithm == SlidingWindow && (it.Denied > 0 || it.Waiting > 0) {
		r.Pressed = now + shortest(ws)
	}
	avail := uint64(math.MaxUint64)
	for i, w := range ws {
		r.Windows[i].Roll(w, now)
		avail = min(avail, satSub(r.Windows[i].Remaining(w, it.Algorithm, now), satAdd(others, held.all)))
	}
	switch {
	case it.sliding():
		avail = min(avail, slidingRoom(r.Windows[0], ws[0], held, others, now))
	case it.bucket():
		avail = min(avail, bucketRoom(r.Windows[0], ws[0], held, others, now))
	}
	kept := min(it.Unused, own, avail)
	probed := min(it.Probe, avail-kept)
	if probed > 0 {
		for i, w := range ws {
			r.Windows[i].Charge(w, it.Algorithm, now, probed)
			if it.bucket() {
				r.Windows[i].countBucket(w, Hit{At: now, N: int64(probed)}, now)
			}
		}
		avail -= probed
	}
	free := avail - kept
	lent, took := r.lend(replica, it, ws, free, held.shrinkable && it.ahead(), now)
	free -= took
	var grant uint64
	if !r.waitersFirst(it, now) {
		grant = min(it.Want, splitShare(free, it.Share, it.Replicas))
		if grant == 0 && kept == 0 && it.Want > 0 && r.dryGetsOne(it, ws, now) && splitShare(free, it.Share, 1) > 0 {
			grant = 1
		}
	}
	if it.Waiting > satAdd(grant, lent) {
		grant = max(grant, min(it.Waiting, free))
	}
	mine := kept + grant
	switch {
	case it.sliding():
		held.carry = slidingCarry(it, ws[0], held, satAdd(others, mine))
	case it.bucket():
		held.carry = bucketCarry(it, ws[0], held, satAdd(others, mine))
	}
	expires := shareExpiry(it, ws, held, mine, satSub(avail, held.released), now)
	switch {
	case min(it.Hold, MaxExact) > mine && it.HoldUntil > now:
		until := min(it.HoldUntil, MaxExact)
		if mine > 0 {
			until = max(until, expires)
		}
		r.Reservations[replica] = Reservation{Units: min(it.Hold, MaxExact), Expires: until}
	case mine > 0:
		r.Reservations[replica] = Reservation{Units: mine, Expires: expires}
	default:
		delete(r.Reservations, replica)
	}
	out := make([]WindowState, len(r.Windows))
	copy(out, r.Windows)
	othersHeld := held.all - held.own
	c := contended(it, ws, satAdd(grant, lent), others, satAdd(othersHeld, held.next), now)
	if it.Borrow && lent == 0 && held.shrinkable && it.ahead() {
		// A sliding window's or a token bucket's newcomer lent no
		// share, its request probed or not: the sharers shrink theirs
		// now, not once a request of the key runs short, so that the
		// next borrow finds a share.
		c = true
	}
	if c && it.Algorithm == FixedWindow {
		p := int64(ws[0].Period)
		r.Pressed = max(r.Pressed, (now/p+1)*p)
	}
	filled := before < ws[0].Limit && r.fixedCount(it, ws, now) >= ws[0].Limit
	return SyncResult{Credit: mine, Others: satAdd(others, othersHeld), Held: othersHeld, Windows: out, Now: now, Probed: probed, Pressed: r.Pressed > now,
		Expires: expires, Contended: c, Gen: r.Gen, Lent: lent, Shrink: c && held.shrinkable, Filled: filled}
}

// fixedCount is the hits the record counts in the epoch of now of a rule
// of one fixed window (SyncResult.Filled); 0 for any other rule.
func (r *KeyRecord) fixedCount(it *SyncItem, ws []Window, now int64) uint64 {
	if it.Algorithm != FixedWindow || len(ws) != 1 || len(r.Windows) != 1 || ws[0].Period <= 0 || r.Windows[0].Epoch != now/int64(ws[0].Period) {
		return 0
	}
	return r.Windows[0].Cur
}

// contended reports whether the caller's waiters need units other
// replicas hold (step 6 left them short): shares, or for a rule with
// shares, reservations too. An item of a share epoch the store has left
// speaks of the waiters of an epoch that is over: they do not make the
// others give up their shares of the new one.
func contended(it *SyncItem, ws []Window, grant, others, othersHeld uint64, now int64) bool {
	if it.Waiting <= grant {
		return false
	}
	if !sharesOf(it) {
		return othersHeld > 0
	}
	return now/int64(ws[0].Period) == it.ShareEpoch && satAdd(others, othersHeld) > 0
}

// waitersFirst reports a fixed window with static shares that is
// pressed: in its epoch, a replica's waiters found the units they needed
// held by others, who release them (contention.go). Until the epoch
// ends the free units go to the requests that wait for them (the last
// mile), not as credit ahead of need to replicas with none waiting: a
// replica that released its share and asked for credit in the same
// round took the unit another's waiter was waiting for, and the waiter
// ran out its wait under the limit.
func (r *KeyRecord) waitersFirst(it *SyncItem, now int64) bool {
	return it.Algorithm == FixedWindow && r.Pressed > now && sharesOf(it)
}

// dryGetsOne reports whether a replica that holds nothing and wants some
// gets one unit even when the split rounds to zero (step 5). A fixed
// window always does: its last units go a unit at a time to the replicas
// that run dry, ahead of their next request. A sliding window does while
// it is not pressed and its slack holds a unit for each replica: at a
// steady load near the limit its free budget is that slack at every
// instant, and split ⌊free/N⌋ it would leave every replica but one to
// wait a round for each request. Once requests wait or are denied, units
// handed out ahead of need would be missing where requests bunch up, or
// taken from the retry a Retry-After promised them to; then, as a token
// bucket always does, it leaves them to the last mile.
func (r *KeyRecord) dryGetsOne(it *SyncItem, ws []Window, now int64) bool {
	switch it.Algorithm {
	case FixedWindow:
		return true
	case SlidingWindow:
		return r.Pressed <= now && slackEach(ws, r.Windows, it.Share, it.Replicas)
	}
	return false
}

// slackEach reports whether the slack each window's previous count left,
// limit − prev, holds a unit for each of n replicas.
func slackEach(ws []Window, s []WindowState, share float64, n int) bool {
	for i, w := range ws {
		if splitShare(satSub(w.Limit, s[i].Prev), share, n) == 0 {
			return false
		}
	}
	return true
}

// shortest is the shortest period of ws, in the unit of their periods
// (µs for the store's windows).
func shortest(ws []Window) int64 {
	p := int64(ws[0].Period)
	for _, w := range ws[1:] {
		p = min(p, int64(w.Period))
	}
	return p
}

// lost reports a record whose windows hold nothing, as a store that lost
// the key (restarted empty, flushed, evicted) has it: only then are the
// windows raised to a replica's floor. A record that holds counts is
// left as it is, so a refund (a negative hit) is not undone by the floor
// of a replica that saw the window before it.
func (r *KeyRecord) lost() bool {
	for _, c := range r.Windows {
		if c != (WindowState{}) {
			return false
		}
	}
	return true
}

// lift raises the windows to the replica's floor (step 2). A record that
// lost its windows begins a new generation, raised to the floor. A floor
// of an earlier generation adds to the windows what it holds beyond the
// floors of that generation applied so far, kept in Base: the counts of
// the lost record a later view saw and an earlier one did not, which the
// windows count nowhere else. A floor of this generation is left alone:
// the record holds all it holds.
func (r *KeyRecord) lift(it *SyncItem, ws []Window, now int64) {
	if r.lost() {
		r.Gen, r.Base = now, nil
		if len(it.Floor) == len(r.Windows) {
			r.raise(it.Floor)
			r.Base = make([]WindowState, len(r.Windows))
			for i, f := range it.Floor {
				r.Base[i] = exact(f)
			}
		}
		return
	}
	if r.Gen == 0 {
		r.Gen = now // a record older than generations
	}
	if it.FloorGen == 0 || it.FloorGen >= r.Gen || len(it.Floor) != len(r.Windows) {
		return
	}
	if r.Base == nil {
		r.Base = make([]WindowState, len(r.Windows)) // none applied: zero
	}
	for i, f := range it.Floor {
		r.Windows[i].Lift(ws[i], it.Algorithm, &r.Base[i], exact(f), now)
	}
}

// raise lifts the windows to a replica's floor (step 2), as the store's
// doubles hold it.
func (r *KeyRecord) raise(floor []WindowState) {
	if len(floor) != len(r.Windows) {
		return
	}
	for i, f := range floor {
		r.Windows[i].Raise(exact(f))
	}
}

// exact is s with every field clamped to ±MaxExact.
func exact(s WindowState) WindowState {
	return WindowState{Epoch: max(min(s.Epoch, MaxExact), -MaxExact), Cur: min(s.Cur, MaxExact),
		Prev: min(s.Prev, MaxExact), TAT: max(min(s.TAT, MaxExact), -MaxExact)}
}

// charge charges the pushed hits and share hits admitted from instant
// from and before to (step 2), but not a token bucket's share hits of an
// epoch settled already: settle charged them with the rest of their
// shares.
func (r *KeyRecord) charge(it *SyncItem, ws []Window, now, from, to int64) {
	for k, h := range slices.Concat(it.Hits, it.ShareHits) {
		if at := min(h.At, now); at < from || at >= to {
			continue
		}
		if k >= len(it.Hits) && it.Algorithm == TokenBucket && r.settledAt(ws[0], h.At, now) {
			continue
		}
		for i, w := range ws {
			c := &r.Windows[i]
			if h.N >= 0 {
				c.ChargeAt(w, it.Algorithm, h.At, now, uint64(h.N))
			} else {
				c.RefundAt(w, it.Algorithm, h.At, now, uint64(-h.N))
			}
			if it.bucket() {
				c.countBucket(w, h, now)
			}
			c.Cur, c.Prev, c.TAT = min(c.Cur, MaxExact), min(c.Prev, MaxExact), min(c.TAT, MaxExact)
		}
	}
}

// MaxExact is the largest integer a Lua double holds exactly, 2^53 − 1:
// stores saturate counts and arrival times there (µs: the year 2255), and
// a store whose arithmetic is in doubles clamps its inputs to it.
const MaxExact = 1<<53 - 1

// maxExact is MaxExact under the name the package's own code uses.
const maxExact = MaxExact

// clampShare is share, 1 unless in (0, 1].
func clampShare(share float64) float64 {
	if !(share > 0 && share <= 1) { // NaN too
		return 1
	}
	return share
}

// splitShare is ⌊share · free / n⌋ with share clamped to (0, 1] (zero
// means 1) and n at least 1.
func splitShare(free uint64, share float64, n int) uint64 {
	share = clampShare(share)
	n = max(n, 1)
	return uint64(math.Floor(share*float64(free))) / uint64(n)
}

// ExpiresAt is when the record may be forgotten: its windows are fresh
// and no reservation is live.
func (r *KeyRecord) ExpiresAt(a Algorithm, ws []Window) int64 {
	var t int64
	for i, w := range storeWindows(ws) {
		if i < len(r.Windows) {
			t = max(t, r.Windows[i].FreshAt(w, a))
		}
	}
	for _, res := range r.Reservations {
		t = max(t, res.Expires)
	}
	if len(ws) == 1 {
		w := storeWindows(ws)[0]
		after := 1 + recordEpochs(a) // the records of an epoch count in the next ones (dropShares)
		for _, s := range r.Shares {
			t = max(t, recordFreshAt(s.State, w, a), (max(s.Released, s.LentEpoch, s.ShrinkEpoch)+after)*int64(w.Period))
		}
		if a == TokenBucket && r.Synced > 0 {
			t = max(t, (r.Synced+2)*int64(w.Period)) // the next epoch's first sync settles (settle)
		}
	}
	return t
}

// ConcRecord is what a store keeps for one concurrency key: each
// replica's published slots (held + reserved).
type ConcRecord struct {
	Replicas map[string]Reservation
}

// Sync publishes replica's slots: granted = max(held, min(held + want,
// max − others)), so held slots are never revoked and spare ones are
// reserved only from what the others leave.
func (r *ConcRecord) Sync(replica string, it *SlotItem, now int64) SlotResult {
	if r.Replicas == nil {
		r.Replicas = make(map[string]Reservation)
	}
	var others uint64
	for id, res := range r.Replicas {
		switch {
		case res.Expires <= now:
			delete(r.Replicas, id)
		case id != replica:
			others = satAdd(others, res.Units)
		}
	}
	granted := max(it.Held, min(satAdd(it.Held, it.Want), satSub(it.Max, others)))
	if granted > 0 {
		r.Replicas[replica] = Reservation{Units: granted, Expires: now + int64(it.Lease/time.Microsecond)}
	} else {
		delete(r.Replicas, replica)
	}
	return SlotResult{Granted: granted, Others: others, Now: now}
}
