package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// creditState is one key's replica-side state in the credit engine. The
// hot path touches only the atomics: an admission is one add on credit and
// one on hits. mu guards the rest, which the sync loop and waiters use.
type creditState struct {
	credit   atomic.Int64 // units admissible locally now (backed by the reservation)
	hits     atomic.Int64 // units admitted (negative: refunded) not yet pushed
	backedTo atomic.Int64 // local ns until which the reservation backs credit
	deniedTo atomic.Int64 // local ns until which an exhausted key denies locally
	grant    atomic.Int64 // the last reservation, for early sync at half credit
	// reserve is the part of the credit the hot path leaves to waiters
	// whose sync round is late: they are still admitted from this
	// replica's reservation.
	reserve atomic.Int64
	// overrunLeft is this replica's share of the budget the last view left
	// free: what timed-out waiters may be admitted on that view when the
	// store is usually fast and only this round was late.
	overrunLeft atomic.Int64
	kicked      atomic.Bool  // a sync was asked for
	lastUse     atomic.Int64 // local ns of the last decision

	view atomic.Pointer[storeView] // the store's state after the last sync; nil: cold

	mu        sync.Mutex
	key       string
	rule      *Rule
	ws        []Window // rule.Windows with periods in µs, the store's unit
	capacity  uint64   // the smallest window's capacity: no request above it fits
	waiters   []*waiter
	waiting   uint64 // units the waiters want
	asked     uint64 // waiting units the in-flight sync asked for
	inflight  bool
	collected bool  // listed for the round being built
	late      []Hit // hits snapshotted just before a window boundary
	// overrunEpoch is the window (of the first period) overrunLeft was set in.
	overrunEpoch int64
	unused       int64 // credit when the in-flight sync was sent
	sentAt       int64 // local ns the in-flight sync was sent
	lastSync     int64 // local ns of the last completed sync
	nextSync     int64 // local ns when the key is next due
	rate         float64
	busy         bool
	fallback     []WindowState // local windows while degraded (fail-static)
}

// storeView is the store's answer to a key's last sync, immutable once
// published, so decisions read it without a lock.
type storeView struct {
	windows []WindowState // time in µs
	others  uint64        // other replicas' reservations
	// ends[i] is the store instant (µs) fixed window i ends: until then
	// it has Limit − Cur units left, and for one period after it Limit,
	// so a decision is described with no division.
	ends []int64
}

// newView publishes a store reply for windows ws (periods in µs).
func newView(ws []Window, a Algorithm, windows []WindowState, others uint64) *storeView {
	v := &storeView{windows: windows, others: others}
	if a == FixedWindow {
		v.ends = make([]int64, len(ws))
		for i, w := range ws {
			v.ends[i] = (windows[i].Epoch + 1) * int64(w.Period)
		}
	}
	return v
}

// fixedAt is fixed window i's remaining units (before pending hits) and
// time to reset at store instant snow, when snow lies in the viewed
// window or the one after it; ok is false otherwise.
func (v *storeView) fixedAt(w Window, i int, snow int64) (rem uint64, reset int64, ok bool) {
	if v == nil || v.ends == nil {
		return 0, 0, false
	}
	end, p := v.ends[i], int64(w.Period)
	switch {
	case snow < end-p:
	case snow < end:
		return satSub(w.Limit, v.windows[i].Cur), end - snow, true
	case snow < end+p:
		return w.Limit, end + p - snow, true
	}
	return 0, 0, false
}

// waiter is a request that found no credit and waits for a sync.
type waiter struct {
	n    int64
	done chan bool // receives whether the sync admitted it
}

// creditDecide decides one request of a shared rule. A dry run charges
// nothing.
func (l *Limiter) creditDecide(cs *creditState, r *Request, hits uint64, now int64, dry bool) Result {
	if now-cs.lastUse.Load() > int64(tick) { // one write per tick keeps the line shared
		cs.lastUse.Store(now)
	}
	n := int64(min(hits, math.MaxInt64/2))
	switch {
	case r.Op == Refund:
		if !dry {
			cs.credit.Add(n)
			cs.hits.Add(-n)
		}
		return l.viewResult(cs, now, true, 0, 0)
	case r.Op == Check:
		n = 1
		if cs.credit.Load() >= 1 && now < cs.backedTo.Load() {
			return l.viewResult(cs, now, true, 0, 0)
		}
		ok, wait := l.viewAdmits(cs, now, 1)
		return l.viewResult(cs, now, ok, wait, 1)
	case dry:
		ok, wait := l.viewAdmits(cs, now, n)
		return l.viewResult(cs, now, ok || (cs.credit.Load() >= n && now < cs.backedTo.Load()), wait, n)
	}
	if uint64(n) > cs.capacity {
		return l.viewResult(cs, now, false, Never, n)
	}
	if l.degraded(r.Rule, now) {
		return l.degradedDecide(cs, r.Rule, n, now)
	}
	if now < cs.deniedTo.Load() {
		_, wait := l.viewAdmits(cs, now, n)
		return l.viewResult(cs, now, false, wait, n)
	}
	if now < cs.backedTo.Load() {
		if c := cs.credit.Add(-n); c >= cs.reserve.Load() {
			cs.hits.Add(n)
			if 2*c < cs.grant.Load() && cs.kicked.CompareAndSwap(false, true) {
				// Early sync at half credit: due at the next tick, batched
				// with the other keys; only waiters wake the loop at once.
				l.enqueue(cs)
			}
			return l.viewResult(cs, now, true, 0, 0)
		}
		cs.credit.Add(n)
	}
	return l.wait(cs, r.Rule, n, now)
}

// undoCredit takes back an admission of a denied batch.
func undoCredit(cs *creditState, n int64) {
	cs.credit.Add(n)
	cs.hits.Add(-n)
}

// wait registers a request that found no credit, asks for a sync and waits
// at most the rule's StoreTimeout. Past it the request is an overrun: it is
// admitted from the credit the hot path holds back (a quarter of the last
// grant), which the reservation covers; failing that, while the store is
// usually fast, on the last view within this replica's share of it; else
// it is denied.
func (l *Limiter) wait(cs *creditState, rule *Rule, n int64, now int64) Result {
	w := &waiter{n: n, done: make(chan bool, 1)}
	cold := cs.view.Load() == nil
	cs.mu.Lock()
	cs.waiters = append(cs.waiters, w)
	cs.waiting += uint64(n)
	cs.mu.Unlock()
	if cs.kicked.CompareAndSwap(false, true) {
		l.enqueue(cs)
	}
	l.kick()
	t := time.NewTimer(rule.Tuning.storeTimeout())
	defer t.Stop()
	select {
	case ok := <-w.done:
		return l.afterWait(cs, ok, n, cold)
	case <-t.C:
	}
	if ok, served := cs.dropWaiter(w); served {
		return l.afterWait(cs, ok, n, cold)
	}
	// The round is late (a slow store). The credit held back for this
	// case pays, so the admit is still covered by this replica's
	// reservation; without it the request is denied rather than decided
	// on a view every other replica may be spending too.
	now = l.now()
	ok, wait := false, time.Duration(0)
	if now < cs.backedTo.Load() {
		if ok = cs.credit.Add(-n) >= 0; ok {
			cs.hits.Add(n)
			l.count(ModeOverrun)
		} else {
			cs.credit.Add(n)
		}
	}
	if !ok {
		ok, wait = l.viewAdmits(cs, now, n)
		if ok = ok && l.overrunOnView(cs, rule, n); ok {
			cs.hits.Add(n)
			l.count(ModeOverrun)
		} else {
			wait = max(wait, rule.Tuning.syncInterval())
		}
	}
	res := l.viewResult(cs, now, ok, wait, n)
	res.Mode = ModeOverrun
	return res
}

// overrunOnView reports whether a timed-out waiter that no held-back
// credit covers may be admitted on the last view, which the view says has
// room: only while the store answers in time as a rule (a round that is
// late now and then), and within this replica's share (1/N, once per
// window) of what the view left free. A store that is slow as a rule gets
// no such admits: every replica would spend the same free budget, which
// the store keeps granting until the admits are pushed.
func (l *Limiter) overrunOnView(cs *creditState, rule *Rule, n int64) bool {
	if !l.storeHealthy() || time.Duration(l.roundTrip.Load()) >= rule.Tuning.storeTimeout() {
		return false
	}
	if cs.overrunLeft.Add(-n) < 0 {
		cs.overrunLeft.Add(n)
		return false
	}
	return true
}

func (l *Limiter) afterWait(cs *creditState, ok bool, n int64, cold bool) Result {
	now := l.now()
	mode := ModeSync
	if cold {
		mode = ModeCold
	}
	l.count(mode)
	var wait time.Duration
	if !ok {
		_, wait = l.viewAdmits(cs, now, n)
	}
	res := l.viewResult(cs, now, ok, wait, n)
	res.Mode = mode
	return res
}

// dropWaiter removes w after its timeout; served reports that a sync
// decided it meanwhile, with ok its answer.
func (cs *creditState) dropWaiter(w *waiter) (ok, served bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, x := range cs.waiters {
		if x == w {
			cs.waiters = append(cs.waiters[:i], cs.waiters[i+1:]...)
			cs.waiting -= uint64(w.n)
			return false, false
		}
	}
	select {
	case ok = <-w.done:
		return ok, true
	default:
		return false, false
	}
}

// serveWaiters hands fresh credit to the waiters in arrival order; those it
// cannot serve are denied when the view says they cannot fit soon. cs.mu
// must be held.
func (cs *creditState) serveWaiters() {
	kept := cs.waiters[:0]
	for _, w := range cs.waiters {
		if cs.credit.Add(-w.n) >= 0 {
			cs.hits.Add(w.n)
			cs.waiting -= uint64(w.n)
			w.done <- true
			continue
		}
		cs.credit.Add(w.n)
		kept = append(kept, w)
	}
	clear(cs.waiters[len(kept):])
	cs.waiters = kept
}

// viewAdmits reports whether n more units fit in the last store view,
// counting other replicas' reservations and the hits not yet pushed, and
// otherwise how long until they would.
func (l *Limiter) viewAdmits(cs *creditState, now int64, n int64) (bool, time.Duration) {
	if cs.view.Load() == nil {
		return false, cs.rule.Tuning.syncInterval()
	}
	wait := cs.viewWait(l.storeNow(now), n)
	return wait == 0, wait
}

// viewWait is the time until n units fit in the view at store instant
// snow, counting other replicas' reservations and the hits not yet
// pushed. When those alone fill a window, it is certainly full until the
// window clears (and at least a sync interval). The view must exist.
func (cs *creditState) viewWait(snow int64, n int64) time.Duration {
	v := cs.view.Load()
	need := uint64(max(n, 1)) + v.others + uint64(max(cs.hits.Load(), 0))
	a := cs.rule.Algorithm
	var longest time.Duration
	for i, w := range cs.ws {
		c := v.windows[i]
		if capacity := w.Capacity(a); need > capacity {
			clear := max(c.Wait(w, a, snow, capacity), c.UntilReset(w, a, snow))
			longest = max(longest, clear*time.Microsecond, cs.rule.Tuning.syncInterval())
			continue
		}
		if wt := c.Wait(w, a, snow, need); wt == Never {
			longest = Never
		} else {
			longest = max(longest, wt*time.Microsecond)
		}
	}
	return longest
}

// viewResult describes a decision from the last view: the most
// restrictive window's limit, what is left of it, and the reset.
func (l *Limiter) viewResult(cs *creditState, now int64, ok bool, wait time.Duration, n int64) Result {
	rule := cs.rule
	res := Result{Allowed: ok}
	snow := l.storeNow(now)
	v := cs.view.Load()
	pending := uint64(max(cs.hits.Load(), 0))
	if v != nil {
		pending += v.others
	}
	for i, w := range cs.ws {
		var rem uint64
		var reset time.Duration
		if r, rs, ok := v.fixedAt(w, i, snow); ok {
			rem, reset = satSub(r, pending), time.Duration(rs)*time.Microsecond
		} else {
			var c WindowState
			if v != nil {
				c = v.windows[i]
			}
			rem = satSub(c.Remaining(w, rule.Algorithm, snow), pending)
			reset = c.UntilReset(w, rule.Algorithm, snow) * time.Microsecond
		}
		if i == 0 || rem < res.Remaining {
			res.Limit, res.Period, res.Remaining, res.Reset = w.Limit, rule.Windows[i].Period, rem, reset
		}
	}
	return finishView(res, ok, wait)
}

// finishView turns a described decision into a denial's when !ok.
func finishView(res Result, ok bool, wait time.Duration) Result {
	if !ok {
		if wait == Never || wait <= 0 {
			wait = max(res.Reset, time.Microsecond)
		}
		res.RetryAfter, res.Reset = wait, wait
		res.Remaining = 0
	}
	return res
}

func minCapacity(r *Rule) uint64 {
	c := uint64(math.MaxUint64)
	for _, w := range r.Windows {
		c = min(c, w.Capacity(r.Algorithm))
	}
	return c
}
