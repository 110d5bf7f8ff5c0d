package limiter

import (
	"math"
	"time"
)

// The store's health: when shared rules are decided without it
// (degraded), how keys decided so settle once it answers again, which
// failures belong to one outage, and the operator's log of outages.

// outage follows the store's health for the operator: one warning when
// the engine begins to decide without the store, one line when the store
// answers again. runUpkeep owns it.
type outage struct {
	in        bool   // the last store call failed
	warned    bool   // the warning was logged
	since     int64  // local ns of the last success before it (or of start)
	decisions uint64 // degraded decisions counted when it began
	units     int64  // units admitted in degraded mode counted when it began
}

// watchHealth logs the store's outages: at warn once decisions go
// degraded, at info when the store is back, with how long it was away,
// how many decisions were degraded and how many units they admitted,
// which the keys' next rounds push to the store. runUpkeep calls it
// every tick.
func (e *engine) watchHealth(now int64) {
	o := &e.outage
	healthy := e.storeHealthy()
	switch {
	case !healthy && !o.in:
		*o = outage{in: true, since: e.lastReached(), decisions: e.stats.modes[ModeDegraded].Load(),
			units: e.degradedUnits.Load()}
	case !healthy && !o.warned:
		// Soon after a return, the keys still settling decide in degraded
		// mode: only the default CacheTTL tells a new outage from a flap.
		flap := now-e.backAt.Load() < int64(outageFlaps)
		if e.degraded(&Rule{}, now) || !flap && e.stats.modes[ModeDegraded].Load() > o.decisions {
			o.warned = true
			e.log.Warn("store unreachable: shared rules are decided without it, each replica enforcing "+
				"its part of the limit (fail-static) or admitting all (fail-open); admits are pushed when it is back",
				"unreachable_for", time.Duration(now-o.since).Round(time.Millisecond), "replicas", e.replicas.Load())
		}
	case healthy && o.in:
		if o.warned {
			e.log.Info("store reachable again: shared rules are decided from credit",
				"outage", time.Duration(now-o.since).Round(time.Millisecond),
				"degraded_decisions", e.stats.modes[ModeDegraded].Load()-o.decisions,
				"degraded_units_to_push", e.degradedUnits.Load()-o.units)
		}
		*o = outage{}
	}
}

// settling reports whether key cs, decided in degraded mode in the last
// outage, is still decided so (settlingRule), while its rounds push and
// ask for no credit. Until every replica has pushed what it admitted in
// the outage, the store would grant credit for units the others admitted
// in the window under way, beyond L + N. Outside that time it costs the
// hot path one atomic load.
func (e *engine) settling(cs *creditState, now int64) bool {
	if !e.settlingRule(cs.rule, now) {
		return false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.degradedIn(e)
}

// settlingRule reports whether rule's keys may still be settling: the
// store came back from an outage longer than the rule's CacheTTL, and
// now is before the end of the rule's window that holds back + CacheTTL
// (replicas back within one window end it at the same boundary; one back
// later holds its degraded part in the store: settleHold), at most
// settleMax after back.
func (e *engine) settlingRule(rule *Rule, now int64) bool {
	return e.storeNow(now) < e.settleEnd(rule, now)
}

// settleEnd is when rule's keys stop settling (store clock, µs), or 0
// if they do not settle at now (settlingRule).
func (e *engine) settleEnd(rule *Rule, now int64) int64 {
	ttl := int64(rule.Tuning.cacheTTL())
	back := e.backAt.Load()
	if back == 0 || e.downFor.Load() <= ttl || now-back >= ttl+int64(settleMax) {
		return 0
	}
	return e.settleEndAt(rule, back)
}

// settleEndAt is settleEnd for a store back at local ns back.
func (e *engine) settleEndAt(rule *Rule, back int64) int64 {
	ttl := int64(rule.Tuning.cacheTTL())
	if len(rule.Windows) == 0 || rule.Windows[0].Period < time.Microsecond {
		return e.storeNow(back + ttl)
	}
	p := int64(rule.Windows[0].Period / time.Microsecond)
	return (e.storeNow(back+ttl)/p + 1) * p
}

// settleHold fills a settling key's item with what the key may still
// admit in degraded mode until it stops settling, for the store to hold
// as its reservation (SyncItem.Hold); a round sent while degraded may be
// the one the store answers, and holds it too. Replicas back from one
// outage come back up to a store timeout or more apart, and one back
// just before a window's boundary stops settling at it while one back
// just after it settles through the next window: without the hold the
// first is granted credit for units the second admits on its own, and
// the window admits past L + N. The hold is the smallest window's
// degraded part, whole: the key's hits pushed in the window count twice,
// which is conservative. (A rule of several windows, or a token bucket,
// may admit more than that over a settle of several of its shortest
// windows; the bound is exact for one window.) cs.mu must be held.
func (cs *creditState) settleHold(e *engine, it *SyncItem, now int64) {
	end := e.settleEnd(cs.rule, now)
	if e.degraded(cs.rule, now) {
		// The round may be the one the store answers again: the key
		// then settles until the end that answer sets, at the latest.
		end = e.settleEndAt(cs.rule, now+int64(roundTimeout))
	}
	if end <= e.storeNow(now) || !cs.degradedIn(e) {
		return
	}
	n := max(cs.fb().n, 1)
	hold := uint64(math.MaxUint64)
	for _, w := range cs.rule.Windows {
		hold = min(hold, (w.Capacity(cs.rule.Algorithm)+n-1)/n)
	}
	it.Hold, it.HoldUntil = hold, end
}

// settleMax bounds how long past its CacheTTL a key settles.
const settleMax = time.Minute

// settlingLocked is settling with cs.mu held.
func (cs *creditState) settlingLocked(e *engine, now int64) bool {
	return e.settlingRule(cs.rule, now) && cs.degradedIn(e)
}

// degradedIn reports whether the key was decided in degraded mode in the
// last outage (its fallback was seeded in it). cs.mu must be held.
func (cs *creditState) degradedIn(e *engine) bool {
	fb := cs.fb()
	return fb != nil && len(fb.ws) > 0 && fb.ok == e.outageOK.Load()
}

// answered records a store call answered at now: a store back from
// failing starts settling. A failure soon after that (a pooled
// connection the restarted store had closed) belongs to the same outage:
// its end neither shortens the outage nor starts another.
func (e *engine) answered(now int64) {
	failed := e.lastFail.Load()
	prev := e.lastOK.Swap(now)
	if prev == 0 {
		prev = e.started.Load() // never reached before: away since the start
	}
	if failed == 0 || failed <= prev {
		return
	}
	if now-e.backAt.Load() < int64(outageFlaps) && now-prev <= e.downFor.Load() {
		return
	}
	e.downFor.Store(now - prev)
	e.backAt.Store(now)
}

// outageFlaps is how long after the store answers again a failure still
// counts as part of the outage it came back from.
const outageFlaps = 10 * time.Second

func (e *engine) storeFailed(err error) {
	now := e.now()
	if e.storeHealthy() && now-e.backAt.Load() >= int64(outageFlaps) {
		e.outageOK.Store(e.lastOK.Load()) // an outage begins
	}
	e.lastFail.Store(now)
	e.stats.syncFailures.Add(1)
	e.log.Debug("store call failed", "err", err)
}

// storeHealthy reports whether the last store call succeeded.
func (e *engine) storeHealthy() bool { return e.lastFail.Load() <= e.lastOK.Load() }

// degraded reports whether rule must be decided without the store: it has
// been unreachable for longer than the rule's CacheTTL, counted from the
// last call it answered or, on a replica that never reached it, from the
// sync loop's start. Such a replica has heard of no other and counts
// itself alone (N = 1), as a replica that hears it is alone does.
func (e *engine) degraded(rule *Rule, now int64) bool {
	ok := e.lastReached()
	return !e.storeHealthy() && ok != 0 && now-ok > int64(rule.Tuning.cacheTTL())
}

// lastReached is the local ns of the last store call answered, or of the
// sync loop's start while none was; 0 before the loop runs.
func (e *engine) lastReached() int64 {
	if ok := e.lastOK.Load(); ok != 0 {
		return ok
	}
	return e.started.Load()
}

// missedBySeed charges n units just admitted from the key's share or
// credit to its fail-static windows if the store went degraded meanwhile:
// a request that decided degraded while this one was admitted may have
// seeded the windows (seedFallback) before these units counted anywhere
// it reads. Counted twice at worst, which is conservative. Off an outage
// it costs the hot path the two loads of storeHealthy.
func (e *engine) missedBySeed(cs *creditState, rule *Rule, n int64) {
	if e.storeHealthy() || !e.degraded(rule, e.now()) {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	fb := cs.fb()
	if fb == nil || fb.ok != e.outageOK.Load() || len(fb.ws) != len(rule.Windows) {
		return // not seeded in this outage: the seed will count them
	}
	now := e.now()
	for i, w := range rule.Windows {
		w.Limit = (w.Limit + fb.n - 1) / fb.n
		w.Burst = (w.Burst + fb.n - 1) / fb.n
		fb.ws[i].Charge(w, rule.Algorithm, now, uint64(n))
	}
}
