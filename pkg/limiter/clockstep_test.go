package limiter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// TestClockSteps: the wall clock steps back or forward by a minute or a
// day in the middle of a window while a key of 10 a second is offered 100
// a second for 70 s. No key freezes (a clock stepped back once left keys
// in the newest window seen until it caught up: 90 admitted in 70 s
// instead of 700): the key admits at least 95 % of what it admits with no
// step. No window admits more than its limit: the limiter's time follows
// a step forward and absorbs a step back.
func TestClockSteps(t *testing.T) {
	algorithms := []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket}
	for _, a := range algorithms {
		steady, _ := stepRun(t, a, 0)
		for _, step := range []time.Duration{-time.Minute, -24 * time.Hour, time.Minute, 24 * time.Hour} {
			t.Run(fmt.Sprint(a, " ", step), func(t *testing.T) {
				total, admitted := stepRun(t, a, step)
				bound := 10
				if a == limiter.TokenBucket {
					bound = 20 // a bucket's envelope: its capacity plus a second's refill
				}
				for s, n := range admitted {
					if n > bound {
						t.Errorf("second %d of the limiter's time admitted %d > %d", s, n, bound)
					}
				}
				if total < steady*95/100 {
					t.Errorf("admitted %d in 70 s, %d with no step: the key froze", total, steady)
				}
			})
		}
	}
}

// stepRun offers 100 requests a second for 70 s to a key of 10 a second
// and steps the clock by step 5.5 s in. It returns the admits, in total
// and by second of the limiter's time.
func stepRun(t *testing.T, a limiter.Algorithm, step time.Duration) (int, map[int64]int) {
	h := newHarness(t)
	r := rule(a, win(10, time.Second))
	const seconds, perSecond = 70, 100
	admitted := map[int64]int{}
	var total int
	var lt time.Duration // the limiter's time since t0
	for i := range seconds * perSecond {
		if i == 5*perSecond+perSecond/2 {
			h.clk.Advance(step)
			lt += max(step, 0)
		}
		res := h.do("k", r, 1, limiter.Charge)
		if res.Allowed {
			total++
			admitted[int64(lt/time.Second)]++
		}
		if !res.Allowed && res.RetryAfter > time.Second {
			t.Fatalf("request %d: Retry-After %v on a 10/s key", i, res.RetryAfter)
		}
		h.clk.Advance(time.Second / perSecond)
		lt += time.Second / perSecond
	}
	return total, admitted
}
