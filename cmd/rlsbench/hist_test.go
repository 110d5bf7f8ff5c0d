package main

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	var next uint64
	for i := range numBuckets {
		low, width := bucketRange(i)
		if low != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, low, next)
		}
		if got := bucketOf(low); got != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", low, got, i)
		}
		if got := bucketOf(low + width - 1); got != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", low+width-1, got, i)
		}
		if i >= subCount && float64(width)/float64(low) > 1.0/subCount {
			t.Fatalf("bucket %d: width %d is over 1/%d of %d", i, width, subCount, low)
		}
		next = low + width
	}
	if got := bucketOf(math.MaxInt64); got != numBuckets-1 {
		t.Errorf("bucketOf(MaxInt64) = %d, want the last bucket %d", got, numBuckets-1)
	}
}

func TestQuantileExactForSmallValues(t *testing.T) {
	var h histogram
	for v := 1; v <= 10; v++ {
		h.record(time.Duration(v))
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.1, 1}, {0.5, 5}, {0.9, 9}, {0.95, 10}, {1, 10},
	}
	for _, tt := range tests {
		if got := h.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if h.mean() != 5 { // 5.5 truncated
		t.Errorf("mean = %d, want 5", h.mean())
	}
}

func TestQuantileUniform(t *testing.T) {
	var h histogram
	for v := 1; v <= 100_000; v++ {
		h.record(time.Duration(v) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 100_000 * float64(time.Microsecond)
		got := float64(h.quantile(q))
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", q, time.Duration(got), time.Duration(want))
		}
	}
	if h.quantile(1) != 100*time.Millisecond {
		t.Errorf("quantile(1) = %v, want the exact max 100ms", h.quantile(1))
	}
}

func TestQuantileClampedToObservedRange(t *testing.T) {
	var h histogram
	h.record(1234567 * time.Nanosecond)
	for _, q := range []float64{0.01, 0.5, 1} {
		if got := h.quantile(q); got != 1234567 {
			t.Errorf("one sample: quantile(%v) = %d, want 1234567", q, got)
		}
	}
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 || h.mean() != 0 {
		t.Errorf("empty histogram: p50 %v mean %v, want 0", h.quantile(0.5), h.mean())
	}
	h.record(-time.Second)
	if h.total != 1 || h.quantile(1) != 0 {
		t.Errorf("negative sample: total %d max %v, want 1 and 0", h.total, h.quantile(1))
	}
}

func TestMergeEqualsRecordingAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all, a, b histogram
	for i := range 10_000 {
		d := time.Duration(rng.ExpFloat64() * float64(time.Millisecond))
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	var merged histogram
	merged.merge(&a)
	merged.merge(&b)
	merged.merge(&histogram{})
	if merged.total != all.total || merged.min != all.min || merged.max != all.max || merged.counts != all.counts {
		t.Fatal("merged histogram differs from one that recorded every sample")
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		if merged.quantile(q) != all.quantile(q) {
			t.Errorf("quantile(%v): merged %v, all %v", q, merged.quantile(q), all.quantile(q))
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	var h histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.record(time.Duration(i%5000) * time.Microsecond)
	}
}

func TestQuantileRankHasNoFloatDrift(t *testing.T) {
	var h histogram
	for v := 1; v <= 100; v++ {
		h.record(time.Duration(v))
	}
	if got := h.quantile(0.07); got != 7 {
		t.Errorf("quantile(0.07) of 1..100 = %d, want 7", got)
	}
}
