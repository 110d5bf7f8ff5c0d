// Package limitertest holds test doubles for the limiter and the
// conformance suite of its stores: Clock, a fake clock whose time moves
// only when told; FaultyStore, a store wrapper with outages, partitions
// and delays switched on by the test; and StoreSuite (real time) and
// StoreSuiteInBubble (testing/synctest's virtual time), which every
// limiter.Store runs. Production code must not import it.
package limitertest

import (
	"sync"
	"time"
)

// Clock is a fake clock. Its zero value starts at the Unix epoch; it is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Unix(0, 0)
	}
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
