package limiter

import (
	"math"
	"math/bits"
	"time"
)

// WindowState is the state of one window of one key. Which fields matter
// depends on the algorithm: fixed and sliding windows use Epoch, Cur and
// Prev; the token bucket uses TAT. The zero WindowState is a fresh window.
// Stores keep it per key and window; the Redis scripts mirror its methods.
//
// Every method is pure maths of (state, window, now, n): now is
// nanoseconds since the Unix epoch, read once by the caller.
type WindowState struct {
	Epoch int64  // index of the current window: now / period
	Cur   uint64 // units charged in window Epoch
	Prev  uint64 // units charged in window Epoch-1
	TAT   int64  // token bucket: theoretical arrival time, ns
}

// Never is the wait of a request no amount of waiting admits.
const Never = time.Duration(math.MaxInt64)

// Roll moves c to the window that contains now. A clock that steps back
// stays in the newest window seen.
func (c *WindowState) Roll(w Window, now int64) {
	e := now / int64(w.Period)
	switch {
	case e <= c.Epoch:
		return
	case e == c.Epoch+1:
		c.Prev = c.Cur
	default:
		c.Prev = 0
	}
	c.Cur = 0
	c.Epoch = e
}

// Raise lifts c to at least f, a state of the same window seen earlier:
// every count of an epoch both know becomes the larger of the two, and
// the TAT the later. A state behind f takes f's epoch (its own count
// moving to Prev when f is the next epoch). A store that lost a key
// raised to the states its replicas last saw has every unit back they
// saw charged; one that did not, which counts at least as much, is left
// as it was.
func (c *WindowState) Raise(f WindowState) {
	switch {
	case f.Epoch > c.Epoch:
		prev := f.Prev
		if f.Epoch == c.Epoch+1 {
			prev = max(prev, c.Cur)
		}
		c.Epoch, c.Cur, c.Prev = f.Epoch, f.Cur, prev
	case f.Epoch == c.Epoch:
		c.Cur, c.Prev = max(c.Cur, f.Cur), max(c.Prev, f.Prev)
	case f.Epoch == c.Epoch-1:
		c.Prev = max(c.Prev, f.Cur)
	}
	c.TAT = max(c.TAT, f.TAT)
}

// Lift adds to c what f, a floor read from an earlier generation of the
// record c belongs to, counts beyond base, the highest such floor applied
// so far, and raises base to f (KeyRecord.lift): for the current epoch
// and the one before it. A token bucket takes the later TAT, as Raise.
func (c *WindowState) Lift(w Window, a Algorithm, base *WindowState, f WindowState, now int64) {
	if a == TokenBucket {
		c.TAT = max(c.TAT, f.TAT)
		base.Raise(f)
		return
	}
	c.Roll(w, now)
	nb := *base
	nb.Raise(f)
	c.Cur = satAdd(c.Cur, satSub(nb.countIn(c.Epoch), base.countIn(c.Epoch)))
	c.Prev = satAdd(c.Prev, satSub(nb.countIn(c.Epoch-1), base.countIn(c.Epoch-1)))
	*base = nb
}

// countIn is what c counts in epoch e.
func (c WindowState) countIn(e int64) uint64 {
	switch e {
	case c.Epoch:
		return c.Cur
	case c.Epoch - 1:
		return c.Prev
	}
	return 0
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

// Remaining is how many whole units the window admits at now.
func (c WindowState) Remaining(w Window, a Algorithm, now int64) uint64 {
	switch a {
	case TokenBucket:
		t := interval(w)
		room := now + tolerance(w, a) - max(c.TAT, now)
		if room <= 0 {
			return 0
		}
		return uint64(room / t)
	case SlidingWindow:
		c.Roll(w, now)
		used := c.Cur + c.weightedPrev(w, now)
		return satSub(w.Limit, used)
	default:
		c.Roll(w, now)
		return satSub(w.Limit, c.Cur)
	}
}

// weightedPrev is the previous window's count times the part of it still
// inside the sliding window, rounded up. c must be rolled to now. A state
// whose window begins after now (a store clock that went back, or a floor
// from a clock ahead) has all of the previous window inside.
func (c WindowState) weightedPrev(w Window, now int64) uint64 {
	if c.Prev == 0 {
		return 0
	}
	p := uint64(w.Period)
	left := p // ns of prev still inside
	if e := now - c.Epoch*int64(w.Period); e > 0 {
		left = p - uint64(e)
	}
	hi, lo := bits.Mul64(c.Prev, left)
	q, r := bits.Div64(hi, lo, p)
	if r != 0 {
		q++
	}
	return q
}

// Wait is the exact time from now until n units fit: 0 if they fit now,
// and Never if n exceeds what the window can ever hold.
func (c WindowState) Wait(w Window, a Algorithm, now int64, n uint64) time.Duration {
	if n > w.Capacity(a) {
		return Never
	}
	switch a {
	case TokenBucket:
		at := satAddInt(max(c.TAT, now), spend(n, w)) - tolerance(w, a)
		return time.Duration(max(at-now, 0))
	case SlidingWindow:
		c.Roll(w, now)
		return c.slidingWait(w, now, n)
	default:
		c.Roll(w, now)
		if c.Cur+n <= w.Limit {
			return 0
		}
		return time.Duration((c.Epoch+1)*int64(w.Period) - now)
	}
}

// slidingWait solves prev·(P−e) + (cur+n)·P ≤ L·P for the smallest elapsed
// time e, first in the current window, then in the next one, where the
// current count becomes the previous one. c must be rolled to now.
func (c WindowState) slidingWait(w Window, now int64, n uint64) time.Duration {
	p := int64(w.Period)
	start := c.Epoch * p
	if c.Cur+n <= w.Limit {
		if at := start + slidingEntry(c.Prev, w.Limit-c.Cur-n, p); at < start+p {
			return time.Duration(max(at-now, 0))
		}
	}
	next := start + p
	return time.Duration(next + slidingEntry(c.Cur, w.Limit-n, p) - now)
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

// ChargeAt records n units admitted at instant at into the window they
// were admitted in: the current window or, for fixed and sliding windows,
// the previous one (older hits no longer matter and are dropped). An at
// after now counts as now. It does not check the limit.
func (c *WindowState) ChargeAt(w Window, a Algorithm, at, now int64, n uint64) {
	at = min(at, now)
	if a == TokenBucket {
		c.TAT = satAddInt(max(c.TAT, at), spend(n, w))
		return
	}
	c.Roll(w, now)
	switch at / int64(w.Period) {
	case c.Epoch:
		c.Cur = satAdd(c.Cur, n)
	case c.Epoch - 1:
		c.Prev = satAdd(c.Prev, n)
	}
}

// Charge records n units at now. It does not check the limit.
func (c *WindowState) Charge(w Window, a Algorithm, now int64, n uint64) {
	c.ChargeAt(w, a, now, now, n)
}

// Refund gives back n units at now, never below an empty window or a full
// bucket.
func (c *WindowState) Refund(w Window, a Algorithm, now int64, n uint64) {
	c.RefundAt(w, a, now, now, n)
}

// RefundAt gives back n units refunded at instant at, never below an empty
// window or a full bucket: from the window at falls in, the current one
// or, for fixed and sliding windows, the previous one (older refunds free
// nothing that still counts). An at after now counts as now. A refund
// stamped before a boundary and applied after it must not free units of
// the window that began meanwhile, which admits made after the refund
// hold.
func (c *WindowState) RefundAt(w Window, a Algorithm, at, now int64, n uint64) {
	if a == TokenBucket {
		c.TAT = max(c.TAT-spend(n, w), now)
		return
	}
	c.Roll(w, now)
	switch min(at, now) / int64(w.Period) {
	case c.Epoch:
		c.Cur = satSub(c.Cur, n)
	case c.Epoch - 1:
		c.Prev = satSub(c.Prev, n)
	}
}

// UntilReset is the time an admitted request reports as reset: until the
// window ends (fixed, sliding) or the bucket is full (token bucket).
func (c WindowState) UntilReset(w Window, a Algorithm, now int64) time.Duration {
	if a == TokenBucket {
		return time.Duration(max(c.TAT-now, 0))
	}
	p := int64(w.Period)
	return time.Duration((now/p+1)*p - now)
}

// FreshAt is the instant from which c is indistinguishable from a zero
// WindowState, so the key may be forgotten.
func (c WindowState) FreshAt(w Window, a Algorithm) int64 {
	switch a {
	case TokenBucket:
		return c.TAT
	case SlidingWindow:
		return (c.Epoch + 2) * int64(w.Period)
	default:
		return (c.Epoch + 1) * int64(w.Period)
	}
}

// spend is n emission intervals, saturating instead of wrapping.
func spend(n uint64, w Window) int64 {
	hi, lo := bits.Mul64(n, uint64(interval(w)))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

func satAddInt(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
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
