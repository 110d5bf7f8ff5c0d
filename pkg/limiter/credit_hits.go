package limiter

import (
	"sync"
	"sync/atomic"
)

// A key's hits admitted from credit are counted in creditState.hits and
// pushed by a later round, stamped with an instant the store charges
// them at. Every window is a whole number of seconds of the store clock,
// aligned to the epoch, so hits stamped within the second of the store
// clock they were admitted in are charged to the window that admitted
// them. A round's push stamps them at its own instant; hits admitted in
// one second and pushed in the next were charged to the next, which then
// looked full with a unit of it still free (a loop that set the hits
// aside a few milliseconds before each second ended woke a millisecond
// or two late on a busy machine one time in two, and the hits of the
// last milliseconds went to the next second all the same; it is gone).
// So the hot path notes the second of its
// latest hit (hitSeconds.last): the first hit of a later second marks those
// already counted as of the earlier one (aged), and a push stamps each
// part in its own second (takeHits). A hit of an earlier second counted
// after the mark is charged to the later one, over-counting it, never
// the other way round.

// hitSeconds is the second bookkeeping of a key's hits.
type hitSeconds struct {
	mu sync.Mutex // orders a second's turn against takeHits
	// last is the whole second of the store clock (µs / 1e6, 32 bits
	// until 2106) of the latest hit counted; 0: none yet.
	last    atomic.Uint32
	agedSec uint32 // a second of the store clock
	aged    int64  // of the hits, those admitted in agedSec or before
}

// addHits counts n hits admitted in second sec of the store clock.
func (cs *creditState) addHits(n, sec int64) {
	if s := uint32(sec); s > cs.secs.last.Load() {
		cs.turnSecond(s)
	}
	cs.hits.Add(n)
}

// turnSecond marks the hits counted so far as of the second before sec.
// A hit of sec waits here until the mark is made, so none is counted in
// the earlier second.
func (cs *creditState) turnSecond(sec uint32) {
	cs.secs.mu.Lock()
	defer cs.secs.mu.Unlock()
	s := cs.secs.last.Load()
	if sec <= s {
		return
	}
	if h := cs.hits.Load(); h > 0 && s > 0 {
		cs.secs.aged, cs.secs.agedSec = h, s
	}
	cs.secs.last.Store(sec)
}

// takeHits takes the unpushed hits, stamped for a push at store instant
// snow: those of an earlier second at its last µs, the rest at snow or,
// if the last of them came in an earlier second, at that second's last
// µs. cs.mu must be held.
func (cs *creditState) takeHits(snow int64) []Hit {
	cs.secs.mu.Lock()
	h := cs.hits.Swap(0)
	aged, as, hs := min(cs.secs.aged, max(h, 0)), int64(cs.secs.agedSec), int64(cs.secs.last.Load())
	cs.secs.aged = 0
	cs.secs.mu.Unlock()
	const sec = 1_000_000
	var out []Hit
	if aged > 0 && (as+1)*sec <= snow {
		out = append(out, Hit{At: (as+1)*sec - 1, N: aged})
		h -= aged
	}
	if h == 0 {
		return out
	}
	at := snow
	if hs > 0 && h > 0 {
		at = min(snow, (hs+1)*sec-1)
	}
	return append(out, Hit{At: at, N: h})
}
