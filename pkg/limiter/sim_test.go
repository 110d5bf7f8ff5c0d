package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// sim runs replicas of the credit engine against one reference store on
// the virtual clock of a synctest bubble. Callers offer requests at a fixed
// pace; every admission is recorded at its virtual instant.
type sim struct {
	rule     *limiter.Rule
	replicas int
	callers  int           // per replica
	pace     func(replica int) time.Duration // gap between one caller's requests
	hits     uint64
	duration time.Duration
	store    limiter.Store // nil: a fresh reference store
	// during, if set, runs in the bubble while the callers run.
	during func(s *simRun)
}

type simRun struct {
	mu       sync.Mutex
	admitted map[int64]uint64 // second since start → units admitted
	offered  map[int64]uint64
	perRep   []uint64
	denied   int
	// deniedInterior counts denials after the first (cold) second.
	deniedInterior int
	start    time.Time
	lims     []*limiter.Limiter
	waits    int
}

func (s sim) run(t *testing.T) *simRun {
	r := &simRun{admitted: map[int64]uint64{}, offered: map[int64]uint64{}, perRep: make([]uint64, s.replicas)}
	synctest.Test(t, func(t *testing.T) {
		store := s.store
		if store == nil {
			store = memstore.New(nil)
		}
		// Start on a whole second so windows line up with the report.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		r.start = time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		var engines sync.WaitGroup
		for i := range s.replicas {
			l := limiter.New(limiter.WithStore(store, fmt.Sprint("replica-", i)))
			r.lims = append(r.lims, l)
			engines.Go(func() { l.Run(ctx) })
		}
		var callers sync.WaitGroup
		end := r.start.Add(s.duration)
		for i, l := range r.lims {
			for c := range s.callers {
				callers.Go(func() { r.caller(l, i, c, s, end) })
			}
		}
		if s.during != nil {
			s.during(r)
		}
		callers.Wait()
		cancel()
		engines.Wait()
	})
	return r
}

func (r *simRun) caller(l *limiter.Limiter, rep, c int, s sim, end time.Time) {
	key := []byte("k|" + s.rule.Fingerprint())
	req := []limiter.Request{{Key: key, Rule: s.rule, Hits: s.hits}}
	out := make([]limiter.Result, 1)
	pace := s.pace(rep)
	if pace >= s.duration {
		return // a silent replica
	}
	time.Sleep(pace * time.Duration(c) / time.Duration(s.callers)) // spread callers
	for time.Now().Before(end) {
		at := time.Now()
		ok, _ := l.Decide(req, out)
		sec := int64(at.Sub(r.start) / time.Second)
		n := max(s.hits, 1)
		r.mu.Lock()
		r.offered[sec] += n
		if ok {
			r.admitted[sec] += n
			r.perRep[rep] += n
		} else {
			r.denied++
			if sec > 0 {
				r.deniedInterior++
			}
		}
		if time.Since(at) > 0 {
			r.waits++
		}
		r.mu.Unlock()
		time.Sleep(pace)
	}
}

func perSecond(limit uint64) *limiter.Rule {
	return &limiter.Rule{Algorithm: limiter.FixedWindow, Windows: []limiter.Window{{Limit: limit, Period: time.Second}}}
}

func TestSimNeverOver(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow} {
		for _, n := range []int{1, 2, 4, 8} {
			for _, load := range []float64{0.5, 5, 50} {
				t.Run(fmt.Sprintf("%v/N=%d/load=%v", alg, n, load), func(t *testing.T) {
					rule := perSecond(50)
					rule.Algorithm = alg
					offered := load * 50 // per second, all replicas
					pace := time.Duration(float64(time.Second) * float64(n*4) / offered)
					r := sim{rule: rule, replicas: n, callers: 4, pace: func(int) time.Duration { return pace }, duration: 4 * time.Second}.run(t)
					for sec, got := range r.admitted {
						if got > 50 {
							t.Errorf("second %d admitted %d > 50 (offered %d)", sec, got, r.offered[sec])
						}
					}
				})
			}
		}
	}
}

func TestSimNoStarvation(t *testing.T) {
	pace := time.Second * 16 / 250 // 5× of 50/s over 4×4 callers
	r := sim{rule: perSecond(50), replicas: 4, callers: 4, pace: func(int) time.Duration { return pace }, duration: 8 * time.Second}.run(t)
	for sec := int64(1); sec < 7; sec++ {
		if got := r.admitted[sec]; got < 48 {
			t.Errorf("interior second %d admitted %d < 95%% of 50", sec, got)
		}
	}
}

func TestSimSkewedTraffic(t *testing.T) {
	fast := time.Second * 4 / 250
	r := sim{rule: perSecond(50), replicas: 4, callers: 4, duration: 8 * time.Second,
		pace: func(rep int) time.Duration {
			if rep == 0 {
				return fast
			}
			return time.Hour // the other replicas stay silent
		}}.run(t)
	for sec := int64(1); sec < 7; sec++ {
		if got := r.admitted[sec]; got < 45 {
			t.Errorf("second %d: the busy replica got %d < 90%% of 50", sec, got)
		}
	}
}

func TestSimLastMile(t *testing.T) {
	pace := 50 * time.Millisecond // 4 replicas × 2 callers × 20/s = 160/s for a limit of 3
	r := sim{rule: perSecond(3), replicas: 4, callers: 2, pace: func(int) time.Duration { return pace }, duration: 6 * time.Second}.run(t)
	for sec := int64(1); sec < 5; sec++ {
		if got := r.admitted[sec]; got != 3 {
			t.Errorf("second %d admitted %d, want exactly 3", sec, got)
		}
	}
	for _, l := range r.lims {
		t.Logf("%+v", l.Stats())
	}
}

// TestSimEarlySyncAvoidsWaiting: at 0.9× of the limit nothing is denied
// once the key is warm (the first second runs on cold rate estimates), and
// few requests wait for a sync round.
func TestSimEarlySyncAvoidsWaiting(t *testing.T) {
	pace := time.Second * 16 / 45 // 0.9× of 50/s
	r := sim{rule: perSecond(50), replicas: 4, callers: 4, pace: func(int) time.Duration { return pace }, duration: 8 * time.Second}.run(t)
	if r.deniedInterior > 0 {
		t.Errorf("%d denials after the first second at 0.9× load", r.deniedInterior)
	}
	var waited, total uint64
	for _, l := range r.lims {
		st := l.Stats()
		waited += st.Decisions["sync"] + st.Decisions["cold"] + st.Decisions["overrun"]
	}
	for _, n := range r.offered {
		total += n
	}
	t.Logf("%d of %d requests waited for a sync round (%.1f%%); %d denied in the cold first second",
		waited, total, 100*float64(waited)/float64(total), r.denied)
	if waited*10 > total {
		t.Errorf("%d of %d requests waited for a sync round", waited, total)
	}
}

func TestSimColdStart(t *testing.T) {
	r := sim{rule: perSecond(50), replicas: 4, callers: 16, pace: func(int) time.Duration { return time.Millisecond }, duration: time.Second}.run(t)
	if got := r.admitted[0]; got > 50 {
		t.Errorf("4 cold replicas admitted %d > 50 in the first second", got)
	}
}

func TestSimWeightedHits(t *testing.T) {
	pace := 20 * time.Millisecond
	r := sim{rule: perSecond(50), replicas: 2, callers: 2, hits: 7, pace: func(int) time.Duration { return pace }, duration: 4 * time.Second}.run(t)
	for sec, got := range r.admitted {
		if got > 50 || got%7 != 0 {
			t.Errorf("second %d admitted %d units of 7-unit requests", sec, got)
		}
	}
	for _, l := range r.lims {
		t.Logf("%+v", l.Stats())
	}
	big := sim{rule: perSecond(50), replicas: 1, callers: 1, hits: 51, pace: func(int) time.Duration { return 100 * time.Millisecond }, duration: time.Second}.run(t)
	if big.denied == 0 || len(big.admitted) > 0 && big.admitted[0] > 0 {
		t.Errorf("a request larger than the limit must be denied: %+v", big.admitted)
	}
}
