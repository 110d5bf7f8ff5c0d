package limiter_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// threeWindows is the benchmark rule: per second, per minute, per hour, set
// high enough that every decision is an admission.
var threeWindows = &limiter.Rule{Algorithm: limiter.FixedWindow, Windows: []limiter.Window{
	{Limit: 1 << 39, Period: time.Second},
	{Limit: 1 << 39, Period: time.Minute},
	{Limit: 1 << 39, Period: time.Hour},
}}

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = limiter.AppendEntry([]byte("bench"), "key", strconv.Itoa(i))
		keys[i] = limiter.AppendPart(keys[i], threeWindows.Fingerprint())
	}
	return keys
}

func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		benchLimiter(b, limiter.New(), benchKeys(n))
	}
}

// benchLimiter runs the serial and parallel decision benchmarks of l over
// keys, one request of threeWindows each.
func benchLimiter(b *testing.B, l *limiter.Limiter, keys [][]byte) {
	n := len(keys)
	b.Run("keys="+strconv.Itoa(n)+"/serial", func(b *testing.B) {
		req := []limiter.Request{{Rule: threeWindows}}
		out := make([]limiter.Result, 1)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			req[0].Key = keys[i%n]
			l.Decide(req, out)
		}
	})
	b.Run("keys="+strconv.Itoa(n)+"/parallel", func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			req := []limiter.Request{{Rule: threeWindows}}
			out := make([]limiter.Result, 1)
			for pb.Next() {
				i++
				req[0].Key = keys[i%n]
				l.Decide(req, out)
			}
		})
	})
}

// BenchmarkXTimeRate is the baseline: golang.org/x/time/rate limiters, three
// per key, on the same keys, looked up the same way.
func BenchmarkXTimeRate(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		keys := benchKeys(n)
		lims := make(map[string][3]*rate.Limiter, n)
		for _, k := range keys {
			lims[string(k)] = [3]*rate.Limiter{
				rate.NewLimiter(rate.Limit(1<<30), 1<<30),
				rate.NewLimiter(rate.Limit(1<<30), 1<<30),
				rate.NewLimiter(rate.Limit(1<<30), 1<<30),
			}
		}
		b.Run("keys="+strconv.Itoa(n)+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				allowAll(lims[string(keys[i%n])])
			}
		})
		b.Run("keys="+strconv.Itoa(n)+"/parallel", func(b *testing.B) {
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(7919))
				for pb.Next() {
					i++
					allowAll(lims[string(keys[i%n])])
				}
			})
		})
	}
}

func allowAll(ls [3]*rate.Limiter) bool {
	now := time.Now()
	ok := true
	for _, l := range ls {
		ok = l.AllowN(now, 1) && ok
	}
	return ok
}

// BenchmarkDecideCredit is the credit engine's hot path: keys shared
// through the in-process reference store, decided from local credit while
// the sync loop refills it in the background.
func BenchmarkDecideCredit(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		keys := benchKeys(n)
		l := limiter.New(limiter.WithStore(memstore.New(nil), "bench"))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		req := []limiter.Request{{Rule: threeWindows}}
		out := make([]limiter.Result, 1)
		for i := range 20 * n { // warm: every key synced and holding credit
			req[0].Key = keys[i%n]
			l.Decide(req, out)
		}
		benchLimiter(b, l, keys)
		st := l.Stats()
		b.Logf("keys=%d: %d round trips, decisions by mode %v", n, st.Rounds, st.Decisions)
		cancel()
		<-done
	}
}
