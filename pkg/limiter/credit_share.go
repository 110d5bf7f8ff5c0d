package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Static shares, the replica's side (see share.go for the store's). A key
// of a rule with one fixed window (or sliding window, or token bucket:
// share_sliding.go, share_bucket.go) admits, before any credit,
// up to its static share S = ⌊share·L/n⌋ of the window's current epoch
// under its own mutex, with no round trip: n counts the replicas that may
// hold a share of that epoch (Membership.Sharers), the same count on
// every replica. The share hits ride along when the key syncs for another
// reason, or at shutdown; nothing else pushes them, since the store counts
// an unreported share as held whole: a crash loses them from the store's
// counts but not from the budget, which keeps the crashed replica's share
// reserved until the epoch ends.
//
// Membership. A replica holds no share of an epoch that began less than
// a lease after it joined the registry: by then every other replica has
// counted it. A replica that left or died stays counted for the epochs
// it was alive in, so shares never grow within an epoch; so does one
// whose lease ended in an outage and that joined again (the registry
// keeps its earlier incarnation), and it keeps its share of those epochs.

// shareState is a key's static share on this replica. mu guards all but
// the atomics.
type shareState struct {
	// none is the local ns until which the share is known to be of no use
	// (spent, released, not held this epoch): the hot path skips it.
	none     atomic.Int64
	pendingN atomic.Int64 // share units admitted, not yet pushed
	// keep is the local ns until which the sweep keeps the key: the end
	// of a later epoch whose share it released (share_sliding.go), which
	// a key made anew would hold whole. Zero: none.
	keep atomic.Int64

	mu       sync.Mutex
	state    WindowState // this replica's share admits, in store µs
	epoch    int64       // the epoch size and sharers were reckoned for
	recheck  int64       // store µs to reckon them again at: a founding epoch's founders known (0: none)
	size     uint64      // S for epoch; 0: no share this epoch
	pending  []Hit       // share hits not yet pushed
	released int64       // the last epoch of the share this replica released
	// next counts units charged ahead to the share of epoch nextEpoch,
	// the one after state's: admits within the clock's uncertainty of a
	// boundary count in both epochs' shares (share_boundary.go).
	next      uint64
	nextEpoch int64
	// flags: flagRelease, flagFounding, flagLent, flagShrink; the
	// shrink's count above them (credit_shrink.go).
	flags   atomic.Uint32
	sharers int32 // n for epoch; beside flags, so a key with its share fits 480 bytes
}

// Flags of a share (shareState.flags).
const (
	// flagRelease asks the next sync to release the current epoch's share.
	flagRelease uint32 = 1 << iota
	// flagFounding: the last spend found a founding epoch whose founders
	// are not known yet (registry.go); a request waits for them.
	flagFounding
	// flagLent: size is a loan of epoch, not a share (credit_loan.go).
	flagLent
	// flagShrink asks the next sync to tell the store of the shrink of
	// the current epoch's share (credit_shrink.go).
	flagShrink
)

func (sh *shareState) has(f uint32) bool { return sh.flags.Load()&f != 0 }
func (sh *shareState) set(f uint32)      { sh.flags.Or(f) }

// unset clears f and reports whether it was set.
func (sh *shareState) unset(f uint32) bool { return sh.flags.And(^f)&f != 0 }

// shareable reports whether rule's keys hold static shares: rules of one
// fixed or sliding window, or token bucket whose capacity is its rate per
// period (shareableWindow; a sliding window's or a token bucket's shares
// of an epoch hold half of it, ShareFraction, and are spent epoch by
// epoch as a fixed window's). A rule of several windows would need a
// share of each.
func shareable(rule *Rule) bool {
	return len(rule.Windows) == 1 && shareableWindow(rule.Algorithm, rule.Windows[0])
}

// spendShare admits n units from key cs's static share; a dry run only
// reports whether they fit. Too near an epoch's boundary to know which
// epoch the store would count the units in, it admits nothing and says
// when it will know (local ns; zero otherwise).
func (e *engine) spendShare(cs *creditState, n, now int64, dry bool) (bool, int64) {
	sh := cs.share
	if sh == nil || now < sh.none.Load() {
		return false, 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cs.orphan.Load() || e.closing.Load() {
		// swept: the key's new state holds its share; closing: the final
		// push may have taken the share's hits, and the store will count
		// no unreported share of a replica that left (SyncItem.Gone)
		return false, 0
	}
	slack := e.clockErr.Load()/1000 + 1 // before the offset (learnClock)
	snow := e.storeNow(now)
	w := cs.ws[0]
	p := int64(w.Period)
	ep := snow / p
	if (snow-slack)/p != ep || (snow+slack)/p != ep {
		if e.spendAcross(cs, n, now, snow, (snow+slack)/p, dry) {
			return true, 0
		}
		return false, now + ((snow+slack)/p*p+slack-snow)*1000
	}
	if ep != sh.epoch || sh.recheck != 0 && snow >= sh.recheck {
		e.reckonEpoch(cs, ep, now)
	}
	size := sh.size
	if sh.released >= ep {
		size = 0
	}
	if size == 0 {
		if sh.recheck != 0 && sh.released < ep {
			// A founding epoch whose founders this replica's copy of the
			// registry does not list all of yet: known in a moment.
			sh.set(flagFounding)
			return false, max(e.localOf(sh.recheck), now+int64(tick))
		}
		if sh.epoch == ep {
			sh.none.Store(e.localOf((ep + 1) * p))
		}
	}
	if sh.has(flagFounding) {
		sh.unset(flagFounding) // written only when it changes: every admit passes here
	}
	if size == 0 {
		return false, 0
	}
	sw := Window{Limit: size, Period: w.Period}
	sh.roll(sw, snow)
	if sh.state.Wait(sw, FixedWindow, snow, uint64(n)) != 0 { // a share is of one epoch
		if sh.state.Remaining(sw, FixedWindow, snow) == 0 {
			sh.none.Store(e.localOf((ep + 1) * p))
		}
		return false, 0
	}
	if dry {
		return true, 0
	}
	sh.state.Charge(sw, FixedWindow, snow, uint64(n))
	if k := len(sh.pending) - 1; k >= 0 && sh.pending[k].At/p == ep {
		sh.pending[k] = Hit{At: snow, N: sh.pending[k].N + n}
	} else {
		sh.pending = append(sh.pending, Hit{At: snow, N: n})
	}
	sh.pendingN.Add(n)
	if left := sh.state.Remaining(sw, FixedWindow, snow); left <= aheadAt(size) && cs.credit.Load() <= 0 &&
		(sh.state.Prev >= size || size >= aheadAlways) && cs.kicked.CompareAndSwap(false, true) {
		// Nearly spent: credit beyond the share is asked for ahead of the
		// request that needs it, as at half credit; for a share smaller
		// than aheadAlways, only when the epoch before spent the whole
		// share too, and once spent (see aheadAlways, aheadAt).
		e.enqueue(cs)
	}
	return true, 0
}

// aheadAlways is the least share that asks for credit ahead at its last
// eighth whatever the epoch before spent: a key sync per 7 units admitted
// at most, and the share hits it pushes keep the store's counts close to
// the truth should the store lose the key's record (a Redis restarted
// empty counts none of the shares). A smaller share asks ahead only
// after an epoch that spent it whole: one that left part of it is not
// likely to need more, and asked for ahead, the few units of a small
// limit the shares leave (L − N·⌊L/N⌋) went to replicas that then did
// not use them, each at a key sync and a hand-back; a key of 10 a second
// over 4 replicas (shares of 2) asked at its first request every second.
// Its request beyond the share, if one comes, waits for a round instead.
// After an epoch that spent it whole, a smaller share asks at its last
// unit, not at its last eighth or unit left (aheadAt).
const aheadAlways = 8

// aheadAt is what is left of a share of size when it asks for credit
// ahead: its last eighth, or for a share smaller than aheadAlways
// nothing. Asked for with a unit left, a share of 2 asked at its first
// unit and pushed half of it: a replica whose requests then waited for
// more found the other replicas' shares unreported, published the key
// and had them released (a round each), though most were spent; its
// second ask, a round later, pushed the rest. Asked for once spent, the
// round pushes the whole share: workload B of scripts/many-keys.sh in
// TestSimSkewedKeySyncs took 0.24 key syncs a request instead of 0.29,
// and fewer of its requests waited for a round (4 196 instead of 4 583
// in TestSimSkewedManyKeys).
func aheadAt(size uint64) uint64 {
	if size < aheadAlways {
		return 0
	}
	return size / 8
}

// spentElsewhere counts n units admitted in degraded mode at snow
// against the share of their epoch: a replica that recovers within the
// epoch holds only what is left of it. ws are the rule's windows in
// store units.
func (sh *shareState) spentElsewhere(ws []Window, n, snow int64) {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.roll(ws[0], snow)
	sh.state.Charge(ws[0], FixedWindow, snow, uint64(n))
}

// spentIn is what this replica's share of window w (store units) has
// admitted in the epoch of snow, with what degraded mode charged to it.
func (sh *shareState) spentIn(w Window, snow int64) uint64 {
	if sh == nil {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.state
	s.Roll(w, snow)
	return s.Cur
}

// shareFits reports whether n units fit in key cs's static share now.
func (e *engine) shareFits(cs *creditState, n, now int64) bool {
	ok, _ := e.spendShare(cs, n, now, true)
	return ok
}

// refundShare takes back up to n units of share hits not yet pushed and
// returns how many it took.
func (sh *shareState) refundShare(w Window, a Algorithm, n, snow int64) int64 {
	if sh == nil || sh.pendingN.Load() == 0 {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var back int64
	for k := len(sh.pending) - 1; k >= 0 && back < n; k-- {
		take := min(sh.pending[k].N, n-back)
		sh.pending[k].N -= take
		back += take
		if sh.pending[k].N == 0 {
			sh.pending = sh.pending[:k]
		}
	}
	sw := Window{Limit: sh.size, Period: w.Period}
	sh.roll(sw, snow)
	sh.state.Refund(sw, a, snow, uint64(back))
	sh.pendingN.Add(-back)
	sh.none.Store(0)
	return back
}

// shareOnly reports, with no lock, a key that has never synced and has
// nothing to: it admits from its static share alone. Waiters, a sync
// asked for and a round in flight all show in kicked or view, so a scan
// of the keys due may pass it by.
func (cs *creditState) shareOnly() bool {
	return cs.share != nil && cs.view.Load() == nil && !cs.kicked.Load() && cs.credit.Load() <= 0 &&
		cs.hits.Load() == 0 && cs.refunds.Load() == 0 && !cs.share.has(flagRelease|flagShrink)
}

// ample reports a share with more than an eighth of it left in the
// epoch of snow (the point at which spendShare may ask for credit ahead).
// w is the rule's window in store units.
func (sh *shareState) ample(w Window, snow int64) bool {
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := snow / int64(w.Period)
	if sh.epoch != e || sh.size == 0 || sh.released >= e {
		return sh.epoch != e && sh.released < e && sh.size > 0 && !sh.has(flagLent) // a new epoch refills a share, not a loan
	}
	sw := Window{Limit: sh.size, Period: w.Period}
	sh.roll(sw, snow)
	st := sh.state
	return st.Remaining(sw, FixedWindow, snow) > max(sh.size/8, 1)
}

// pendingUnits is the share units admitted and not yet pushed.
func (sh *shareState) pendingUnits() int64 {
	if sh == nil {
		return 0
	}
	return sh.pendingN.Load()
}

// orphanShare closes the share of a key the sweep removes: taking its
// lock, it waits for an admission in progress, and spendShare, under it,
// sees the key swept before it admits.
func (cs *creditState) orphanShare() {
	if sh := cs.share; sh != nil {
		sh.mu.Lock()
		cs.orphan.Store(true)
		sh.mu.Unlock()
	}
}

// stillUsed reports, for the sweep, a key still in use, and when it may
// go if not used again: one the sync loop holds (active: it leaves once
// idle, making the key evictable), or a share key used within two of its
// periods, so that its share epoch, which may still count its admits,
// is over. A key swept in the middle of an epoch would come back with
// that epoch's share whole, and its replica admit the share twice.
func (cs *creditState) stillUsed(now int64) (bool, int64) {
	if cs.active.Load() {
		return true, math.MaxInt64 // back in the scans since it was marked
	}
	if cs.share == nil {
		return false, 0
	}
	until := max(cs.lastUse.Load()+2*int64(maxPeriod(cs.rule)), cs.share.keep.Load())
	return until > now, until
}

// localOf converts a store instant (µs) to local ns.
func (e *engine) localOf(storeUs int64) int64 { return (storeUs - e.offset.Load()) * 1000 }

// initShare sets up the share state of a new key, contended already if
// the key is.
func (e *engine) initShare(sh *shareState, key string) {
	if e.contN.Load() == 0 {
		return
	}
	e.contMu.Lock()
	if x := e.contended[key]; x != nil {
		sh.released = x.released // a bare release of this epoch went out
		if x.shrunk > 0 && x.released < x.epoch {
			// A bare shrink of this epoch went out: the share, reckoned
			// at the next spend, is shrunk as the store counts it.
			sh.epoch, sh.recheck = x.epoch, 1
			sh.setShrinkN(x.shrunk)
		}
	}
	e.contMu.Unlock()
}

// awaitFounders waits, for a request on a key of a founding epoch whose
// founders this replica does not know yet (spendShare said when it
// will, at), until they are, at most StoreTimeout + contentionWait, and
// reports whether the share then admitted it. The founders are known
// within foundingSpan and a startup heartbeat of the first join: the
// wait spares the request a round whose credit the founders' half
// leaves short.
func (e *engine) awaitFounders(cs *creditState, n, at, now int64, rule *Rule) bool {
	deadline := now + int64(rule.Tuning.storeTimeout()+contentionWait)
	for at > 0 && at <= deadline && cs.share.has(flagFounding) {
		time.Sleep(time.Duration(at - now))
		now = e.now()
		var ok bool
		if ok, at = e.spendShare(cs, n, now, false); ok {
			return true
		}
	}
	return false
}
