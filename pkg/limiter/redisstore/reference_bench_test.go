package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

// refCallers is how many callers send BenchmarkReferencePattern's load.
const refCallers = 4

// BenchmarkReferencePattern is the baseline of the credit engine's Redis
// load (BenchmarkRealtimeRedisLoad): a steady load decided the way
// envoyproxy/ratelimit does, one pipeline of INCRBY and EXPIRE per
// request per descriptor, against a redis-server of its own. Its b.N
// decisions are sent open loop at the case's rate, so -benchtime sets
// the run's length (-benchtime 40000x: 10 s at 4 000/s). It reports
// redis-cpu-ms/100k, Redis CPU (used_cpu_user+sys, gross) per 100 000
// decisions.
func BenchmarkReferencePattern(b *testing.B) {
	for _, sc := range []struct {
		name string
		keys int
		rate float64 // decisions per second, all keys
	}{
		{"16 keys, 4000/s", 16, 4000},
		{"1000 keys, 5000/s", 1000, 5000},
	} {
		b.Run(sc.name, func(b *testing.B) {
			c := redistest.Start(b).Client(b)
			ctx := context.Background()
			before := costCPU(b, c)
			b.ResetTimer()
			began := time.Now()
			gap := time.Duration(float64(time.Second) * refCallers / sc.rate) // per caller
			var wg sync.WaitGroup
			for w := range refCallers {
				wg.Go(func() {
					next := began.Add(gap * time.Duration(w) / refCallers)
					for i := w; i < b.N; i += refCallers {
						time.Sleep(time.Until(next))
						next = next.Add(gap)
						key := fmt.Sprintf("bench_user_%d_%d", i%sc.keys, time.Now().Unix())
						p := c.Pipeline()
						p.IncrBy(ctx, key, 1)
						p.Expire(ctx, key, time.Second)
						if _, err := p.Exec(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric((costCPU(b, c)-before)*1e8/float64(b.N), "redis-cpu-ms/100k")
		})
	}
}
