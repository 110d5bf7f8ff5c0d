package limiter

import (
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

// anchor re-reads the wall clock.
func (c *systemClock) anchor() {
	t := time.Now()
	c.offset.Store(t.UnixNano() - int64(t.Sub(c.start)))
}

// clockSource is the Limiter's clock: the system clock, read as above,
// unless WithClock replaced it.
type clockSource struct {
	clock Clock
	sys   *systemClock // clock, unless WithClock replaced it
}

// now is the decision instant in Unix ns.
func (c *clockSource) now() int64 {
	if c.sys != nil {
		return c.sys.UnixNano()
	}
	return c.clock.Now().UnixNano()
}

// now is the decision instant in Unix ns.
func (l *Limiter) now() int64 { return l.clk.now() }
