package limiter

import (
	"testing"
	"time"
)

// TestStoreClock: a slow round trip on a busy machine widens nothing a
// fast one established; the estimate ages by the drift bound; a sample
// the estimate cannot explain (the store's clock stepped) replaces it.
func TestStoreClock(t *testing.T) {
	const ms = int64(time.Millisecond)
	var c storeClock
	var off, unc int64
	learn := func(sent, now, storeNow int64) (int64, int64) {
		c.learn(sent, now, storeNow, func(o, u int64) { off, unc = o, u })
		return off, unc
	}
	// Store clock = local + 5 s. A 40-ms round trip: ±20 ms (and 1 ms).
	at := int64(100 * time.Second)
	off, unc = learn(at, at+40*ms, (at+20*ms)/1000+5e6)
	if off != 5e6 || unc < 20*ms || unc > 22*ms {
		t.Fatalf("first sample: offset %d µs ± %v", off, time.Duration(unc))
	}
	// A 2-ms round trip whose store read came early in it: the estimate
	// narrows to ±2 ms around it.
	at += 100 * ms
	off, unc = learn(at, at+2*ms, at/1000+5e6)
	if off < 5e6-2000 || off > 5e6 || unc > 3*ms {
		t.Fatalf("fast sample: offset %d µs ± %v", off, time.Duration(unc))
	}
	narrow := unc
	// Slow round trips do not widen it beyond the drift.
	for range 10 {
		at += 100 * ms
		_, unc = learn(at, at+60*ms, (at+30*ms)/1000+5e6)
	}
	if unc > narrow+ms {
		t.Errorf("after slow samples: ± %v, was ± %v", time.Duration(unc), time.Duration(narrow))
	}
	// With no sample for a minute the drift bound widens the standing
	// estimate: a sample 20 ms off within its ±25 ms is kept, narrowed.
	at += int64(time.Minute)
	off, unc = learn(at, at+40*ms, (at+20*ms)/1000+5e6+20000)
	if off < 5e6 || off > 5e6+20000 || unc > 30*ms {
		t.Errorf("after a minute: offset %d µs ± %v", off, time.Duration(unc))
	}
	// The store's clock steps back 60 s.
	at += 100 * ms
	off, _ = learn(at, at+2*ms, (at+ms)/1000+5e6-60e6)
	if off < 5e6-60e6-2000 || off > 5e6-60e6+2000 {
		t.Errorf("after a step of −60 s: offset %d µs, want about %d", off, int64(5e6-60e6))
	}
}
