package redisstore_test

// The harness of the many-keys scenarios (realtime_keys_test.go): a group
// of replicas on one redis-server that can grow and lose replicas while
// traffic runs, traffic over many keys drawn uniformly or from a Zipf
// law, and the checks of every key's windows.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// rtPer is a rule of one fixed window: limit per period p.
func rtPer(limit uint64, p time.Duration) *limiter.Rule {
	return &limiter.Rule{Windows: []limiter.Window{{Limit: limit, Period: p}}}
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
	rec     *syncLog                     // records the sync rounds; nil: none
}

// rtGroupStart starts n replicas and waits until each counts all n.
func rtGroupStart(t *testing.T, addr, service string, n int) *rtGroup {
	return rtGroupRecorded(t, addr, service, n, nil)
}

// rtGroupRecorded is rtGroupStart with every replica's sync rounds
// recorded in rec (nil: none).
func rtGroupRecorded(t *testing.T, addr, service string, n int, rec *syncLog) *rtGroup {
	t.Helper()
	g := &rtGroup{t: t, addr: addr, service: service, rec: rec}
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
	var store limiter.Store = redisstore.New(client, g.service)
	if g.rec != nil {
		store = recordingStore{Store: store, log: g.rec}
	}
	faulty := limitertest.NewFaultyStore(store)
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
	g.retire(r)
}

// retire sends r no more traffic and stops it, as a process told to stop:
// it pushes its hits, releases and leaves the registry.
func (g *rtGroup) retire(r *rtReplica) {
	g.mu.Lock()
	live := slices.DeleteFunc(slices.Clone(*g.live.Load()), func(x *rtReplica) bool { return x == r })
	g.live.Store(&live)
	g.mu.Unlock()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		g.t.Errorf("%s did not stop within 15s", r.name)
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
				ri := turn % len(live)
				r := live[ri]
				ok, err := r.lim.Decide(req, out)
				t1 := time.Now()
				if ok {
					r.admitted.Add(1)
				}
				mine = append(mine, rtCall{start: t0.UnixNano(), end: t1.UnixNano(), key: key,
					ok: ok, err: err != nil, mode: out[0].Mode, replica: ri})
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
// keys with such a run, the most any such run admitted over, and, for the
// first few keys, the worst run and its calls.
func rtOverPeriod(calls []rtCall, limit int, p time.Duration, from, to int64) (keys, most int, worst []string) {
	byKey := map[int][]rtCall{}
	for _, c := range calls {
		if w := c.start / int64(p); c.ok && w >= from && w < to {
			byKey[c.key] = append(byKey[c.key], c)
		}
	}
	for key, admitted := range byKey {
		if len(admitted) <= limit {
			continue
		}
		excess, where := 0, ""
		for a := from; a < to; a++ {
			for b := a; b <= to; b++ {
				var in []rtCall
				for _, c := range admitted {
					if c.start/int64(p) >= a && c.end/int64(p) <= b {
						in = append(in, c)
					}
				}
				if over := len(in) - limit*int(b-a+1); over > excess {
					excess = over
					where = fmt.Sprintf("key %d: windows %d..%d admitted %d > %d: %s",
						key, a-from, b-from, len(in), limit*int(b-a+1), rtSpans(in, a*int64(p)))
				}
			}
		}
		if excess > 0 {
			most = max(most, excess)
			if keys++; keys <= 5 {
				worst = append(worst, where)
			}
		}
	}
	return keys, most, worst
}

// rtSpans lists calls as the span of each from base (Unix ns) and how it
// was decided.
func rtSpans(calls []rtCall, base int64) string {
	slices.SortFunc(calls, func(x, y rtCall) int { return int(x.start - y.start) })
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = fmt.Sprintf("%.3f–%.3fms %v@r%d", float64(c.start-base)/1e6, float64(c.end-base)/1e6, c.mode, c.replica)
	}
	return strings.Join(parts, ", ")
}

// rtAssertWithin fails t for a key whose windows admitted more than limit.
func rtAssertWithin(t *testing.T, calls []rtCall, limit int, p time.Duration, from, to int64) {
	t.Helper()
	if n, _, worst := rtOverPeriod(calls, limit, p, from, to); n > 0 {
		t.Errorf("%d keys over their limit of %d per %v: %s", n, limit, p, strings.Join(worst, "; "))
	}
}

// rtStalledTolerance is the scheduler stall past which rtAssertWithinStalled
// lets a run of windows admit up to a unit per replica over its limit.
const rtStalledTolerance = 20 * time.Millisecond

// rtAssertWithinStalled is rtAssertWithin for a run during which the
// machine may have stalled the process: a run of windows over its limit by
// at most a unit per replica (n) is logged, not failed, if the scheduler
// stalled for rtStalledTolerance or more (found beside a CPU hog at the
// engine of bf6fc1e as at later ones, once in a few runs: not explained);
// more than that, or any excess on a machine that did not stall, fails.
func rtAssertWithinStalled(t *testing.T, calls []rtCall, limit, n int, p time.Duration, from, to int64, stalls *rtStalls) {
	t.Helper()
	keys, most, worst := rtOverPeriod(calls, limit, p, from, to)
	if keys == 0 {
		return
	}
	msg := fmt.Sprintf("%d keys over their limit of %d per %v, by %d at most: %s", keys, limit, p, most, strings.Join(worst, "; "))
	if most <= n && stalls.longest() >= rtStalledTolerance {
		t.Logf("%s (the scheduler stalled up to %v)", msg, stalls.longest())
		return
	}
	t.Error(msg)
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

// rtFoundingSpan is the limiter's foundingSpan: replicas that join
// within it of the first are the founders of the windows under way.
const rtFoundingSpan = 100 * time.Millisecond

// joinSpread is how far apart the group's replicas joined the registry
// (their joined instants, store clock).
func (g *rtGroup) joinSpread() time.Duration {
	first, last := g.joinRange()
	return time.Duration(last-first) * time.Microsecond
}

// joinRange is when the first and the last of the group's replicas
// joined, by the registry (Redis TIME, Unix µs).
func (g *rtGroup) joinRange() (first, last int64) {
	g.t.Helper()
	probe := redis.NewClient(&redis.Options{Addr: g.addr})
	defer probe.Close()
	joined, err := probe.HGetAll(context.Background(), redisstore.New(probe, g.service).JoinedKey()).Result()
	if err != nil {
		g.t.Fatal(err)
	}
	for f, v := range joined {
		if !strings.HasPrefix(f, "j:") {
			continue
		}
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			g.t.Fatalf("joined instant %s=%q: %v", f, v, err)
		}
		if first == 0 || us < first {
			first = us
		}
		last = max(last, us)
	}
	return first, last
}
