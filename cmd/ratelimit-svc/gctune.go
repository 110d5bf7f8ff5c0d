package main

import (
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// gcTuner keeps the garbage collector off a small heap. After every
// collection it sets GOGC so that the next heap goal is at least floor,
// never below 100 (Go's default). A rate limiter's live heap is a few MB,
// so at GOGC 100 it collects every few hundred requests and spends more
// CPU marking than answering; with a floor of 64 MiB it collects a
// fraction as often, and once the live heap is half the floor or more it
// runs at GOGC 100 as before. The soft memory limit (--memory-limit)
// still bounds the heap: the runtime collects harder near it whatever
// GOGC says. It runs on the runtime's finalizer goroutine, once per
// collection, and stops with the returned function.
type gcTuner struct {
	floor   uint64
	mu      sync.Mutex // orders adjust and stop
	stopped bool
	percent atomic.Int64 // the GOGC last set
	samples [1]metrics.Sample
}

// gcPercentFor is the GOGC whose heap goal for a live heap of live bytes
// is floor: 100·floor/live − 100, at least 100.
func gcPercentFor(live, floor uint64) int {
	if live == 0 || live >= floor/2 {
		return 100
	}
	return int(floor/live*100) - 100
}

// startGCTuner starts tuning toward floor bytes and returns the tuner and
// the function that stops it and puts GOGC back. A zero floor, or GOGC
// set in the environment, leaves the collector as it is (a nil tuner).
func startGCTuner(floor uint64, getenv func(string) string, log *slog.Logger) (*gcTuner, func()) {
	if floor == 0 || getenv("GOGC") != "" {
		log.Info("GC heap floor: none", "gogc", getenv("GOGC"))
		return nil, func() {}
	}
	t := &gcTuner{floor: floor}
	t.samples[0].Name = "/gc/heap/live:bytes"
	prev := debug.SetGCPercent(100)
	t.percent.Store(100)
	t.arm()
	log.Info("GC heap floor", "bytes", floor)
	return t, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetGCPercent(prev)
	}
}

// gcSentinel is unreachable as soon as it is made: its finalizer runs
// after the next collection.
type gcSentinel struct{ t *gcTuner }

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t: t}, func(s *gcSentinel) {
		if s.t.adjust() {
			s.t.arm()
		}
	})
}

// adjust sets GOGC for the live heap the last collection left, when it
// moved by more than a tenth; false once the tuner is stopped.
func (t *gcTuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples[:])
	if t.samples[0].Value.Kind() != metrics.KindUint64 {
		return true
	}
	want := int64(gcPercentFor(t.samples[0].Value.Uint64(), t.floor))
	if old := t.percent.Load(); 10*abs(want-old) > old {
		t.percent.Store(want)
		debug.SetGCPercent(int(want))
	}
	return true
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// parseHeapFloor reads --gc-heap-floor: off, or a size such as 64MiB.
func parseHeapFloor(s string) (uint64, error) {
	if s == "off" || s == "0" {
		return 0, nil
	}
	m, err := parseMemoryLimit(s)
	if err != nil || m.Bytes == 0 {
		return 0, fmt.Errorf("%q: want off or a positive size such as 64MiB (units B, KiB, MiB, GiB)", s)
	}
	return uint64(m.Bytes), nil
}
