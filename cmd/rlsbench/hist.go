package main

import (
	"math"
	"math/bits"
	"time"
)

// Log-bucket latency histogram.
//
// Values (nanoseconds) below subCount are kept exactly. Above that, every
// power of two is split into subCount equal buckets, so a bucket's width is
// at most 1/subCount of its lower bound: about 1.6 % with subBits = 6.
// Percentiles report the bucket midpoint, clamped to the exact min and max,
// which bounds the error at about 0.8 %.
const (
	subBits  = 6
	subCount = 1 << subBits
	// numBuckets covers every non-negative int64.
	numBuckets = (63-subBits)*subCount + subCount
)

// histogram counts durations. The zero value is empty and ready to use.
// It is not safe for concurrent use: each load worker owns one and the
// report merges them after the workers have stopped.
type histogram struct {
	counts [numBuckets]uint64
	total  uint64
	sum    float64 // nanoseconds
	min    int64
	max    int64
}

// bucketOf returns the bucket index of v (v >= 0).
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// bucketRange returns the smallest value of bucket i and the bucket width.
func bucketRange(i int) (low, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	shift := uint(i/subCount - 1)
	mant := uint64(i%subCount + subCount)
	return mant << shift, 1 << shift
}

// record adds one duration. Negative durations count as zero. It does
// not allocate.
func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))]++
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// merge adds every count of o into h.
func (h *histogram) merge(o *histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
}

// quantile returns the q-quantile (0 < q <= 1), or 0 when h is empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	// The epsilon keeps float error from pushing an exact rank up by one
	// (0.07*100 is 7.000000000000001).
	rank := uint64(math.Ceil(q*float64(h.total) - 1e-9))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		low, width := bucketRange(i)
		mid := int64(low + width/2)
		if width == 1 {
			mid = int64(low)
		}
		return time.Duration(min(max(mid, h.min), h.max))
	}
	return time.Duration(h.max)
}

// mean returns the arithmetic mean, or 0 when h is empty.
func (h *histogram) mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}
