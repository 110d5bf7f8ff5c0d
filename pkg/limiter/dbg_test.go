package limiter_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

func TestDbgBurst(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		for _, off := range []time.Duration{5 * time.Second, 40 * time.Second} {
			synctest.Test(t, func(t *testing.T) {
				rule := bucketRule(100, time.Minute)
				names := []string{"a", "b", "c", "d"}[:n]
				ls := runReplicas(t, memstore.New(nil), names...)
				key := []byte("burst|" + rule.Fingerprint())
				time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(4*time.Minute + off)))
				out := make([]limiter.Result, 1)
				ok := 0
				for range 100 {
					if a, _ := ls[0].Decide([]limiter.Request{{Key: key, Rule: rule}}, out); a {
						ok++
					}
				}
				t.Logf("%d replicas, burst %v into a minute: %d of 100 admitted", n, off, ok)
			})
		}
	}
}
