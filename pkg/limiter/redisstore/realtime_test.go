package redisstore_test

// Real-time tests of the credit engine against real redis-server
// processes. Each replica is an in-process Limiter with its own go-redis
// client and Run loop; callers pace their requests on the wall clock, and
// every decision is recorded with the instants its Decide call began and
// returned. Windows are aligned to Unix seconds, so the per-second counts
// below are per window.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/internal/tcpproxy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// The load of the design's real-time row: 4 replicas, 4 callers each,
// offering 5× a limit of 50 per second.
const (
	rtLimit    = 50
	rtReplicas = 4
	rtCallers  = 4 // per replica
	rtLoad     = 5 // offered load, × the limit
)

// rtTimeout is the engine's default StoreTimeout (redis_timeout), which
// bounds how long a request waits on the store.
const rtTimeout = 10 * time.Millisecond

func rtSkipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("real-time test against redis-server: skipped with -short")
	}
}

func rtRule() *limiter.Rule {
	return &limiter.Rule{Windows: []limiter.Window{{Limit: rtLimit, Period: time.Second}}}
}

// rtKey builds the key of one descriptor value under rule, as the RLS
// layer does.
func rtKey(rule *limiter.Rule, value string) []byte {
	k := limiter.AppendPart(nil, "realtime")
	k = limiter.AppendEntry(k, "user", value)
	return limiter.AppendPart(k, rule.Fingerprint())
}

// rtPace is the gap between one caller's requests for callers in all to
// offer load × limit per second.
func rtPace(callers int, load float64, limit uint64) time.Duration {
	return time.Duration(float64(time.Second) * float64(callers) / (load * float64(limit)))
}

// rtPoll waits until cond holds, checking every few milliseconds, and
// fails the test after bound.
func rtPoll(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rtClient is a client of one Redis node as the service builds it: no
// retries (the next sync round is the retry), one dial attempt.
func rtClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// rtFleet is a set of replicas sharing one Redis (or Redis Cluster).
type rtFleet struct {
	lims   []*limiter.Limiter
	stores []*redisstore.Store
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// rtStart runs n replicas of service, replica i on client(i), and waits
// until each has heartbeated and counts all n (so cold shares are split
// n ways). The replicas stop, pushing their hits, when the test ends.
func rtStart(t *testing.T, n int, service string, client func(i int) redis.UniversalClient) *rtFleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &rtFleet{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range n {
		st := redisstore.New(client(i), service)
		l := limiter.New(limiter.WithStore(st, fmt.Sprintf("replica-%d", i)))
		f.lims, f.stores = append(f.lims, l), append(f.stores, st)
		wg.Go(func() {
			if err := l.Run(ctx); err != nil {
				t.Errorf("replica %d: Run: %v", i, err)
			}
		})
	}
	go func() { wg.Wait(); close(f.done) }()
	t.Cleanup(func() { f.stop(t) })
	rtPoll(t, 10*time.Second, "every replica counts all replicas", func() bool {
		for _, l := range f.lims {
			if l.Stats().Replicas != n {
				return false
			}
		}
		return true
	})
	return f
}

// stop ends the replicas' Run loops and waits for their final push.
func (f *rtFleet) stop(t *testing.T) {
	f.once.Do(func() {
		f.cancel()
		select {
		case <-f.done:
		case <-time.After(15 * time.Second):
			t.Error("replicas did not stop within 15s")
		}
	})
}

func (f *rtFleet) logStats(t *testing.T) {
	t.Helper()
	for i, l := range f.lims {
		s := l.Stats()
		t.Logf("replica %d: rounds %d, sync failures %d, replicas %d, degraded %v, decisions %v",
			i, s.Rounds, s.SyncFailures, s.Replicas, s.Degraded, s.Decisions)
	}
}

// rtCall is one recorded Decide call.
type rtCall struct {
	start, end int64 // wall clock, Unix ns
	key        int
	ok         bool
	err        bool
	mode       limiter.Mode
}

func (c rtCall) latency() time.Duration { return time.Duration(c.end - c.start) }

// rtPlan is the traffic of a run: every replica runs callers callers,
// each sending one request for keys[keyOf(replica, caller)] every pace.
type rtPlan struct {
	rule    *limiter.Rule
	keys    [][]byte
	callers int
	pace    time.Duration
	keyOf   func(replica, caller int) int
}

// drive runs plan on every replica of f from start until end and returns
// the calls. Callers are spread evenly over one pace; a caller that falls
// more than a pace behind skips ahead rather than bursting.
func (f *rtFleet) drive(p rtPlan, start, end time.Time) []rtCall {
	var mu sync.Mutex
	var all []rtCall
	var wg sync.WaitGroup
	total := len(f.lims) * p.callers
	for r, l := range f.lims {
		for c := range p.callers {
			idx := r*p.callers + c
			key := 0
			if p.keyOf != nil {
				key = p.keyOf(r, c)
			}
			wg.Go(func() {
				req := []limiter.Request{{Key: p.keys[key], Rule: p.rule}}
				out := make([]limiter.Result, 1)
				var mine []rtCall
				next := start.Add(p.pace * time.Duration(idx) / time.Duration(total))
				for next.Before(end) {
					time.Sleep(time.Until(next)) // pacing in real time
					t0 := time.Now()
					ok, err := l.Decide(req, out)
					t1 := time.Now()
					mine = append(mine, rtCall{start: t0.UnixNano(), end: t1.UnixNano(), key: key,
						ok: ok, err: err != nil, mode: out[0].Mode})
					next = next.Add(p.pace)
					if t1.Sub(next) > p.pace {
						next = t1
					}
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return all
}

// rtNextSecond is the first whole Unix second at least lead from now.
func rtNextSecond(lead time.Duration) time.Time {
	return time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
}

// rtSecond is one window's tally for one key. An admission is decided at
// some instant inside its Decide call: from credit, at once; after a wait
// on a sync round, when the round's reply lands. Admitted and Offered
// count calls by the second they began in; Late counts the admitted ones
// that returned in a later second, so might have been decided there.
type rtSecond struct {
	Unix              int64
	Admitted, Offered int
	Late              int
}

func rtSeconds(calls []rtCall, key int, from, to int64) []rtSecond {
	out := make([]rtSecond, to-from)
	for i := range out {
		out[i].Unix = from + int64(i)
	}
	for _, c := range calls {
		if c.key != key {
			continue
		}
		s := c.start/1e9 - from
		if s < 0 || s >= int64(len(out)) {
			continue
		}
		out[s].Offered++
		if c.ok {
			out[s].Admitted++
			if c.end/1e9 != c.start/1e9 {
				out[s].Late++
			}
		}
	}
	return out
}

func rtFormat(secs []rtSecond) string {
	var b strings.Builder
	for i, s := range secs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d/%d", s.Admitted, s.Offered)
		if s.Late > 0 {
			fmt.Fprintf(&b, "(late %d)", s.Late)
		}
	}
	return b.String()
}

// rtOverLimit checks "every window admits at most limit" for one key
// against the only thing a caller can observe, the span of each call: it
// looks for a run of seconds [a, b] whose calls that began and returned
// inside it admitted more than limit × (b − a + 1). If there is none, the
// admissions can be placed at instants within their calls so that no
// second exceeds limit (Hall's condition for intervals), and the check
// passes with no tolerance. It returns a description of the worst run.
func rtOverLimit(calls []rtCall, key int, limit int, from, to int64) (excess int, where string) {
	type span struct{ a, b int64 }
	var spans []span
	for _, c := range calls {
		if c.key == key && c.ok && c.start/1e9 >= from && c.start/1e9 < to {
			spans = append(spans, span{c.start / 1e9, c.end / 1e9})
		}
	}
	for a := from; a < to; a++ {
		for b := a; b < to+1; b++ {
			n := 0
			for _, s := range spans {
				if s.a >= a && s.b <= b {
					n++
				}
			}
			if over := n - limit*int(b-a+1); over > excess {
				excess, where = over, fmt.Sprintf("seconds %d..%d admitted %d > %d", a-from, b-from, n, limit*int(b-a+1))
			}
		}
	}
	return excess, where
}

// rtLatencies describes the distribution of the calls' durations.
func rtLatencies(calls []rtCall) (summary string, maxLat time.Duration) {
	if len(calls) == 0 {
		return "no calls", 0
	}
	ds := make([]time.Duration, len(calls))
	for i, c := range calls {
		ds[i] = c.latency()
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(int(p*float64(len(ds))), len(ds)-1)] }
	bounds := []time.Duration{100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond,
		10 * time.Millisecond, 12 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond}
	counts := make([]int, len(bounds)+1)
	for _, d := range ds {
		i, _ := slices.BinarySearch(bounds, d+1)
		counts[i]++
	}
	var hist strings.Builder
	for i, n := range counts {
		if n == 0 {
			continue
		}
		if i < len(bounds) {
			fmt.Fprintf(&hist, " <%v:%d", bounds[i], n)
		} else {
			fmt.Fprintf(&hist, " >=%v:%d", bounds[len(bounds)-1], n)
		}
	}
	return fmt.Sprintf("%d calls: p50 %v, p90 %v, p99 %v, p99.9 %v, max %v; histogram%s",
		len(ds), q(0.5), q(0.9), q(0.99), q(0.999), ds[len(ds)-1], hist.String()), ds[len(ds)-1]
}

func rtModes(calls []rtCall) map[string]int {
	m := map[string]int{}
	for _, c := range calls {
		s := c.mode.String()
		if !c.ok {
			s += "-denied"
		}
		m[s]++
	}
	return m
}

func rtErrors(t *testing.T, calls []rtCall) {
	t.Helper()
	n := 0
	for _, c := range calls {
		if c.err {
			n++
		}
	}
	if n > 0 {
		t.Errorf("%d Decide calls returned an error", n)
	}
}

// TestRealtimeLimitHolds is the design's real-time row against one
// redis-server: 4 replicas, 16 callers, 5× a limit of 50 per second.
func TestRealtimeLimitHolds(t *testing.T) {
	rtSkipShort(t)
	srv := redistest.Start(t)
	rule := rtRule()
	f := rtStart(t, rtReplicas, "realtime-limit", func(int) redis.UniversalClient { return rtClient(t, srv.Addr) })
	const seconds = 6
	start := rtNextSecond(0)
	plan := rtPlan{rule: rule, keys: [][]byte{rtKey(rule, "u1")}, callers: rtCallers,
		pace: rtPace(rtReplicas*rtCallers, rtLoad, rtLimit)}
	calls := f.drive(plan, start, start.Add(seconds*time.Second))
	rtErrors(t, calls)
	from := start.Unix()
	secs := rtSeconds(calls, 0, from, from+seconds)
	lat, _ := rtLatencies(calls)
	t.Logf("admitted/offered per second: %s", rtFormat(secs))
	t.Logf("decision latency: %s", lat)
	t.Logf("modes: %v", rtModes(calls))
	f.logStats(t)
	rtCheckSeconds(t, calls, 0, secs, rtLimit)
}

// rtCheckSeconds asserts the design's bounds on one key: no window over
// the limit, and every interior window (not the cold first, not the last)
// at least 95 % of it.
func rtCheckSeconds(t *testing.T, calls []rtCall, key int, secs []rtSecond, limit int) {
	t.Helper()
	from, to := secs[0].Unix, secs[len(secs)-1].Unix+1
	if excess, where := rtOverLimit(calls, key, limit, from, to); excess > 0 {
		t.Errorf("key %d over the limit: %s", key, where)
	}
	for i, s := range secs {
		if s.Admitted > limit {
			t.Logf("key %d second %d: %d calls that began in it were admitted (%d returned in the next second)", key, i, s.Admitted, s.Late)
		}
		if i == 0 || i == len(secs)-1 {
			continue
		}
		if floor := limit * 95 / 100; s.Admitted < floor {
			t.Errorf("key %d interior second %d admitted %d < %d (95%% of %d), offered %d", key, i, s.Admitted, floor, limit, s.Offered)
		}
	}
}
