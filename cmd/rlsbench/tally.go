package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// The accuracy view counts, per wall-clock second and per key, how many
// requests were offered and how many were admitted (answered OK). Seconds
// are Unix seconds of the moment a request was sent, so they line up with
// the fixed windows most rate-limit services use.
//
// Each worker counts its current second in a private map and hands it to
// the shared accuracy collector when it moves on to a later second, so the
// hot path takes no lock. A second is final once every worker has moved
// past it.

// outcome is what became of one request.
type outcome uint8

const (
	admitted outcome = iota // answered, and not OVER_LIMIT
	denied                  // answered OVER_LIMIT
	failed                  // the call failed
)

// keyCount is the tally of one key in one second or window: requests
// offered, and of those the admitted and the denied (the rest failed).
// The sure counts are those answered in the window they were sent in, so
// decided in it whatever the server's clock said; reach counts requests
// sent in an earlier window and answered in this one or later, which the
// server may have decided in this one.
type keyCount struct {
	offered, admitted, denied uint64
	sureAdmitted, sureDenied  uint64
	reach                     uint64
	// sureDeniedBy counts the sure denials by how long they took
	// (deniedLatencyBounds): what kind of decision they were.
	sureDeniedBy [len(deniedLatencyBounds) + 1]uint64
}

// deniedLatencyBounds cut the sure denials by their latency: under 5 ms a
// replica decided without waiting on its store; from 190 ms on a request
// waited past its StoreTimeout (10 ms) and the 180 ms more a replica waits
// for a late round or for other replicas' releases.
var deniedLatencyBounds = [...]time.Duration{5 * time.Millisecond, 190 * time.Millisecond}

// latencyBucket is the index in keyCount.sureDeniedBy of latency d.
func latencyBucket(d time.Duration) int {
	i := 0
	for i < len(deniedLatencyBounds) && d >= deniedLatencyBounds[i] {
		i++
	}
	return i
}

func (c *keyCount) addCount(o keyCount) {
	c.offered += o.offered
	c.admitted += o.admitted
	c.denied += o.denied
	c.sureAdmitted += o.sureAdmitted
	c.sureDenied += o.sureDenied
	c.reach += o.reach
	for i, n := range o.sureDeniedBy {
		c.sureDeniedBy[i] += n
	}
}

// secondRow is the final tally of one second.
type secondRow struct {
	Unix           int64  `json:"unix"`
	Offset         int64  `json:"offset"` // seconds since the run's first second
	Offered        uint64 `json:"offered"`
	Admitted       uint64 `json:"admitted"`
	OverLimit      uint64 `json:"over_limit"`
	Keys           int    `json:"keys"`
	MaxKeyAdmitted uint64 `json:"max_key_admitted"`
	MaxKey         int    `json:"max_key"` // key index with MaxKeyAdmitted
}

// accuracy collects the workers' per-second tallies. It is safe for
// concurrent use.
type accuracy struct {
	first  int64 // the run's first Unix second
	window int64 // seconds in a window of the limit check; 1 without one

	mu       sync.Mutex
	open     map[int64]map[int]keyCount
	workerAt []int64 // second each worker is counting; MaxInt64 once done
	rows     []secondRow
	check    *limitCheck // nil: no per-key limit to check
}

func newAccuracy(first int64, workers int) *accuracy {
	a := &accuracy{first: first, window: 1, open: map[int64]map[int]keyCount{}, workerAt: make([]int64, workers)}
	for i := range a.workerAt {
		a.workerAt[i] = first
	}
	return a
}

// localTally is one worker's tally of its current second. It is owned by
// that worker.
type localTally struct {
	acc    *accuracy
	worker int
	second int64
	keys   map[int]keyCount
}

func (a *accuracy) local(worker int) *localTally {
	return &localTally{acc: a, worker: worker, second: a.first, keys: map[int]keyCount{}}
}

// checkLimit makes a check the answers against limit per window seconds.
// Call it before the workers start.
func (a *accuracy) checkLimit(limit uint64, window int64) {
	a.check = newLimitCheck(limit, window)
	a.window = window
}

// add counts one request for key sent in Unix second sec and answered in
// second end, latency after it was sent. A worker's seconds must not
// decrease.
func (l *localTally) add(sec, end int64, latency time.Duration, key int, o outcome) {
	if sec != l.second {
		l.acc.merge(l.worker, l.second, l.keys, sec)
		clear(l.keys)
		l.second = sec
	}
	win := l.acc.window
	sw, ew := sec-sec%win, end-end%win
	kc := l.keys[key]
	kc.offered++
	switch o {
	case admitted:
		kc.admitted++
		if sw == ew {
			kc.sureAdmitted++
		}
	case denied:
		kc.denied++
		if sw == ew {
			kc.sureDenied++
			kc.sureDeniedBy[latencyBucket(latency)]++
		}
	}
	l.keys[key] = kc
	if ew > sw {
		l.acc.reach(key, sw+win, ew)
	}
}

// reach counts a request of key that the server may have decided in any
// window from the one starting at second from to the one starting at to,
// later than the window it was sent in. Those seconds are not final: the
// worker that sent it counts an earlier one.
func (a *accuracy) reach(key int, from, to int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for w := from; w <= to; w += a.window {
		mergeCounts(a.open, w, map[int]keyCount{key: {reach: 1}})
	}
}

// done hands over the last second; the worker counts nothing after it.
func (l *localTally) done() {
	l.acc.merge(l.worker, l.second, l.keys, math.MaxInt64)
	clear(l.keys)
}

// merge adds a worker's tally of second sec, records that the worker has
// moved on to second next, and finalises every second no worker can add
// to any more.
func (a *accuracy) merge(worker int, sec int64, keys map[int]keyCount, next int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(keys) > 0 {
		mergeCounts(a.open, sec, keys)
	}
	a.workerAt[worker] = next
	low := slices.Min(a.workerAt)
	for s, m := range a.open {
		if s < low {
			a.final(s, m)
		}
	}
	if a.check != nil {
		a.check.closeBefore(low)
	}
}

// final makes second sec, whose tally is keys, a row.
func (a *accuracy) final(sec int64, keys map[int]keyCount) {
	a.rows = append(a.rows, a.row(sec, keys))
	if a.check != nil {
		a.check.add(sec, keys)
	}
	delete(a.open, sec)
}

func (a *accuracy) row(sec int64, keys map[int]keyCount) secondRow {
	r := secondRow{Unix: sec, Offset: sec - a.first, Keys: len(keys), MaxKey: -1}
	for k, c := range keys {
		if c.offered == 0 { // reached only by requests sent earlier
			r.Keys--
			continue
		}
		r.Offered += c.offered
		r.Admitted += c.admitted
		r.OverLimit += c.denied
		if c.admitted > r.MaxKeyAdmitted || (c.admitted == r.MaxKeyAdmitted && (r.MaxKey < 0 || k < r.MaxKey)) {
			r.MaxKeyAdmitted, r.MaxKey = c.admitted, k
		}
	}
	return r
}

// result returns the final rows in time order. Call it after every
// worker's done.
func (a *accuracy) result() []secondRow {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, m := range a.open { // only when a worker never called done
		a.final(s, m)
	}
	if a.check != nil {
		a.check.closeBefore(math.MaxInt64)
	}
	slices.SortFunc(a.rows, func(x, y secondRow) int { return int(x.Unix - y.Unix) })
	return slices.Clone(a.rows)
}

// limit returns the outcome of the limit check, nil without one. Call it
// after result.
func (a *accuracy) limit() *limitReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.check == nil {
		return nil
	}
	return a.check.result()
}

// secondClock maps monotonic instants to Unix seconds, anchored at one
// wall-clock reading so a clock step during the run does not reorder them.
type secondClock struct {
	t0       time.Time
	wallNano int64
}

func newSecondClock(t0 time.Time) secondClock {
	return secondClock{t0: t0, wallNano: t0.UnixNano()}
}

func (c secondClock) second(t time.Time) int64 {
	return (c.wallNano + int64(t.Sub(c.t0))) / int64(time.Second)
}

// mergeCounts adds keys' counts to those of window w in open.
func mergeCounts(open map[int64]map[int]keyCount, w int64, keys map[int]keyCount) {
	m := open[w]
	if m == nil {
		m = make(map[int]keyCount, len(keys))
		open[w] = m
	}
	for k, c := range keys {
		t := m[k]
		t.addCount(c)
		m[k] = t
	}
}
