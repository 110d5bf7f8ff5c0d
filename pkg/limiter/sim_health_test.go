package limiter_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// logRecords keeps the records a slog.Logger writes.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// atLeast returns the records at level lvl or above, each as its message
// and attributes.
func (h *logRecords) atLeast(lvl slog.Level) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.recs {
		if r.Level < lvl {
			continue
		}
		m := map[string]slog.Value{"msg": slog.StringValue(r.Message), "level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
		out = append(out, m)
	}
	return out
}

// TestSimOutageLogged: the store goes away for 3 s under steady traffic.
// The replica logs one warning once it decides without the store and one
// line at info when the store is back, saying how long it was away, how
// many decisions were degraded until then and how many units they
// admitted. A failure soon after the return (a pooled connection the
// store had closed) is no new outage: nothing more is logged.
func TestSimOutageLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &switchStore{Store: memstore.New(nil)}
		logs := &logRecords{}
		l := limiter.New(limiter.WithStore(st, "r"), limiter.WithLogger(slog.New(logs)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()
		rule := perSecond(50)
		var admitted, degraded, degradedDown int
		out := make([]limiter.Result, 1)
		for i := range 800 { // 8 s at 100 a second
			switch i {
			case 200:
				st.down.Store(true)
			case 500, 580:
				st.down.Store(false)
			case 560:
				// A flap, once the heartbeat has found the store back.
				st.down.Store(true)
			}
			ok, _ := l.Decide([]limiter.Request{{Key: []byte("k"), Rule: rule}}, out)
			if ok {
				admitted++
			}
			if out[0].Mode == limiter.ModeDegraded {
				degraded++
				if i < 500 {
					degradedDown++
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		recs := logs.atLeast(slog.LevelInfo)
		if len(recs) != 2 || recs[0]["level"].String() != "WARN" || recs[1]["level"].String() != "INFO" {
			t.Fatalf("want one warning then one info line, got %v", recs)
		}
		back := recs[1]
		// From the last success before it to the first after: the 3 s
		// and at most a heartbeat interval on either side.
		if d := back["outage"].Duration(); d < 3*time.Second || d > 5*time.Second {
			t.Errorf("outage logged as %v, want 3 s and at most two heartbeat intervals more", d)
		}
		// Logged at recovery: the decisions while the store was down, and
		// the few before the replica saw it back; the keys go on deciding
		// so while they settle.
		if n := back["degraded_decisions"].Uint64(); n == 0 || int(n) < degradedDown || int(n) > degraded {
			t.Errorf("degraded decisions logged %d, counted %d while the store was down and %d in all", n, degradedDown, degraded)
		}
		if n := back["degraded_units_to_push"].Int64(); n <= 0 || n > int64(degraded) {
			t.Errorf("degraded units logged %d, with %d degraded decisions", n, degraded)
		}
		t.Logf("%d admitted, %d degraded; logged %v", admitted, degraded, recs)
	})
}

// TestSimStartWithoutStore: replicas that start while the store is down
// have never reached it, so they have no view, no share and no replica
// count. Past CacheTTL from their start they decide in degraded mode,
// each counting itself alone (N = 1), rather than deny every request
// until the store answers; once it does, the windows hold L + N again.
func TestSimStartWithoutStore(t *testing.T) {
	const L, N = 50, 2
	for _, c := range []struct {
		name string
		pace time.Duration // one caller's gap: 2 replicas × 2 callers
	}{{"under the limit", 100 * time.Millisecond}, {"5× the limit", time.Second * 4 / (5 * L)}} {
		t.Run(c.name, func(t *testing.T) {
			st := &switchStore{Store: memstore.New(nil)}
			st.down.Store(true)
			r := sim{rule: perSecond(L), replicas: N, callers: 2, store: st, duration: 9 * time.Second,
				pace: func(int) time.Duration { return c.pace },
				during: func(*simRun) {
					time.Sleep(4 * time.Second)
					st.down.Store(false)
				}}.run(t)
			t.Logf("offered per second %v, admitted %v", seconds(r.offered, 9), seconds(r.admitted, 9))
			for sec := int64(2); sec < 4; sec++ { // past CacheTTL (1 s), store still down
				want := min(r.offered[sec], L)
				if got := r.admitted[sec]; got < want {
					t.Errorf("second %d of the outage admitted %d of %d offered, want at least %d", sec, got, r.offered[sec], want)
				}
				if got := r.admitted[sec]; got > N*L {
					t.Errorf("second %d of the outage admitted %d > N·L: a replica alone enforces L", sec, got)
				}
			}
			for sec := int64(5); sec < 9; sec++ {
				if got := r.admitted[sec]; got > L+N {
					t.Errorf("second %d, after the store came back, admitted %d > L + N", sec, got)
				}
				if c.pace == 100*time.Millisecond && r.admitted[sec] != r.offered[sec] {
					t.Errorf("second %d, after the store came back, admitted %d of %d offered under the limit", sec, r.admitted[sec], r.offered[sec])
				}
			}
			for i, l := range r.lims {
				if l.Stats().Decisions["degraded"] == 0 {
					t.Errorf("replica %d never decided in degraded mode", i)
				}
			}
		})
	}
}

// TestSimSlotsWithoutStore: a replica started while the store is down
// holds, past CacheTTL from its start, all of a concurrency key's slots
// (N = 1), not none.
func TestSimSlotsWithoutStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &switchStore{Store: memstore.New(nil)}
		st.down.Store(true)
		l := limiter.New(limiter.WithStore(st, "alone"))
		ctx, cancel := context.WithCancel(context.Background())
		var engine sync.WaitGroup
		engine.Go(func() { l.Run(ctx) })
		time.Sleep(1500 * time.Millisecond) // past CacheTTL since the start
		if held := acquireAll(l, "new-key", 5); held != 5 {
			t.Errorf("held %d slots of 5 with the store down since the start, want 5", held)
		}
		cancel()
		engine.Wait()
	})
}
