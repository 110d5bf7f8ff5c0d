package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// Inputs where the reference maths misbehave and the Redis store does not
// follow them. The reference's part skips, saying why, while it keeps the
// fault.

// A NaN share (LocalAllowance passes Rule.Validate as NaN < 0 is false)
// escapes splitShare's clamp: ⌊NaN·free⌋ converts to an undefined uint64,
// and the grant can pass the free budget. The Redis store treats NaN as 1.
func TestReferenceNaNShare(t *testing.T) {
	it := limiter.SyncItem{
		Key: "k", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}},
		Want: 1000, Share: math.NaN(), Replicas: 1, Lease: time.Minute,
	}
	var rec limiter.KeyRecord
	ref := rec.Sync("a", &it, time.Now().UnixMicro())
	if ref.Credit > 10 {
		t.Skipf("reference bug: share NaN grants %d units of a limit of 10 (splitShare does not clamp NaN)", ref.Credit)
	}
	st := redisstore.New(redistest.Start(t).Client(t), "nan")
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(context.Background(), "a", []limiter.SyncItem{it}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Credit != ref.Credit {
		t.Errorf("share NaN: redis grants %d, reference %d", out[0].Credit, ref.Credit)
	}
}

// A token bucket charge or refund of n units computes n·interval in int64
// without saturating: past 2^63 µs it wraps, and a huge debt (AlwaysCharge
// of a huge hits_addend) can wrap the arrival time back into the past,
// refilling the bucket. The Redis store saturates arrival times at 2^53 - 1
// µs (the year 2255): the bucket stays in debt.
func TestBucketDebtSaturates(t *testing.T) {
	w := limiter.Window{Limit: 1, Period: 24 * time.Hour}
	item := func(now int64) limiter.SyncItem {
		return limiter.SyncItem{
			Key: "k", Algorithm: limiter.TokenBucket, Windows: []limiter.Window{w},
			Hits: []limiter.Hit{{At: now, N: 1 << 40}}, Want: 1, Replicas: 1, Lease: time.Minute,
		}
	}
	t.Run("redis", func(t *testing.T) {
		st := redisstore.New(redistest.Start(t).Client(t), "debt")
		out := make([]limiter.SyncResult, 1)
		if err := st.Sync(context.Background(), "a", []limiter.SyncItem{item(time.Now().UnixMicro())}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Windows[0].TAT != 1<<53-1 || out[0].Credit != 0 {
			t.Errorf("after a debt of 2^40 days: TAT %d, credit %d; want %d, 0", out[0].Windows[0].TAT, out[0].Credit, int64(1<<53-1))
		}
	})
	t.Run("reference", func(t *testing.T) {
		now := time.Now().UnixMicro()
		it := item(now)
		var rec limiter.KeyRecord
		ref := rec.Sync("a", &it, now)
		if ref.Windows[0].TAT < now {
			t.Skipf("reference bug: a charge of 2^40 units on a 1/day bucket wraps the arrival time to %d, before now %d (credit %d)",
				ref.Windows[0].TAT, now, ref.Credit)
		}
	})
}
