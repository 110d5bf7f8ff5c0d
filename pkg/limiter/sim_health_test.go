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
