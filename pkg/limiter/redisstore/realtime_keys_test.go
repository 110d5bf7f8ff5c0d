package redisstore_test

// Real-time versions of the many-keys scenarios of the design ("Many
// keys, each far below its limit"), which TestSimManyKeysFarBelowLimit,
// TestSimSkewedManyKeys, TestSimScaleOut and TestSimRestart run on a
// virtual clock: here the replicas share a real redis-server and the
// callers pace their requests on the wall clock. A replica holds a static
// share only of the windows that begin a lease after it joined, so the
// per-minute scenarios start their replicas before they pause for
// t.Parallel: by the time they resume, the replicas usually hold shares
// of the current minute, and the wait for one is paid once, not by each.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// rtLease is the engine's replica lease: a replica holds a static share
// of the windows that begin at least a lease after it joined.
const rtLease = 3 * time.Second

// rtShareWindow is when a run that needs need of a window of period p
// may begin on g's replicas: now, if they hold static shares of the
// current window (it began at least a lease after they were all ready)
// and need of it is left; else the start of the first window they hold
// shares of.
func rtShareWindow(t *testing.T, g *rtGroup, p, need time.Duration) time.Time {
	t.Helper()
	from := g.ready.Add(rtLease + 500*time.Millisecond)
	now := time.Now().Add(100 * time.Millisecond) // time to start the callers
	start := now.Truncate(p)
	if start.Before(from) || start.Add(p).Sub(now) < need {
		for start = start.Add(p); start.Before(from); start = start.Add(p) {
		}
	} else {
		start = now
	}
	t.Logf("the run begins %v into a window, in %v", start.Sub(start.Truncate(p)).Round(time.Millisecond), time.Until(start).Round(time.Millisecond))
	return start
}

func rtPerMinute(limit uint64) *limiter.Rule {
	return &limiter.Rule{Windows: []limiter.Window{{Limit: limit, Period: time.Minute}}}
}

func rtPerSecond(limit uint64) *limiter.Rule {
	return &limiter.Rule{Windows: []limiter.Window{{Limit: limit, Period: time.Second}}}
}

func rtKeys(rule *limiter.Rule, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = rtKey(rule, fmt.Sprint("user-", i))
	}
	return keys
}

// rtReplica is one replica of an rtGroup. Its store is wrapped in a
// FaultyStore so that it can be killed.
type rtReplica struct {
	name   string
	lim    *limiter.Limiter
	faulty *limitertest.FaultyStore
	client *redis.Client
	cancel context.CancelFunc
	done   chan struct{}
	// admitted counts the calls it admitted (rtGroup.run).
	admitted atomic.Int64
}

// rtGroup is a set of replicas of one service on one redis-server that
// can grow and lose replicas while traffic runs. Each replica has its own
// client and Run loop; the group stops them all when the test ends.
type rtGroup struct {
	t       *testing.T
	addr    string
	service string
	mu      sync.Mutex
	all     []*rtReplica
	live    atomic.Pointer[[]*rtReplica] // those that get traffic
	ready   time.Time                    // when the first replicas all counted each other
}

// rtGroupStart starts n replicas and waits until each counts all n.
func rtGroupStart(t *testing.T, addr, service string, n int) *rtGroup {
	t.Helper()
	g := &rtGroup{t: t, addr: addr, service: service}
	g.live.Store(&[]*rtReplica{})
	t.Cleanup(g.stop)
	for range n {
		g.add()
	}
	g.waitCount(n)
	g.ready = time.Now()
	return g
}

// add starts one more replica and sends it traffic from now on.
func (g *rtGroup) add() *rtReplica {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := fmt.Sprint("replica-", len(g.all))
	client := redis.NewClient(&redis.Options{Addr: g.addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	faulty := limitertest.NewFaultyStore(redisstore.New(client, g.service))
	ctx, cancel := context.WithCancel(context.Background())
	r := &rtReplica{name: name, lim: limiter.New(limiter.WithStore(faulty, name)),
		faulty: faulty, client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := r.lim.Run(ctx); err != nil {
			g.t.Errorf("%s: Run: %v", name, err)
		}
	}()
	g.all = append(g.all, r)
	live := append(slices.Clone(*g.live.Load()), r)
	g.live.Store(&live)
	return r
}

// kill stops r as a killed process: cut off from Redis first, so its
// shutdown pushes, releases and leaves nothing, and sent no more traffic.
func (g *rtGroup) kill(r *rtReplica) {
	r.faulty.Partition(r.name, true)
	g.mu.Lock()
	live := slices.DeleteFunc(slices.Clone(*g.live.Load()), func(x *rtReplica) bool { return x == r })
	g.live.Store(&live)
	g.mu.Unlock()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		g.t.Errorf("%s did not stop within 15s of its kill", r.name)
	}
}

// waitCount waits until every live replica counts n replicas.
func (g *rtGroup) waitCount(n int) {
	g.t.Helper()
	rtPoll(g.t, 10*time.Second, fmt.Sprintf("every replica counts %d replicas", n), func() bool {
		for _, r := range *g.live.Load() {
			if r.lim.Stats().Replicas != n {
				return false
			}
		}
		return true
	})
}

// stop ends every replica's Run (live ones push their hits) and closes
// the clients.
func (g *rtGroup) stop() {
	g.mu.Lock()
	all := slices.Clone(g.all)
	g.mu.Unlock()
	for _, r := range all {
		r.cancel()
	}
	for _, r := range all {
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			g.t.Errorf("%s did not stop within 15s", r.name)
		}
		r.client.Close()
	}
}

func (g *rtGroup) rounds() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n uint64
	for _, r := range g.all {
		n += r.lim.Stats().Rounds
	}
	return n
}

func (g *rtGroup) logStats(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.all {
		s := r.lim.Stats()
		t.Logf("%s: admitted %d, rounds %d, sync failures %d, replicas %d, degraded %v, decisions %v",
			r.name, r.admitted.Load(), s.Rounds, s.SyncFailures, s.Replicas, s.Degraded, s.Decisions)
	}
}

// rtTraffic is the load of a run: callers callers together send rate
// requests a second, each for a key drawn uniformly or from a Zipf law
// (zipf > 1) and to the live replicas in turn.
type rtTraffic struct {
	rule    *limiter.Rule
	keys    [][]byte
	zipf    float64
	rate    float64
	callers int
}

// run sends tr from start until end and returns the calls. A caller that
// falls more than a pace behind skips ahead rather than bursting.
func (g *rtGroup) run(tr rtTraffic, start, end time.Time) []rtCall {
	var mu sync.Mutex
	var all []rtCall
	var wg sync.WaitGroup
	pace := time.Duration(float64(time.Second) * float64(tr.callers) / tr.rate)
	for c := range tr.callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(start.Unix()), uint64(c)))
			pick := func() int { return rng.IntN(len(tr.keys)) }
			if tr.zipf > 1 {
				z := rand.NewZipf(rng, tr.zipf, 1, uint64(len(tr.keys)-1))
				pick = func() int { return int(z.Uint64()) }
			}
			req := []limiter.Request{{Rule: tr.rule}}
			out := make([]limiter.Result, 1)
			var mine []rtCall
			next := start.Add(pace * time.Duration(c) / time.Duration(tr.callers))
			for turn := c; next.Before(end); turn++ {
				time.Sleep(time.Until(next)) // pacing in real time
				live := *g.live.Load()
				key := pick()
				req[0].Key = tr.keys[key]
				t0 := time.Now()
				r := live[turn%len(live)]
				ok, err := r.lim.Decide(req, out)
				t1 := time.Now()
				if ok {
					r.admitted.Add(1)
				}
				mine = append(mine, rtCall{start: t0.UnixNano(), end: t1.UnixNano(), key: key,
					ok: ok, err: err != nil, mode: out[0].Mode})
				next = next.Add(pace)
				if t1.Sub(next) > pace {
					next = t1
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// rtWindow names one window of one key: the key's index and the window's
// index since the Unix epoch.
type rtWindow struct {
	key int
	w   int64
}

// rtOverPeriod is rtOverLimit for any period and every key at once: for
// windows from to to (indexes since the epoch) it looks, for each key,
// for a run of windows [a, b] whose admitted calls that began and
// returned inside it number more than limit × (b − a + 1). It returns the
// keys with such a run and the worst runs of the first few.
func rtOverPeriod(calls []rtCall, limit int, p time.Duration, from, to int64) (keys int, worst []string) {
	type span struct{ a, b int64 }
	byKey := map[int][]span{}
	for _, c := range calls {
		s := span{c.start / int64(p), c.end / int64(p)}
		if c.ok && s.a >= from && s.a < to {
			byKey[c.key] = append(byKey[c.key], s)
		}
	}
	for key, spans := range byKey {
		if len(spans) <= limit {
			continue
		}
		excess, where := 0, ""
		for a := from; a < to; a++ {
			for b := a; b <= to; b++ {
				n := 0
				for _, s := range spans {
					if s.a >= a && s.b <= b {
						n++
					}
				}
				if over := n - limit*int(b-a+1); over > excess {
					excess, where = over, fmt.Sprintf("key %d: windows %d..%d admitted %d > %d", key, a-from, b-from, n, limit*int(b-a+1))
				}
			}
		}
		if excess > 0 {
			if keys++; keys <= 5 {
				worst = append(worst, where)
			}
		}
	}
	return keys, worst
}

// rtAssertWithin fails t for a key whose windows admitted more than limit.
func rtAssertWithin(t *testing.T, calls []rtCall, limit int, p time.Duration, from, to int64) {
	t.Helper()
	if n, worst := rtOverPeriod(calls, limit, p, from, to); n > 0 {
		t.Errorf("%d keys over their limit of %d per %v: %s", n, limit, p, strings.Join(worst, "; "))
	}
}

// rtAdmitted counts the admitted calls of each window (by the window they
// began in) of one key.
func rtAdmitted(calls []rtCall, key int, p time.Duration, from, to int64) []int {
	out := make([]int, to-from)
	for _, c := range calls {
		if w := c.start/int64(p) - from; c.key == key && c.ok && w >= 0 && w < to-from {
			out[w]++
		}
	}
	return out
}

// rtDenials counts, by the window of one period a call began in (sent)
// and the one it returned in (decided), the key windows that saw a denial
// though no more than limit calls began, or returned, in them; and, of
// those by sent, how many were sent no more than half the limit. Calls
// that began before from (a window index) are left out.
type rtDenials struct {
	sent, decided, half int
	byOffered           map[int]int // key windows denied under the limit, by calls sent in them
	under               int         // key windows sent no more than the limit
	deniedUnder         int         // requests denied in those
}

func rtDeniedUnder(calls []rtCall, limit int, p time.Duration, from int64) rtDenials {
	type tally struct{ calls, denied int }
	sent, decided := map[rtWindow]*tally{}, map[rtWindow]*tally{}
	add := func(m map[rtWindow]*tally, w rtWindow, ok bool) {
		if m[w] == nil {
			m[w] = &tally{}
		}
		m[w].calls++
		if !ok {
			m[w].denied++
		}
	}
	for _, c := range calls {
		if c.start/int64(p) < from {
			continue
		}
		add(sent, rtWindow{c.key, c.start / int64(p)}, c.ok)
		add(decided, rtWindow{c.key, c.end / int64(p)}, c.ok)
	}
	d := rtDenials{byOffered: map[int]int{}}
	for _, n := range sent {
		if n.calls <= limit {
			d.under++
			d.deniedUnder += n.denied
		}
		if n.denied > 0 && n.calls <= limit {
			d.sent++
			d.byOffered[n.calls]++
			if n.calls <= limit/2 {
				d.half++
			}
		}
	}
	for _, n := range decided {
		if n.denied > 0 && n.calls <= limit {
			d.decided++
		}
	}
	return d
}

// rtRedisLoad describes what Redis did between two INFO readings.
func rtRedisLoad(before, after rtInfo, decisions int) string {
	var sent uint64
	for name, n := range after.calls {
		if rtSentByClients(name) {
			sent += n - before.calls[name]
		}
	}
	return fmt.Sprintf("%d commands sent to Redis, %.1f ms of Redis CPU (%.1f ms per 100k decisions, idle work included)",
		sent, (after.cpu-before.cpu)*1e3, (after.cpu-before.cpu)*1e3*1e5/float64(max(decisions, 1)))
}

// TestRealtimeManyKeysFarBelowLimit is the design's first many-keys row:
// 20 000 keys under a 100/minute rule, 3 000 requests a second over them
// uniformly (0.15 a key a second), on 2 and on 4 replicas, for 5 s of a
// minute the replicas hold static shares of. Nothing is denied, no key's
// window is over its limit and no decision waits for Redis (but in the
// first second of a minute, where a request within the clock's
// uncertainty of the boundary may wait until the epoch is known).
func TestRealtimeManyKeysFarBelowLimit(t *testing.T) {
	rtSkipShort(t)
	rule := rtPerMinute(100)
	keys := rtKeys(rule, 20000)
	var groups []*rtGroup
	var admins []*redis.Client
	for _, n := range []int{2, 4} {
		srv := redistest.Start(t)
		groups = append(groups, rtGroupStart(t, srv.Addr, fmt.Sprint("realtime-many-", n), n))
		admins = append(admins, rtClient(t, srv.Addr))
	}
	t.Parallel() // the replicas run meanwhile
	for i, g := range groups {
		t.Run(fmt.Sprint(len(g.all), " replicas"), func(t *testing.T) { rtManyKeys(t, g, admins[i], rule, keys) })
	}
}

func rtManyKeys(t *testing.T, g *rtGroup, admin *redis.Client, rule *limiter.Rule, keys [][]byte) {
	const seconds = 5
	start := rtShareWindow(t, g, time.Minute, (seconds+1)*time.Second)
	end := start.Add(seconds * time.Second)
	time.Sleep(time.Until(start.Add(-50 * time.Millisecond))) // the run is scheduled in real time
	stalls := rtWatchStalls()
	before, rounds0 := rtRedisInfo(t, admin), g.rounds()
	calls := g.run(rtTraffic{rule: rule, keys: keys, rate: 3000, callers: 64}, start, end)
	after, rounds1 := rtRedisInfo(t, admin), g.rounds()
	stalls.close()
	rtErrors(t, calls)

	var denied, waited int
	var unexcused, excused []string
	firstSecond := map[string]int{}
	touched := map[int]bool{}
	for _, c := range calls {
		touched[c.key] = true
		if !c.ok {
			denied++
		}
		if c.start%int64(time.Minute) < int64(time.Second) && c.ok {
			firstSecond[c.mode.String()]++
			continue
		}
		if c.ok && c.mode == limiter.ModeLocal {
			continue
		}
		waited++
		// A replica holds no share of a key it has not seen while its
		// copy of the registry is older than a lease less a heartbeat:
		// a process stalled for about a heartbeat decides new keys by
		// credit, waiting for Redis, and may deny them.
		stall := rtStallNear(stalls, c, rtLease)
		msg := fmt.Sprintf("key %d at +%v: %v, allowed %v, after %v (the longest scheduler stall in the lease before: %v)", c.key,
			time.Duration(c.start-start.UnixNano()).Round(time.Millisecond), c.mode, c.ok, c.latency().Round(time.Microsecond), stall)
		if stall >= rtStallExcuse {
			excused = append(excused, msg)
		} else {
			unexcused = append(unexcused, msg)
		}
	}
	lat, _ := rtLatencies(calls)
	t.Logf("%d decisions (%.0f a second) on %d keys; %d denied; modes %v; admitted in a minute's first second %v",
		len(calls), float64(len(calls))/seconds, len(touched), denied, rtModes(calls), firstSecond)
	t.Logf("decision latency: %s; scheduler: %v", lat, stalls)
	t.Logf("%d sync rounds; %s", rounds1-rounds0, rtRedisLoad(before, after, len(calls)))
	g.logStats(t)
	if len(excused) > 0 {
		t.Logf("%d decisions waited for Redis or were denied after the machine stalled for %v or more: %s",
			len(excused), rtStallExcuse, strings.Join(excused[:min(5, len(excused))], "; "))
	}
	if len(unexcused) > 0 {
		t.Errorf("%d decisions of keys far below their limit waited for Redis or were denied: %s",
			len(unexcused), strings.Join(unexcused[:min(5, len(unexcused))], "; "))
	}
	from := start.Unix() / 60
	rtAssertWithin(t, calls, 100, time.Minute, from, (end.Unix()-1)/60+1)
}

// rtStallExcuse is the scheduler stall that excuses a key far below its
// limit waiting for Redis, or being denied, within a lease after it.
const rtStallExcuse = 250 * time.Millisecond

// rtStallNear is the longest scheduler stall of s that overlaps c or the
// span before it.
func rtStallNear(s *rtStalls, c rtCall, before time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for _, st := range s.stalls {
		if st.start < c.end && st.end > c.start-int64(before) {
			longest = max(longest, st.latency()-time.Millisecond)
		}
	}
	return longest
}

// TestRealtimeScaleOut: 2 → 4 replicas in the middle of a window at 5×
// the limit of one key; every window stays within the limit. Per second
// (50/s): two replicas are added 2.5 s into a run of about 8 s, whose
// last windows have four sharers. Per minute (100/min): two are added
// 6 s into the run, within a minute the first two hold static shares of
// and while those shares still have room, and the run goes on 15 s into
// the next minute, which the four share.
func TestRealtimeScaleOut(t *testing.T) {
	rtSkipShort(t)
	srv := redistest.Start(t)
	minute := rtGroupStart(t, srv.Addr, "realtime-scale-minute", 2)
	t.Parallel() // the replicas run meanwhile
	t.Run("per second", func(t *testing.T) {
		g := rtGroupStart(t, redistest.Start(t).Addr, "realtime-scale-second", 2)
		rtScaleOut(t, g, rtPerSecond(50), 2500*time.Millisecond, 7*time.Second, 8)
	})
	t.Run("per minute", func(t *testing.T) {
		rtScaleOut(t, minute, rtPerMinute(100), 6*time.Second, 15*time.Second, 4)
	})
}

// rtScaleOut offers one key 5× its limit on g's two replicas, from a
// window they hold shares of with half of it left, adds two replicas
// addAt into the run and ends tail into the next window.
func rtScaleOut(t *testing.T, g *rtGroup, rule *limiter.Rule, addAt, tail time.Duration, callers int) {
	w := rule.Windows[0]
	start := rtShareWindow(t, g, w.Period, w.Period/2)
	end := start.Truncate(w.Period).Add(w.Period + tail)
	var added sync.WaitGroup
	added.Go(func() {
		time.Sleep(time.Until(start.Add(addAt))) // the scale-out is scheduled in real time
		g.add()
		g.add()
	})
	tr := rtTraffic{rule: rule, keys: rtKeys(rule, 1), rate: 5 * float64(w.Limit) / w.Period.Seconds(), callers: callers}
	stalls := rtWatchStalls()
	calls := g.run(tr, start, end)
	stalls.close()
	added.Wait()
	rtErrors(t, calls)
	from := start.UnixNano() / int64(w.Period)
	to := (end.UnixNano()-1)/int64(w.Period) + 1
	lat, _ := rtLatencies(calls)
	t.Logf("2 → 4 replicas at +%v; admitted per window: %v", addAt, rtAdmitted(calls, 0, w.Period, from, to))
	t.Logf("modes %v; decision latency: %s; scheduler: %v", rtModes(calls), lat, stalls)
	g.logStats(t)
	rtAssertWithin(t, calls, int(w.Limit), w.Period, from, to)
}

// TestRealtimeReplicaRestart: four replicas share a key under 100/minute,
// offered twice the limit, in a minute they hold static shares of (from
// its start, or from now if 40 s of it are left). A third of the way to
// the minute's end, while the shares still have room, one replica is
// killed (cut off from Redis, then stopped: the hits it admitted from its
// share never reach Redis and the share is never released) and a new one
// started. The minute admits no more than the limit: the dead replica's
// share stays reserved until the window ends.
func TestRealtimeReplicaRestart(t *testing.T) {
	rtSkipShort(t)
	srv := redistest.Start(t)
	rule := rtPerMinute(100)
	g := rtGroupStart(t, srv.Addr, "realtime-replica-restart", 4)
	t.Parallel() // the replicas run meanwhile
	start := rtShareWindow(t, g, time.Minute, 40*time.Second)
	end := start.Truncate(time.Minute).Add(time.Minute)
	killAt := start.Add(end.Sub(start) / 3)
	var killed *rtReplica
	var restarted sync.WaitGroup
	restarted.Go(func() {
		time.Sleep(time.Until(killAt)) // the kill is scheduled in real time
		g.mu.Lock()
		killed = g.all[1]
		g.mu.Unlock()
		g.kill(killed)
		g.add()
	})
	stalls := rtWatchStalls()
	calls := g.run(rtTraffic{rule: rule, keys: rtKeys(rule, 1), rate: 2 * 100 / 60.0, callers: 4}, start, end)
	stalls.close()
	restarted.Wait()
	rtErrors(t, calls)
	var before int
	for _, c := range calls {
		if c.ok && c.start < killAt.UnixNano() {
			before++
		}
	}
	from := start.Unix() / 60
	lat, _ := rtLatencies(calls)
	t.Logf("%d requests in the minute from +%v, %d admitted, %d of them before the kill at +%v; %s admitted %d before it was killed",
		len(calls), start.Sub(start.Truncate(time.Minute)).Round(time.Millisecond), rtAdmitted(calls, 0, time.Minute, from, from+1)[0],
		before, killAt.Sub(start.Truncate(time.Minute)).Round(time.Millisecond), killed.name, killed.admitted.Load())
	t.Logf("modes %v; decision latency: %s; scheduler: %v", rtModes(calls), lat, stalls)
	g.logStats(t)
	rtAssertWithin(t, calls, 100, time.Minute, from, from+1)
}

// TestRealtimeSkewedManyKeys is the design's skewed row: 1 000 keys of 10
// a second with Zipf(1.1) popularity, 3 000 requests a second over 4
// replicas, for 8 s: no key's window is over its limit. Key-seconds that
// saw a denial though no more than the limit was sent in them (or decided
// in them: a request that waited past a boundary competes for the next
// second's budget) are counted and logged.
func TestRealtimeSkewedManyKeys(t *testing.T) {
	rtSkipShort(t)
	srv := redistest.Start(t)
	rule := rtPerSecond(10)
	keys := rtKeys(rule, 1000)
	g := rtGroupStart(t, srv.Addr, "realtime-skewed", 4)
	const seconds = 8
	start := rtShareWindow(t, g, time.Second, time.Second)
	// As many callers as a proxy has requests in flight: one that waits
	// for a round holds back few others.
	stalls := rtWatchStalls()
	calls := g.run(rtTraffic{rule: rule, keys: keys, zipf: 1.1, rate: 3000, callers: 256}, start, start.Add(seconds*time.Second))
	stalls.close()
	rtErrors(t, calls)
	from := start.Unix()
	rtAssertWithin(t, calls, 10, time.Second, from, from+seconds)

	var denied int
	for _, c := range calls {
		if !c.ok {
			denied++
		}
	}
	d := rtDeniedUnder(calls, 10, time.Second, from+1)
	lat, _ := rtLatencies(calls)
	t.Logf("%d decisions (%.0f a second), %d denied; modes %v", len(calls), float64(len(calls))/seconds, denied, rtModes(calls))
	t.Logf("after the first second: of %d key-seconds sent no more than the limit, %d saw a denial (%d requests; by requests sent in the second: %v), "+
		"%d of them sent no more than half of it; %d key-seconds denied though no more than the limit was decided in them",
		d.under, d.sent, d.deniedUnder, d.byOffered, d.half, d.decided)
	t.Logf("admitted per second, the busiest key: %v", rtAdmitted(calls, 0, time.Second, from, from+seconds))
	t.Logf("decision latency: %s; scheduler: %v", lat, stalls)
	g.logStats(t)
}
