package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// progressSnap is a reading of the live counters.
type progressSnap struct {
	elapsed        time.Duration
	ok, over, errs uint64
}

func (s progressSnap) total() uint64 { return s.ok + s.over + s.errs }

// startProgress prints a progress line every interval until the returned
// stop function is called; stop waits for the printer to exit. Without
// -progress it does nothing.
func (l *loader) startProgress(ctx context.Context, out io.Writer, every time.Duration) (stop func()) {
	if !l.cfg.progress {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.printProgress(ctx, out, every)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (l *loader) printProgress(ctx context.Context, out io.Writer, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var prev progressSnap
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := l.snapshot(now)
			fmt.Fprintln(out, progressLine(cur, prev))
			prev = cur
		}
	}
}

func (l *loader) snapshot(now time.Time) progressSnap {
	s := progressSnap{elapsed: now.Sub(l.start)}
	for _, w := range l.workers {
		s.ok += w.ok.Load()
		s.over += w.over.Load()
		s.errs += w.errs.Load()
	}
	return s
}

// progressLine renders cur, with the request rate since prev.
func progressLine(cur, prev progressSnap) string {
	var rate float64
	if dt := cur.elapsed - prev.elapsed; dt > 0 {
		rate = float64(cur.total()-prev.total()) / dt.Seconds()
	}
	return fmt.Sprintf("rlsbench: %s  requests %d  %.0f req/s  ok %d  over_limit %d  errors %d",
		cur.elapsed.Round(time.Second), cur.total(), rate, cur.ok, cur.over, cur.errs)
}
