package limiter_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
)

// t0 is a window boundary for every period used below (a multiple of a day).
var t0 = time.Unix(1_700_006_400, 0)

func rule(a limiter.Algorithm, ws ...limiter.Window) *limiter.Rule {
	return &limiter.Rule{Algorithm: a, Windows: ws}
}

func win(limit uint64, p time.Duration) limiter.Window {
	return limiter.Window{Limit: limit, Period: p}
}

type harness struct {
	t   *testing.T
	clk *limitertest.Clock
	l   *limiter.Limiter
}

func newHarness(t *testing.T) *harness {
	clk := limitertest.NewClock(t0)
	return &harness{t: t, clk: clk, l: limiter.New(limiter.WithClock(clk))}
}

func (h *harness) do(key string, r *limiter.Rule, hits uint64, op limiter.Op) limiter.Result {
	h.t.Helper()
	out := make([]limiter.Result, 1)
	if _, err := h.l.Decide([]limiter.Request{{Key: []byte(key), Rule: r, Hits: hits, Op: op}}, out); err != nil {
		h.t.Fatal(err)
	}
	return out[0]
}

type step struct {
	at      time.Duration // offset from t0
	hits    uint64
	op      limiter.Op
	allowed bool
	remain  uint64
	reset   time.Duration
}

func runSteps(t *testing.T, r *limiter.Rule, steps []step) {
	t.Helper()
	h := newHarness(t)
	for i, s := range steps {
		h.clk.Set(t0.Add(s.at))
		got := h.do("k", r, s.hits, s.op)
		if got.Allowed != s.allowed || got.Remaining != s.remain || got.Reset != s.reset {
			t.Errorf("step %d at %v hits %d: got allowed=%v remaining=%d reset=%v, want %v %d %v",
				i, s.at, s.hits, got.Allowed, got.Remaining, got.Reset, s.allowed, s.remain, s.reset)
		}
	}
}

func TestFixedWindowBoundaries(t *testing.T) {
	ms := time.Millisecond
	runSteps(t, rule(limiter.FixedWindow, win(3, time.Second)), []step{
		{0, 1, 0, true, 2, time.Second},
		{100 * ms, 2, 0, true, 0, 900 * ms},
		{999 * ms, 1, 0, false, 0, ms},                     // denied: reset is the exact wait
		{time.Second - 1, 1, 0, false, 0, 1},               // one ns before the boundary
		{time.Second, 3, 0, true, 0, time.Second},          // a new window, weighted hits
		{time.Second + 1, 4, 0, false, 0, time.Second - 1}, // larger than the limit: reset
	})
}

func TestSlidingWindowWeightsPrevious(t *testing.T) {
	ms := time.Millisecond
	runSteps(t, rule(limiter.SlidingWindow, win(10, time.Second)), []step{
		{0, 10, 0, true, 0, time.Second},
		{500 * ms, 1, 0, false, 0, 600 * ms}, // next window needs prev·(1−e) ≤ 9: e ≥ 100 ms
		{time.Second, 1, 0, false, 0, 100 * ms},
		{1100 * ms, 1, 0, true, 0, 900 * ms}, // 10·0.9 + 1 = 10
		{1600 * ms, 2, 0, true, 3, 400 * ms}, // ⌈10·0.4⌉ + 3 = 7: 3 left
	})
}

func TestTokenBucketBurstAndRefill(t *testing.T) {
	ms := time.Millisecond
	r := rule(limiter.TokenBucket, limiter.Window{Limit: 10, Period: time.Second, Burst: 5})
	runSteps(t, r, []step{
		{0, 5, 0, true, 0, 500 * ms},  // the whole burst at once; full again in 500 ms
		{0, 1, 0, false, 0, 100 * ms}, // one token per 100 ms
		{100 * ms, 1, 0, true, 0, 500 * ms},
		{350 * ms, 2, 0, true, 0, 450 * ms},
		{2 * time.Second, 6, 0, false, 5, time.Second}, // above the burst: never fits
	})
}

func TestCheckAndRefund(t *testing.T) {
	h := newHarness(t)
	r := rule(limiter.FixedWindow, win(2, time.Minute))
	if got := h.do("k", r, 0, limiter.Check); !got.Allowed || got.Remaining != 2 {
		t.Fatalf("check on a fresh key: %+v", got)
	}
	h.do("k", r, 2, limiter.Charge)
	if got := h.do("k", r, 0, limiter.Check); got.Allowed || got.RetryAfter != time.Minute {
		t.Fatalf("check with nothing left must deny until the window ends: %+v", got)
	}
	if got := h.do("k", r, 5, limiter.Refund); !got.Allowed || got.Remaining != 2 {
		t.Fatalf("refund never goes below an empty window: %+v", got)
	}
}

func TestDeniedBatchChargesNothing(t *testing.T) {
	h := newHarness(t)
	wide := rule(limiter.SlidingWindow, win(100, time.Second))
	narrow := rule(limiter.FixedWindow, win(1, time.Second))
	batch := []limiter.Request{
		{Key: []byte("a"), Rule: wide, Hits: 10},
		{Key: []byte("b"), Rule: narrow},
		{Key: []byte("c"), Rule: wide, Hits: 7},
	}
	out := make([]limiter.Result, 3)
	if ok, _ := h.l.Decide(batch, out); !ok {
		t.Fatal("first batch must pass")
	}
	ok, _ := h.l.Decide(batch, out)
	if ok || out[1].Allowed || !out[0].Allowed || !out[2].Allowed {
		t.Fatalf("second batch: ok=%v out=%+v", ok, out)
	}
	if out[0].Remaining != 90 || out[2].Remaining != 93 {
		t.Fatalf("a denied batch must not charge its other keys: %+v", out)
	}
}

func TestAlwaysChargeKeepsDebt(t *testing.T) {
	h := newHarness(t)
	r := rule(limiter.SlidingWindow, win(10, time.Second))
	r.AlwaysCharge = true
	h.do("k", r, 25, limiter.Charge) // larger than the limit: denied, recorded
	h.clk.Advance(time.Second)
	if got := h.do("k", r, 1, limiter.Charge); got.Allowed {
		t.Fatalf("debt of the previous window must deny: %+v", got)
	}
}

func TestShadowDenialDoesNotDenyBatch(t *testing.T) {
	h := newHarness(t)
	r := rule(limiter.FixedWindow, win(1, time.Second))
	batch := []limiter.Request{{Key: []byte("s"), Rule: r, Shadow: true}, {Key: []byte("x"), Rule: r, Hits: 1}}
	out := make([]limiter.Result, 2)
	h.l.Decide(batch[:1], out)
	batch[1].Hits = 1
	if ok, _ := h.l.Decide(batch, out); !ok || out[0].Allowed {
		t.Fatalf("shadow denial: ok=%v out=%+v", ok, out)
	}
}

func TestEvictionKeepsMemoryBounded(t *testing.T) {
	h := newHarness(t)
	r := rule(limiter.FixedWindow, win(5, time.Second))
	for i := range 10_000 {
		h.do(fmt.Sprint("k", i), r, 1, limiter.Charge)
	}
	if h.l.Keys() != 10_000 {
		t.Fatalf("keys = %d", h.l.Keys())
	}
	h.l.Sweep() // nothing is fresh yet
	if h.l.Keys() != 10_000 {
		t.Fatalf("a live key was evicted: %d left", h.l.Keys())
	}
	h.clk.Advance(time.Second)
	h.l.Sweep()
	if h.l.Keys() != 0 {
		t.Fatalf("fresh keys kept: %d", h.l.Keys())
	}
	if got := h.do("k1", r, 1, limiter.Charge); got.Remaining != 4 {
		t.Fatalf("an evicted key starts fresh: %+v", got)
	}
}

// TestRetryAfterNeverEarly drives random rules with random traffic; every
// denial's RetryAfter is exact: one nanosecond earlier is still denied, and
// at RetryAfter the same request is admitted.
func TestRetryAfterNeverEarly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	periods := []time.Duration{time.Second, 7 * time.Second, time.Minute, time.Hour}
	denials := 0
	for c := range 3000 {
		r := randomRule(rng, periods)
		h := newHarness(t)
		h.clk.Advance(time.Duration(rng.Int64N(int64(time.Hour))))
		for range 50 {
			hits := 1 + rng.Uint64N(minCapacity(r))
			got := h.do("k", r, hits, limiter.Charge)
			if got.Allowed {
				h.clk.Advance(time.Duration(rng.Int64N(int64(r.Windows[0].Period) / 4)))
				continue
			}
			denials++
			h.clk.Advance(got.RetryAfter - 1)
			if early := h.do("k", r, hits, limiter.Charge); early.Allowed {
				t.Fatalf("case %d: %v: admitted 1ns before RetryAfter %v", c, r.Fingerprint(), got.RetryAfter)
			}
			h.clk.Advance(1)
			if again := h.do("k", r, hits, limiter.Charge); !again.Allowed {
				t.Fatalf("case %d: %v hits %d: denied at RetryAfter %v: %+v", c, r.Fingerprint(), hits, got.RetryAfter, again)
			}
		}
	}
	if denials < 1000 {
		t.Fatalf("only %d denials: the test does not exercise Retry-After", denials)
	}
}

func minCapacity(r *limiter.Rule) uint64 {
	m := r.Windows[0].Capacity(r.Algorithm)
	for _, w := range r.Windows {
		m = min(m, w.Capacity(r.Algorithm))
	}
	return m
}

func randomRule(rng *rand.Rand, periods []time.Duration) *limiter.Rule {
	r := &limiter.Rule{Algorithm: limiter.Algorithm(rng.IntN(3))}
	for range 1 + rng.IntN(3) {
		w := win(1+rng.Uint64N(20), periods[rng.IntN(len(periods))])
		if r.Algorithm == limiter.TokenBucket && rng.IntN(2) == 0 {
			w.Burst = 1 + rng.Uint64N(30)
		}
		r.Windows = append(r.Windows, w)
	}
	return r
}

// TestConcurrentNeverOver hits one key from many goroutines within one
// window: exactly the limit is admitted.
func TestConcurrentNeverOver(t *testing.T) {
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket} {
		h := newHarness(t)
		r := rule(a, win(1000, time.Hour))
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				n := 0
				out := make([]limiter.Result, 1)
				req := []limiter.Request{{Key: []byte("hot"), Rule: r, Hits: uint64(1 + g%3)}}
				for range 500 {
					if ok, _ := h.l.Decide(req, out); ok {
						n += 1 + g%3
					}
				}
				mu.Lock()
				admitted += n
				mu.Unlock()
			})
		}
		wg.Wait()
		if admitted > 1000 || admitted < 998 {
			t.Errorf("%v: admitted %d units of a 1000 limit", a, admitted)
		}
	}
}

func TestConcurrencyCap(t *testing.T) {
	l := limiter.New()
	var held []*limiter.Slot
	for range 3 {
		s, ok := l.Acquire("t", 3)
		if !ok {
			t.Fatal("a free slot was refused")
		}
		held = append(held, s)
	}
	if _, ok := l.Acquire("t", 3); ok {
		t.Fatal("a 4th slot of 3 was granted")
	}
	held[0].Release()
	held[0].Release() // idempotent
	if l.InUse("t") != 2 {
		t.Fatalf("in use %d after one release", l.InUse("t"))
	}
	if _, ok := l.Acquire("t", 3); !ok {
		t.Fatal("a released slot was not given back")
	}
	var wg sync.WaitGroup
	var granted atomic.Int64
	for range 50 {
		wg.Go(func() {
			if s, ok := l.Acquire("c", 10); ok {
				granted.Add(1)
				_ = s
			}
		})
	}
	wg.Wait()
	if granted.Load() != 10 {
		t.Fatalf("granted %d of a cap of 10 under contention", granted.Load())
	}
}
