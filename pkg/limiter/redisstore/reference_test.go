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

// Inputs at the edges of the maths, where both stores must agree on a safe
// answer. The reference's part fails, saying why, should it regress.

// A NaN share must clamp to 1 (⌊NaN·free⌋ would convert to an undefined
// uint64 and a grant past the free budget).
func TestReferenceNaNShare(t *testing.T) {
	it := limiter.SyncItem{
		Key: "k", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}},
		Want: 1000, Share: math.NaN(), Replicas: 1, Lease: time.Minute,
	}
	var rec limiter.KeyRecord
	ref := rec.Sync("a", &it, time.Now().UnixMicro())
	if ref.Credit > 10 {
		t.Fatalf("reference bug: share NaN grants %d units of a limit of 10 (splitShare does not clamp NaN)", ref.Credit)
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

// A token bucket charge of n units must saturate n·interval: a huge debt
// (AlwaysCharge of a huge hits_addend) wrapping the arrival time into the
// past would refill the bucket. Both stores saturate arrival times at
// limiter.MaxExact µs (the year 2255): the bucket stays in debt.
func TestBucketDebtSaturates(t *testing.T) {
	w := limiter.Window{Limit: 1, Period: 24 * time.Hour}
	item := func(now int64) limiter.SyncItem {
		return limiter.SyncItem{
			Key: "k", Algorithm: limiter.TokenBucket, Windows: []limiter.Window{w},
			Hits: []limiter.Hit{{At: now, N: 1 << 40}}, Want: 1, Replicas: 1, Lease: time.Minute,
		}
	}
	check := func(t *testing.T, r limiter.SyncResult) {
		t.Helper()
		if r.Windows[0].TAT != limiter.MaxExact || r.Credit != 0 {
			t.Errorf("after a debt of 2^40 days: TAT %d, credit %d; want %d, 0", r.Windows[0].TAT, r.Credit, int64(limiter.MaxExact))
		}
	}
	t.Run("redis", func(t *testing.T) {
		st := redisstore.New(redistest.Start(t).Client(t), "debt")
		out := make([]limiter.SyncResult, 1)
		if err := st.Sync(context.Background(), "a", []limiter.SyncItem{item(time.Now().UnixMicro())}, out); err != nil {
			t.Fatal(err)
		}
		check(t, out[0])
	})
	t.Run("reference", func(t *testing.T) {
		now := time.Now().UnixMicro()
		it := item(now)
		var rec limiter.KeyRecord
		check(t, rec.Sync("a", &it, now))
	})
}
