package envoyapi

import (
	"math/big"
	"testing"
	"time"
)

func TestSecondsValues(t *testing.T) {
	tests := []struct {
		give             time.Duration
		reset, retryWait string
	}{
		{-time.Second, "0", "1"}, {0, "0", "1"}, {time.Nanosecond, "1", "1"}, {time.Second, "1", "1"},
		{time.Second + time.Nanosecond, "2", "2"}, {1500 * time.Millisecond, "2", "2"},
		{41724 * time.Millisecond, "42", "42"}, {120 * time.Second, "120", "120"}, {24 * time.Hour, "86400", "86400"},
	}
	for _, tt := range tests {
		if got := secondsValue(tt.give); got != tt.reset {
			t.Errorf("secondsValue(%v) = %q, want %q", tt.give, got, tt.reset)
		}
		if got := retryAfterValue(tt.give); got != tt.retryWait {
			t.Errorf("retryAfterValue(%v) = %q, want %q", tt.give, got, tt.retryWait)
		}
	}
}

// FuzzRetryAfterValue: the value is the ceiling of d in seconds, and at
// least 1, for every duration.
func FuzzRetryAfterValue(f *testing.F) {
	for _, d := range []int64{-1, 0, 1, 999999999, 1000000000, 1000000001, int64(24 * time.Hour), 1<<63 - 1} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		s := retryAfterValue(time.Duration(n))
		secs, ok := new(big.Int).SetString(s, 10)
		if !ok || secs.Sign() <= 0 {
			t.Fatalf("retryAfterValue(%d) = %q", n, s)
		}
		ns := new(big.Int).Mul(secs, big.NewInt(int64(time.Second)))
		over := new(big.Int).Sub(ns, big.NewInt(n))
		if over.Sign() < 0 || (n > int64(time.Second) && over.Cmp(big.NewInt(int64(time.Second))) >= 0) {
			t.Fatalf("retryAfterValue(%d) = %q: not the ceiling", n, s)
		}
	})
}
