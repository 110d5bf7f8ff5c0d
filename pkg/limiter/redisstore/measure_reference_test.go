package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

// TestRealtimeMeasureReferencePattern is the baseline for
// TestRealtimeMeasureRedisLoad: the same steady load decided the way
// envoyproxy/ratelimit does, one pipeline of INCRBY and EXPIRE per request
// per descriptor, against a redis-server of its own. It reports Redis CPU
// per 100k decisions, measured the same way.
func TestRealtimeMeasureReferencePattern(t *testing.T) {
	seconds := rtMeasureSeconds(t)
	for _, sc := range []struct {
		name string
		keys int
		rate float64 // decisions per second, all keys
	}{
		{"16 keys, 4000/s", 16, 4000},
		{"1000 keys, 5000/s", 1000, 5000},
	} {
		t.Run(sc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := rtClient(t, srv.Addr)
			idle0, idleAt := rtRedisInfo(t, c), time.Now()
			time.Sleep(2 * time.Second) // measuring an idle interval
			idleRate := (rtRedisInfo(t, c).cpu - idle0.cpu) / time.Since(idleAt).Seconds()

			before, began := rtRedisInfo(t, c), time.Now()
			end := began.Add(time.Duration(seconds) * time.Second)
			var decided atomic.Uint64
			var wg sync.WaitGroup
			gap := time.Duration(float64(time.Second) * rtCallers / sc.rate) // per caller
			for w := range rtCallers {
				wg.Go(func() {
					ctx := context.Background()
					next := began.Add(gap * time.Duration(w) / rtCallers)
					for i := w; next.Before(end); i += rtCallers {
						time.Sleep(time.Until(next))
						next = next.Add(gap)
						key := fmt.Sprintf("bench_user_%d_%d", i%sc.keys, time.Now().Unix())
						p := c.Pipeline()
						p.IncrBy(ctx, key, 1)
						p.Expire(ctx, key, time.Second)
						if _, err := p.Exec(ctx); err != nil {
							t.Error(err)
							return
						}
						decided.Add(1)
					}
				})
			}
			wg.Wait()
			took := time.Since(began)
			cpu := rtRedisInfo(t, c).cpu - before.cpu
			net := cpu - idleRate*took.Seconds()
			n := float64(decided.Load())
			t.Logf("%s: %d decisions in %v; Redis CPU %.3fs, %.1f ms per 100k decisions; net of the idle baseline %.1f ms per 100k decisions",
				sc.name, decided.Load(), took.Round(time.Millisecond), cpu, cpu*1e8/n, net*1e8/n)
		})
	}
}
