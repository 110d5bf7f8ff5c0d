package main

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{0, 64 << 20, 100},
		{1 << 20, 64 << 20, 6300},
		{4 << 20, 64 << 20, 1500},
		{32 << 20, 64 << 20, 100}, // half the floor: Go's default
		{1 << 30, 64 << 20, 100},
	} {
		if got := gcPercentFor(c.live, c.floor); got != c.want {
			t.Errorf("gcPercentFor(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

// TestGCTunerFollowsTheLiveHeap: on this test's small live heap the tuner
// raises GOGC after a collection; stopped, it puts GOGC back; with GOGC in
// the environment it does nothing.
func TestGCTunerFollowsTheLiveHeap(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if tu, stop := startGCTuner(64<<20, func(k string) string { return map[string]string{"GOGC": "200"}[k] }, log); tu != nil {
		stop()
		t.Fatal("a tuner started though GOGC is set")
	}
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	tu, stop := startGCTuner(1<<30, func(string) string { return "" }, log)
	deadline := time.Now().Add(10 * time.Second)
	for tu.percent.Load() <= 100 {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("GOGC never raised after collections")
		}
		runtime.GC() // the finalizer runs after it, on the runtime's goroutine
		time.Sleep(time.Millisecond)
	}
	got := debug.SetGCPercent(-1)
	debug.SetGCPercent(got)
	if int64(got) != tu.percent.Load() {
		t.Errorf("GOGC is %d, the tuner says it set %d", got, tu.percent.Load())
	}
	stop()
	if now := debug.SetGCPercent(before); now != before {
		t.Errorf("after stop GOGC is %d, want %d back", now, before)
	}
}
