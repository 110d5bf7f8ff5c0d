package main

// The limit check (-limit N -per second|minute) holds each key's answers
// against a limit of N requests per window, as a fixed-window rate limit
// would: windows are Unix-aligned (a minute starts at a Unix second
// divisible by 60) and a request counts in the window of the second it
// was sent in, summed over all addresses. It counts two kinds of wrong
// answer:
//
//   - over limit: more than N requests of a key admitted in one window;
//   - denied under limit: a key denied (OVER_LIMIT) in a window in which
//     it was sent at most N requests, so that admitting all of them would
//     have kept the limit.
//
// Windows are cut by the client's send time, the server's by its own
// clock when it decides: a request sent just before a boundary can be
// counted on either side of it, and one that waits is decided later than
// it was sent. So each check is made twice: by send time, and for sure.
// A request answered in the window it was sent in was decided in that
// window (the server and the client share a clock); so a window is
// surely over the limit when more than N such requests were admitted in
// it, and a denial surely under the limit when such a request was denied
// in a window that even with every request answered in it but sent
// earlier saw at most N. A window is checked once every second in it is
// final, and then forgotten.

// limitReport is the outcome of the limit check. Key counts are of
// distinct keys; key-windows are (key, window) pairs with traffic.
type limitReport struct {
	Limit         uint64 `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Keys          int    `json:"keys"`        // keys with traffic
	KeyWindows    uint64 `json:"key_windows"` // (key, window) pairs with traffic
	// Keys sent more than Limit in some window: those the limit should
	// have refused in part.
	KeysOfferedOverLimit int `json:"keys_offered_over_limit"`
	// Keys admitted more than Limit in some window, in how many
	// key-windows, and the admissions beyond Limit summed over them.
	KeysOverLimit       int    `json:"keys_over_limit"`
	KeyWindowsOverLimit uint64 `json:"key_windows_over_limit"`
	AdmittedOverLimit   uint64 `json:"admitted_over_limit"`
	// Keys denied in a window in which they were sent at most Limit, in
	// how many key-windows, and the OVER_LIMIT answers in those.
	KeysDeniedUnderLimit       int    `json:"keys_denied_under_limit"`
	KeyWindowsDeniedUnderLimit uint64 `json:"key_windows_denied_under_limit"`
	DeniedUnderLimit           uint64 `json:"denied_under_limit"`
	// The most requests admitted for one key in one window, that key
	// and the window's first Unix second (MaxKeyIndex -1: no traffic).
	// The same two checks, counting only what is sure (see above).
	KeysSurelyOver              int    `json:"keys_surely_over"`
	KeyWindowsSurelyOver        uint64 `json:"key_windows_surely_over"`
	SurelyAdmittedOver          uint64 `json:"surely_admitted_over"`
	KeysSurelyDeniedUnder       int    `json:"keys_surely_denied_under"`
	KeyWindowsSurelyDeniedUnder uint64 `json:"key_windows_surely_denied_under"`
	SurelyDeniedUnder           uint64 `json:"surely_denied_under"`
	// Those answers by latency: under 5 ms, 5–190 ms, 190 ms or more
	// (deniedLatencyBounds).
	SurelyDeniedUnderByLatency [len(deniedLatencyBounds) + 1]uint64 `json:"surely_denied_under_by_latency"`
	// The first key-window surely over the limit (the earliest window,
	// then the lowest key), and how many it surely admitted; index -1:
	// none.
	SurelyOverKey      string `json:"surely_over_key,omitempty"`
	SurelyOverKeyIndex int    `json:"surely_over_key_index"`
	SurelyOverWindow   int64  `json:"surely_over_window_unix"`
	SurelyOverAdmitted uint64 `json:"surely_over_admitted"`
	MaxAdmitted        uint64 `json:"max_admitted"`
	MaxKey             string `json:"max_key"`
	MaxKeyIndex        int    `json:"max_key_index"`
	MaxWindowUnix      int64  `json:"max_window_unix"`
}

// limitCheck accumulates the final seconds into windows and checks each
// window once it is complete. It is not safe for concurrent use: the
// accuracy collector calls it under its lock.
type limitCheck struct {
	open map[int64]map[int]keyCount // window's first second → key → tally

	keys, offeredOver, over, deniedUnder map[int]struct{}
	surelyOver, surelyDenied             map[int]struct{}
	r                                    limitReport
}

func newLimitCheck(limit uint64, window int64) *limitCheck {
	return &limitCheck{
		open:         map[int64]map[int]keyCount{},
		keys:         map[int]struct{}{},
		offeredOver:  map[int]struct{}{},
		over:         map[int]struct{}{},
		deniedUnder:  map[int]struct{}{},
		surelyOver:   map[int]struct{}{},
		surelyDenied: map[int]struct{}{},
		r:            limitReport{Limit: limit, WindowSeconds: window, MaxKeyIndex: -1, SurelyOverKeyIndex: -1},
	}
}

// add adds the final tally of second sec to its window.
func (c *limitCheck) add(sec int64, keys map[int]keyCount) {
	if len(keys) == 0 {
		return
	}
	mergeCounts(c.open, sec-sec%c.r.WindowSeconds, keys)
}

// closeBefore checks every window that ends at or before second low: no
// second of it can be added to any more.
func (c *limitCheck) closeBefore(low int64) {
	for w, m := range c.open {
		if w+c.r.WindowSeconds <= low {
			c.checkWindow(w, m)
			delete(c.open, w)
		}
	}
}

func (c *limitCheck) checkWindow(w int64, keys map[int]keyCount) {
	r, limit := &c.r, c.r.Limit
	for k, kc := range keys {
		c.checkSure(w, k, kc)
		if kc.offered == 0 { // reached only by requests sent earlier
			continue
		}
		c.keys[k] = struct{}{}
		r.KeyWindows++
		if kc.offered > limit {
			c.offeredOver[k] = struct{}{}
		}
		if kc.admitted > limit {
			c.over[k] = struct{}{}
			r.KeyWindowsOverLimit++
			r.AdmittedOverLimit += kc.admitted - limit
		}
		if kc.denied > 0 && kc.offered <= limit {
			c.deniedUnder[k] = struct{}{}
			r.KeyWindowsDeniedUnderLimit++
			r.DeniedUnderLimit += kc.denied
		}
		// Ties go to the earlier window, then the lower key, so the
		// report does not depend on map order.
		if r.MaxKeyIndex < 0 || kc.admitted > r.MaxAdmitted ||
			kc.admitted == r.MaxAdmitted && (w < r.MaxWindowUnix || w == r.MaxWindowUnix && k < r.MaxKeyIndex) {
			r.MaxAdmitted, r.MaxKeyIndex, r.MaxWindowUnix = kc.admitted, k, w
		}
	}
}

// checkSure makes the sure checks of one key's window.
func (c *limitCheck) checkSure(w int64, k int, kc keyCount) {
	r, limit := &c.r, c.r.Limit
	if kc.sureAdmitted > limit {
		if i := r.SurelyOverKeyIndex; i < 0 || w < r.SurelyOverWindow || w == r.SurelyOverWindow && k < i {
			r.SurelyOverKeyIndex, r.SurelyOverWindow, r.SurelyOverAdmitted = k, w, kc.sureAdmitted
		}
		c.surelyOver[k] = struct{}{}
		r.KeyWindowsSurelyOver++
		r.SurelyAdmittedOver += kc.sureAdmitted - limit
	}
	if kc.sureDenied > 0 && kc.offered+kc.reach <= limit {
		c.surelyDenied[k] = struct{}{}
		r.KeyWindowsSurelyDeniedUnder++
		r.SurelyDeniedUnder += kc.sureDenied
		for i, n := range kc.sureDeniedBy {
			r.SurelyDeniedUnderByLatency[i] += n
		}
	}
}

// result returns the report of the windows checked so far; MaxKey is left
// for the caller to name.
func (c *limitCheck) result() *limitReport {
	r := c.r
	r.Keys = len(c.keys)
	r.KeysOfferedOverLimit = len(c.offeredOver)
	r.KeysOverLimit = len(c.over)
	r.KeysDeniedUnderLimit = len(c.deniedUnder)
	r.KeysSurelyOver = len(c.surelyOver)
	r.KeysSurelyDeniedUnder = len(c.surelyDenied)
	return &r
}
