package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time. The Limiter reads it once per decision.
type Clock interface {
	Now() time.Time
}

// systemClock reads Unix time as a wall-clock anchor plus the monotonic
// time since it was taken: one monotonic read per decision instead of
// time.Now's two clock reads. Run re-anchors it periodically, so a step
// of the wall clock is followed within a sweep interval.
type systemClock struct {
	start  time.Time    // carries a monotonic reading
	offset atomic.Int64 // Unix ns at start's monotonic instant
}

func newSystemClock() *systemClock {
	c := &systemClock{start: time.Now()}
	c.offset.Store(c.start.UnixNano())
	return c
}

func (c *systemClock) Now() time.Time { return time.Now() }

// UnixNano is the current Unix time in ns.
func (c *systemClock) UnixNano() int64 { return c.offset.Load() + int64(time.Since(c.start)) }

// anchor re-reads the wall clock. A wall clock stepped forward is
// followed; one stepped back is not, so the time read never goes back.
func (c *systemClock) anchor() {
	t := time.Now()
	off := t.UnixNano() - int64(t.Sub(c.start))
	for {
		old := c.offset.Load()
		if off <= old || c.offset.CompareAndSwap(old, off) {
			return
		}
	}
}

// clockSource is the Limiter's clock: the system clock, read as above,
// unless WithClock replaced it. Either way the time it gives never goes
// back: a clock stepped back by d is read d ahead from then on, so keys
// neither freeze in the newest window they saw nor start a window
// again; a clock stepped forward is followed, and each window still
// admits at most its limit.
type clockSource struct {
	clock Clock
	sys   *systemClock // clock, unless WithClock replaced it
	mu    sync.Mutex   // guards ahead and last (clock only)
	ahead int64        // ns added to clock's reading: the sum of its steps back
	last  int64        // the latest time given
}

// now is the decision instant in Unix ns.
func (c *clockSource) now() int64 {
	if c.sys != nil {
		return c.sys.UnixNano()
	}
	t := c.clock.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	t += c.ahead
	if t < c.last {
		// Stepped back: read ahead by the step from now on.
		c.ahead += c.last - t
		t = c.last
	}
	c.last = t
	return t
}

// now is the decision instant in Unix ns.
func (l *Limiter) now() int64 { return l.clk.now() }
