package limiter_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
)

// TestMaxKeys: a Limiter that holds its most keys denies a charge of a key
// it does not hold (mode full, counted), admits the keys it holds as
// before, allows checks and refunds of others without keeping them, and
// takes new keys again once a sweep has evicted old ones.
func TestMaxKeys(t *testing.T) {
	clk := limitertest.NewClock(t0)
	l := limiter.New(limiter.WithClock(clk), limiter.WithMaxKeys(100))
	r := rule(limiter.FixedWindow, win(10, time.Second))
	do := func(key string, op limiter.Op) limiter.Result {
		out := make([]limiter.Result, 1)
		l.Decide([]limiter.Request{{Key: []byte(key), Rule: r, Op: op}}, out)
		return out[0]
	}
	for i := range 100 {
		if res := do(fmt.Sprint("k", i), limiter.Charge); !res.Allowed {
			t.Fatalf("key %d of 100 denied: %+v", i, res)
		}
	}
	res := do("new", limiter.Charge)
	if res.Allowed || res.Mode != limiter.ModeFull || res.RetryAfter <= 0 {
		t.Fatalf("a new key beyond the bound: %+v, want denied, mode full, a Retry-After", res)
	}
	if got := l.Stats().Decisions["full"]; got != 1 {
		t.Errorf("full decisions counted %d, want 1", got)
	}
	if res := do("k7", limiter.Charge); !res.Allowed || res.Mode != limiter.ModeLocal || res.Remaining != 8 {
		t.Errorf("a held key at the bound: %+v, want admitted with 8 left", res)
	}
	for _, op := range []limiter.Op{limiter.Check, limiter.Refund} {
		if res := do("other", op); !res.Allowed {
			t.Errorf("%v of a key not held at the bound denied: %+v", op, res)
		}
	}
	if n := l.Keys(); n != 100 {
		t.Errorf("%d keys held, want 100: nothing is kept for refused keys", n)
	}
	clk.Advance(time.Second)
	if n := l.Sweep(); n != 100 {
		t.Fatalf("swept %d, want 100", n)
	}
	if res := do("new", limiter.Charge); !res.Allowed {
		t.Errorf("a new key after the sweep: %+v, want admitted", res)
	}
}

// TestSweepReturnsMemory: the memory of 200 000 swept keys is returned to
// the heap: the table's maps are rebuilt for the keys that are left.
func TestSweepReturnsMemory(t *testing.T) {
	clk := limitertest.NewClock(t0)
	l := limiter.New(limiter.WithClock(clk))
	r := rule(limiter.FixedWindow, win(10, time.Second))
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	out := make([]limiter.Result, 1)
	for i := range 200_000 {
		l.Decide([]limiter.Request{{Key: fmt.Appendf(nil, "user-%d", i), Rule: r}}, out)
	}
	full := heap()
	clk.Advance(time.Second)
	l.Sweep()
	after := heap()
	t.Logf("heap: %d MB before, %d MB with 200 000 keys, %d MB after the sweep", before>>20, full>>20, after>>20)
	if spike := full - before; after > before && after-before > spike/10 {
		t.Errorf("after the sweep %d of the %d bytes the keys took are still held", after-before, spike)
	}
	runtime.KeepAlive(l)
}
