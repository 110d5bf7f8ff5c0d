package limiter

import (
	"time"
)

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
		*o = outage{in: true, since: e.lastOK.Load(), decisions: e.stats.modes[ModeDegraded].Load(),
			units: e.degradedUnits.Load()}
		if o.since == 0 {
			o.since = e.started
		}
	case !healthy && !o.warned:
		if e.degraded(&Rule{}, now) || e.stats.modes[ModeDegraded].Load() > o.decisions {
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
