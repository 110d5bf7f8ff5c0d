package limiter

import (
	"math"
	"time"
)

// storeView is the store's answer to a key's last sync, immutable once
// published, so decisions read it without a lock.
type storeView struct {
	windows []WindowState // time in µs
	others  uint64        // other replicas' reservations and static shares held
	held    uint64        // of others, the static shares a release may free
	gen     int64         // the generation of the record (SyncResult.Gen)
}

// newView publishes a store reply.
func newView(r *SyncResult) *storeView {
	return &storeView{windows: r.Windows, others: r.Others, held: min(r.Held, r.Others), gen: r.Gen}
}

// viewSummary sums up a fixed-window key's view over a stretch of store
// time, [from, to) in µs, in which no window changes epoch: its most
// restrictive window, that window's units left before pending hits, and
// when it resets. An admission inside the stretch is described from it
// with no loop and no division.
type viewSummary struct {
	view     *storeView
	others   uint64 // view.others, on the summary's cache line
	from, to int64
	limit    uint64
	period   time.Duration
	rem      uint64
	resetAt  int64
}

// summarize sums up v at store instant snow for windows ws (periods in
// µs) of rule; nil when the view is ahead of snow (a clock estimate moved
// back), which the general description handles.
func summarize(v *storeView, rule *Rule, ws []Window, snow int64) *viewSummary {
	s := &viewSummary{view: v, others: v.others, from: math.MinInt64, to: math.MaxInt64}
	for i, w := range ws {
		p, c := int64(w.Period), v.windows[i]
		e := snow / p
		if e < c.Epoch {
			return nil
		}
		rem := w.Limit // the window has rolled since the view: it is empty
		if e == c.Epoch {
			rem = satSub(w.Limit, c.Cur)
		}
		s.from, s.to = max(s.from, e*p), min(s.to, (e+1)*p)
		if i == 0 || rem < s.rem {
			s.limit, s.period, s.rem, s.resetAt = w.Limit, rule.Windows[i].Period, rem, (e+1)*p
		}
	}
	return s
}

// summaryAt returns cs's summary of view v valid at snow, making a new
// one when the stretch or the view has changed; nil unless fixed windows.
func (cs *creditState) summaryAt(v *storeView, snow int64) *viewSummary {
	if s := cs.summary.Load(); s != nil && s.view == v && snow >= s.from && snow < s.to {
		return s
	}
	if v == nil || cs.rule.Algorithm != FixedWindow {
		return nil
	}
	s := summarize(v, cs.rule, cs.ws, snow)
	if s != nil {
		cs.summary.Store(s)
	}
	return s
}

// viewResult describes a decision from the last view into res: the most
// restrictive window's limit, what is left of it, and the reset. It sets
// every field but Mode, which it clears. Results are written in place:
// Result is too large to travel in registers, and copies cost the hot path
// more than the description.
func (e *engine) viewResult(res *Result, cs *creditState, now int64, ok bool, wait time.Duration) {
	snow := e.storeNow(now)
	v := cs.view.Load()
	hits := uint64(max(cs.hits.Load(), 0) + cs.share.pendingUnits())
	res.Allowed, res.RetryAfter, res.Mode = ok, 0, ModeLocal
	if s := cs.summaryAt(v, snow); s != nil {
		// Past the pending units several windows may tie at zero, and the
		// general description picks the first of them.
		if rem := satSub(s.rem, hits+s.others); rem > 0 {
			res.Limit, res.Period, res.Remaining = s.limit, s.period, rem
			res.Reset = time.Duration(s.resetAt-snow) * time.Microsecond
			if !ok {
				deny(res, wait)
			}
			return
		}
	}
	pending := hits
	if v != nil {
		pending += v.others
	}
	cs.describe(res, v, snow, pending)
	if !ok {
		deny(res, wait)
	}
}

// describe is the general description: every window of the view at snow,
// less pending units.
func (cs *creditState) describe(res *Result, v *storeView, snow int64, pending uint64) {
	a := cs.rule.Algorithm
	for i, w := range cs.ws {
		var c WindowState
		if v != nil {
			c = v.windows[i]
		}
		rem := satSub(c.Remaining(w, a, snow), pending)
		if i == 0 || rem < res.Remaining {
			res.Limit, res.Period, res.Remaining = w.Limit, cs.rule.Windows[i].Period, rem
			res.Reset = c.UntilReset(w, a, snow) * time.Microsecond
		}
	}
}

// deny turns a described decision into a denial retried after wait, or
// at the reset when wait is unknown.
func deny(res *Result, wait time.Duration) {
	if wait == Never || wait <= 0 {
		wait = max(res.Reset, time.Microsecond)
	}
	res.Allowed, res.RetryAfter, res.Reset, res.Remaining = false, wait, wait, 0
}
