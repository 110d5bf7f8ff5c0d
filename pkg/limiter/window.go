package limiter

import (
	"math"
	"math/bits"
	"time"
)

// counter is the state of one window of one key. Which fields matter
// depends on the algorithm: fixed and sliding windows use epoch, cur and
// prev; the token bucket uses tat. The zero counter is a fresh window.
//
// Every function below is pure maths of (state, window, now, n): now is
// nanoseconds since the Unix epoch, read once by the caller.
type counter struct {
	epoch int64  // index of the current window: now / period
	cur   uint64 // units charged in window epoch
	prev  uint64 // units charged in window epoch-1
	tat   int64  // token bucket: theoretical arrival time, ns
}

// never is returned as a wait when no amount of waiting admits a request.
const never = time.Duration(math.MaxInt64)

// roll moves c to the window that contains now. A clock that steps back
// stays in the newest window seen.
func (c *counter) roll(w Window, now int64) {
	e := now / int64(w.Period)
	switch {
	case e <= c.epoch:
		return
	case e == c.epoch+1:
		c.prev = c.cur
	default:
		c.prev = 0
	}
	c.cur = 0
	c.epoch = e
}

// interval is the token bucket's emission interval, rounded up so the
// bucket never refills faster than Limit per Period.
func interval(w Window) int64 {
	p, l := int64(w.Period), int64(w.Limit)
	return (p + l - 1) / l
}

// tolerance is how far ahead of now the TAT may run: capacity intervals.
func tolerance(w Window, a Algorithm) int64 {
	return int64(w.Capacity(a)) * interval(w)
}

// remaining is how many whole units the window admits at now.
func remaining(c counter, w Window, a Algorithm, now int64) uint64 {
	switch a {
	case TokenBucket:
		t := interval(w)
		room := now + tolerance(w, a) - max(c.tat, now)
		if room <= 0 {
			return 0
		}
		return uint64(room / t)
	case SlidingWindow:
		c.roll(w, now)
		used := c.cur + weightedPrev(c, w, now)
		return satSub(w.Limit, used)
	default:
		c.roll(w, now)
		return satSub(w.Limit, c.cur)
	}
}

// weightedPrev is the previous window's count times the part of it still
// inside the sliding window, rounded up. c must be rolled to now.
func weightedPrev(c counter, w Window, now int64) uint64 {
	if c.prev == 0 {
		return 0
	}
	p := uint64(w.Period)
	left := p - uint64(now-c.epoch*int64(w.Period)) // ns of prev still inside
	hi, lo := bits.Mul64(c.prev, left)
	q, r := bits.Div64(hi, lo, p)
	if r != 0 {
		q++
	}
	return q
}

// admits reports whether n more units fit at now.
func admits(c counter, w Window, a Algorithm, now int64, n uint64) bool {
	return wait(c, w, a, now, n) == 0
}

// wait is the exact time from now until n units fit, 0 if they fit now, and
// never if n exceeds what the window can ever hold.
func wait(c counter, w Window, a Algorithm, now int64, n uint64) time.Duration {
	if n > w.Capacity(a) {
		return never
	}
	switch a {
	case TokenBucket:
		at := max(c.tat, now) + int64(n)*interval(w) - tolerance(w, a)
		return time.Duration(max(at-now, 0))
	case SlidingWindow:
		c.roll(w, now)
		return slidingWait(c, w, now, n)
	default:
		c.roll(w, now)
		if c.cur+n <= w.Limit {
			return 0
		}
		return time.Duration((c.epoch+1)*int64(w.Period) - now)
	}
}

// slidingWait solves prev·(P−e) + (cur+n)·P ≤ L·P for the smallest elapsed
// time e, first in the current window, then in the next one, where the
// current count becomes the previous one. c must be rolled to now.
func slidingWait(c counter, w Window, now int64, n uint64) time.Duration {
	p := int64(w.Period)
	start := c.epoch * p
	if c.cur+n <= w.Limit {
		if at := start + slidingEntry(c.prev, w.Limit-c.cur-n, p); at < start+p {
			return time.Duration(max(at-now, 0))
		}
	}
	next := start + p
	return time.Duration(next + slidingEntry(c.cur, w.Limit-n, p) - now)
}

// slidingEntry is the smallest elapsed e in [0, p] at which
// prev·(p−e) ≤ room·p holds.
func slidingEntry(prev, room uint64, p int64) int64 {
	if room >= prev {
		return 0
	}
	hi, lo := bits.Mul64(room, uint64(p))
	q, _ := bits.Div64(hi, lo, prev) // room < prev, so q < p
	return p - int64(q)
}

// charge records n units at now. It does not check the limit.
func charge(c *counter, w Window, a Algorithm, now int64, n uint64) {
	if a == TokenBucket {
		c.tat = max(c.tat, now) + int64(n)*interval(w)
		return
	}
	c.roll(w, now)
	c.cur = satAdd(c.cur, n)
}

// refund gives back n units at now, never below an empty window or a full
// bucket.
func refund(c *counter, w Window, a Algorithm, now int64, n uint64) {
	if a == TokenBucket {
		c.tat = max(c.tat-int64(n)*interval(w), now)
		return
	}
	c.roll(w, now)
	c.cur = satSub(c.cur, n)
}

// undo takes back a charge of n units made at chargedAt, from the window it
// was recorded in; now is the current instant.
func undo(c *counter, w Window, a Algorithm, chargedAt, now int64, n uint64) {
	if a == TokenBucket {
		c.tat = max(c.tat-int64(n)*interval(w), now)
		return
	}
	c.roll(w, now)
	switch chargedAt / int64(w.Period) {
	case c.epoch:
		c.cur = satSub(c.cur, n)
	case c.epoch - 1:
		c.prev = satSub(c.prev, n)
	}
}

// untilReset is the time an admitted request reports as reset: until the
// window ends (fixed, sliding) or the bucket is full (token bucket).
func untilReset(c counter, w Window, a Algorithm, now int64) time.Duration {
	if a == TokenBucket {
		return time.Duration(max(c.tat-now, 0))
	}
	p := int64(w.Period)
	return time.Duration((now/p+1)*p - now)
}

// freshAt is the instant from which c is indistinguishable from a zero
// counter, so the key may be forgotten.
func freshAt(c counter, w Window, a Algorithm) int64 {
	switch a {
	case TokenBucket:
		return c.tat
	case SlidingWindow:
		return (c.epoch + 2) * int64(w.Period)
	default:
		return (c.epoch + 1) * int64(w.Period)
	}
}

func satSub(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
