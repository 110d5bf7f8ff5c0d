package limiter

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestEpochRule: a token bucket whose burst differs from its rate runs as
// Burst units every Burst·T, T its refill interval in the store's µs; any
// other rule, or an epoch outside [minBucketEpoch, maxBucketEpoch], runs
// as it is.
func TestEpochRule(t *testing.T) {
	bucket := func(limit uint64, period time.Duration, burst uint64) *Rule {
		return &Rule{Algorithm: TokenBucket, Windows: []Window{{Limit: limit, Period: period, Burst: burst}}}
	}
	for _, tc := range []struct {
		name string
		rule *Rule
		want Window // zero: the rule itself
	}{
		{"burst below the rate", bucket(100, time.Minute, 20), Window{Limit: 20, Period: 12 * time.Second}},
		{"burst above the rate", bucket(10, time.Second, 20), Window{Limit: 20, Period: 2 * time.Second}},
		{"refill rounded up to µs", bucket(3, time.Second, 6), Window{Limit: 6, Period: 6 * 333334 * time.Microsecond}},
		{"burst equal to the rate", bucket(10, time.Second, 10), Window{}},
		{"no burst", bucket(10, time.Second, 0), Window{}},
		{"epoch under a second", bucket(100, time.Second, 50), Window{}},
		{"epoch over a day", bucket(1, time.Hour, 25), Window{}},
		{"epoch of a day", bucket(1, time.Hour, 24), Window{Limit: 24, Period: 24 * time.Hour}},
		{"fixed window", &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 10, Period: time.Second, Burst: 20}}}, Window{}},
		{"two windows", &Rule{Algorithm: TokenBucket, Windows: []Window{{Limit: 10, Period: time.Second, Burst: 20}, {Limit: 100, Period: time.Minute}}}, Window{}},
	} {
		got := epochRule(tc.rule)
		switch {
		case tc.want == (Window{}) && got != tc.rule:
			t.Errorf("%s: runs as %+v, want the rule itself", tc.name, got.Windows)
		case tc.want != (Window{}) && (got == tc.rule || len(got.Windows) != 1 || got.Windows[0] != tc.want):
			t.Errorf("%s: runs as %+v, want %+v", tc.name, got.Windows, tc.want)
		case tc.want != (Window{}) && (!shareable(got) || tc.rule.Windows[0].Burst == 0 || got.Fingerprint() == tc.rule.Fingerprint()):
			t.Errorf("%s: %+v holds no static shares", tc.name, got.Windows)
		}
	}
}

// TestEpochRuleSameBucket: in the store's arithmetic, a token bucket and
// the one it runs as answer every request alike: random buckets, random
// requests, charges, refunds and instants.
func TestEpochRuleSameBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	periods := []time.Duration{time.Second, 7 * time.Second, time.Minute, time.Hour}
	tried := 0
	for tried < 300 {
		w := Window{Limit: 1 + rng.Uint64N(1000), Period: periods[rng.IntN(len(periods))], Burst: 1 + rng.Uint64N(1000)}
		r := &Rule{Algorithm: TokenBucket, Windows: []Window{w}}
		e := epochRule(r)
		if e == r {
			continue
		}
		tried++
		a, b := storeWindows(r.Windows)[0], storeWindows(e.Windows)[0]
		var sa, sb WindowState
		now := int64(1_700_000_000_000_000) + rng.Int64N(int64(time.Hour/time.Microsecond))
		for range 200 {
			now += rng.Int64N(2 * interval(a) * int64(1+rng.IntN(int(w.Burst))))
			n := 1 + rng.Uint64N(w.Burst)
			if wa, wb := sa.Wait(a, TokenBucket, now, n), sb.Wait(b, TokenBucket, now, n); wa != wb {
				t.Fatalf("%+v as %+v: Wait(%d) %d and %d", w, e.Windows[0], n, wa, wb)
			}
			if ra, rb := sa.Remaining(a, TokenBucket, now), sb.Remaining(b, TokenBucket, now); ra != rb {
				t.Fatalf("%+v as %+v: Remaining %d and %d", w, e.Windows[0], ra, rb)
			}
			if ua, ub := sa.UntilReset(a, TokenBucket, now), sb.UntilReset(b, TokenBucket, now); ua != ub {
				t.Fatalf("%+v as %+v: UntilReset %v and %v", w, e.Windows[0], ua, ub)
			}
			switch rng.IntN(4) {
			case 0:
				sa.Refund(a, TokenBucket, now, n)
				sb.Refund(b, TokenBucket, now, n)
			default:
				if sa.Wait(a, TokenBucket, now, n) == 0 {
					sa.Charge(a, TokenBucket, now, n)
					sb.Charge(b, TokenBucket, now, n)
				}
			}
			if sa.TAT != sb.TAT {
				t.Fatalf("%+v as %+v: TAT %d and %d", w, e.Windows[0], sa.TAT, sb.TAT)
			}
		}
	}
}
