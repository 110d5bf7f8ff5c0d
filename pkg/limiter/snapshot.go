package limiter

import "time"

// KeyState is an operator's view of one key (for /debug/keys). Windows
// are the local state, or for a shared key the store's view at its last
// sync.
type KeyState struct {
	Key       string       `json:"key"`
	Algorithm string       `json:"algorithm"`
	Windows   []WinView    `json:"windows"`
	Shared    *SharedState `json:"shared,omitempty"`
}

// SharedState is the replica's side of a key shared through the store.
type SharedState struct {
	Credit  int64  `json:"credit"`          // units admissible without asking
	Pending int64  `json:"pending_hits"`    // admitted, not yet pushed
	Others  uint64 `json:"others_reserved"` // other replicas' reservations
}

// WinView is one window of a KeyState.
type WinView struct {
	Limit     uint64        `json:"limit"`
	Period    time.Duration `json:"period_ns"`
	Used      uint64        `json:"used"`
	Prev      uint64        `json:"previous,omitempty"`
	Start     int64         `json:"window_start_unix_ns,omitempty"`
	TAT       int64         `json:"tat_unix_ns,omitempty"`
	Remaining uint64        `json:"remaining"`
}

// Snapshot returns the state of up to limit keys starting with prefix.
func (l *Limiter) Snapshot(prefix string, limit int) []KeyState {
	var out []KeyState
	now := l.now()
	l.keys.each(prefix, func(e *entry) {
		if len(out) >= limit {
			return
		}
		ks := KeyState{Key: e.key, Algorithm: e.rule.Algorithm.String()}
		counters, at, unit := e.counters, now, int64(1)
		if cs := e.cs.Load(); cs != nil {
			ks.Shared = &SharedState{Credit: cs.credit.Load(), Pending: cs.hits.Load()}
			counters = make([]WindowState, len(e.rule.Windows))
			if v := cs.view.Load(); v != nil {
				ks.Shared.Others = v.others
				copy(counters, v.windows)
			}
			at, unit = l.eng.storeNow(now), 1000 // the view counts in µs
		}
		for i, w := range e.rule.Windows {
			c := counters[i]
			sw := w
			sw.Period /= time.Duration(unit)
			c.Roll(sw, at)
			v := WinView{Limit: w.Limit, Period: w.Period, TAT: c.TAT * unit,
				Remaining: c.Remaining(sw, e.rule.Algorithm, at)}
			if e.rule.Algorithm != TokenBucket {
				v.Used, v.Prev, v.Start, v.TAT = c.Cur, c.Prev, c.Epoch*int64(w.Period), 0
			}
			ks.Windows = append(ks.Windows, v)
		}
		out = append(out, ks)
	})
	return out
}
