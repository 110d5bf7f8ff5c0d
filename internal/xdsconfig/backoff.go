package xdsconfig

import "time"

// backoff is the reconnection delay policy: a pure function of the
// attempt number, the randomness passed in.
type backoff struct {
	initial, max time.Duration
	factor       float64        // 0: no jitter
	rand         func() float64 // [0, 1)
}

// delay is the wait before reconnection attempt n (0 for the first after
// a stream that worked): initial·2ⁿ capped at max, then spread by ±factor
// and capped at max again.
func (b backoff) delay(n int) time.Duration {
	d := b.initial
	for i := 0; i < n && d < b.max; i++ {
		d = min(d, b.max/2) * 2 // no overflow
	}
	d = min(d, b.max)
	if b.factor > 0 {
		spread := 1 + b.factor*(2*b.rand()-1) // [1−factor, 1+factor)
		d = min(time.Duration(float64(d)*spread), b.max)
	}
	return max(d, 0)
}
