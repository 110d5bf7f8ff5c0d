package limiter

import "sync"

// The store's clock as this replica knows it. Each round trip that reads
// the store's clock bounds the offset between its clock and ours: the
// store read it at some instant between sending and answering, so the
// offset lies within half the round trip of the sample taken at its
// middle. Those intervals are intersected (the clocks drift apart by at
// most clockDriftPPM, which widens the standing one as it ages), so a
// fast round trip narrows what is known and a slow one, on a busy
// machine, widens nothing; an interval disjoint from the standing one
// means the store's clock stepped, and it replaces it.

// clockDriftPPM bounds how fast the store's clock runs against ours, in
// parts per million: it is a wall clock, which NTP slews by at most 500.
const clockDriftPPM = 500

// clockSlack widens the published uncertainty for the drift until the
// next sample: heartbeats come at least every heartbeatEvery.
const clockSlack = int64(heartbeatEvery) * clockDriftPPM / 1e6

// storeClock is the standing estimate. Its zero value knows nothing.
type storeClock struct {
	mu     sync.Mutex
	known  bool
	offset int64 // store clock − local clock, ns
	err    int64 // how far offset may be off at at, ns
	at     int64 // local ns the estimate was made
}

// learn merges a sample: sent and now are local ns around a call that
// read storeNow (µs). It calls publish, under its lock, with the new
// offset (µs) and uncertainty (ns, with the drift until the next sample):
// calls that overlap publish in the order they merged, so an older and
// wider estimate never stands beside a newer, narrower uncertainty.
func (c *storeClock) learn(sent, now, storeNow int64, publish func(offset, uncertainty int64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	half := max((now-sent)/2, 0) + 1000 // and the store's µs resolution
	sample := storeNow*1000 - (sent+now)/2
	err := c.err + max(now-c.at, 0)*clockDriftPPM/1e6
	lo, hi := max(c.offset-err, sample-half), min(c.offset+err, sample+half)
	if !c.known || lo > hi {
		// The first sample, or one the standing estimate cannot explain:
		// the store's clock stepped.
		lo, hi = sample-half, sample+half
	}
	c.known, c.offset, c.err, c.at = true, lo+(hi-lo)/2, (hi-lo+1)/2, now
	publish(c.offset/1000, c.err+clockSlack)
}

// learnClock records a store call sent at sent (local ns) that read the
// store's clock as storeNow (µs), answered now. The offset is published
// before the uncertainty, and readers load the uncertainty first: one
// that sees the new uncertainty sees the offset that goes with it.
func (e *engine) learnClock(sent, storeNow int64) {
	now := e.now()
	e.answered(now)
	e.storeClk.learn(sent, now, storeNow, func(off, uncertainty int64) {
		e.offset.Store(off)
		e.clockErr.Store(uncertainty)
	})
}
