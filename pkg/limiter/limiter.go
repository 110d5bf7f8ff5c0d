package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Op says what a Request does to its key.
type Op uint8

const (
	// Charge spends Hits units if every window admits them (the zero Op).
	Charge Op = iota
	// Check spends nothing and is denied iff not even one unit is left.
	Check
	// Refund gives Hits units back (never below an empty window or a full
	// bucket) and is always allowed.
	Refund
)

// Request is one key's part of a decision.
type Request struct {
	// Key identifies the counter. It must change when the Rule's limits
	// change: build it with AppendPart and AppendEntry and end it with
	// Rule.Fingerprint().
	// The limiter copies it when it keeps it.
	Key []byte
	// Rule gives the windows; a nil Rule is unlimited and always allowed.
	Rule *Rule
	// Hits is the number of units; zero means one for Charge.
	Hits uint64
	// Op is Charge, Check or Refund.
	Op Op
	// Shadow requests are decided and charged like others, but their
	// denial does not deny the batch.
	Shadow bool
}

// Result is the outcome for one Request, described by its most restrictive
// window (the one with the fewest units remaining).
type Result struct {
	// Allowed is false when a window could not admit the request.
	Allowed bool
	// Limit and Period describe the most restrictive window; Limit is zero
	// for an unlimited request.
	Limit  uint64
	Period time.Duration
	// Remaining is the number of whole units still available in that window.
	Remaining uint64
	// Reset: for an allowed request, the time until that window ends (fixed,
	// sliding) or the bucket is full (token bucket); for a denied one, the
	// time until the request would be admitted (RetryAfter).
	Reset time.Duration
	// RetryAfter is the exact time until every window admits the request's
	// units again; zero when allowed. It never undershoots. For a request
	// larger than a window can ever hold it is the time until that window
	// resets, and the request is denied at once.
	RetryAfter time.Duration
	// Mode says how the decision was made.
	Mode Mode
}

// ErrBatchSize reports mismatched request and result slices.
var ErrBatchSize = errors.New("limiter: results slice shorter than requests")

// Limiter decides requests for keys. Build it with New; it is safe for
// concurrent use. Run its maintenance loop with Run.
type Limiter struct {
	clk   clockSource
	log   *slog.Logger
	sweep time.Duration
	keys  *table
	conc  concurrency
	stats stats
	eng   *engine // the credit engine; nil: local-only
	// full asks Run to sweep now: the table refused a key (WithMaxKeys).
	full  chan struct{}
	setup struct { // the engine's options, until New builds it
		store   Store
		replica string
		metrics syncMetrics
	}
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock replaces the real clock of a local-only Limiter (tests use a
// fake one). A Limiter with a store ignores it: the credit engine's
// decisions, loops and timers all read the runtime's clock, one clock that
// testing/synctest makes virtual, so no test mixes fake and real time.
func WithClock(c Clock) Option { return func(l *Limiter) { l.clk.clock = c } }

// WithLogger sets the logger; the default discards.
func WithLogger(log *slog.Logger) Option { return func(l *Limiter) { l.log = log } }

// defaultMaxKeys is the number of keys a Limiter holds unless WithMaxKeys
// says otherwise: about 0.5 GB of key state.
const defaultMaxKeys = 1_000_000

// WithMaxKeys bounds the keys a Limiter holds (default 1 000 000; n ≤ 0
// keeps the default). At the bound, a request that would charge a key not
// held is denied, its Mode ModeFull and its RetryAfter the sweep interval,
// rather than admitted untracked: a key's limit is never exceeded because
// the table is full. Checks and refunds of such keys are allowed and keep
// nothing. Run then sweeps at once and logs a warning at most once a
// sweep interval. The bound is soft by the decisions in flight.
func WithMaxKeys(n int) Option {
	return func(l *Limiter) {
		if n > 0 {
			l.keys.max = int64(n)
		}
	}
}

// New builds a local-only Limiter: each process enforces every Rule in full.
func New(opts ...Option) *Limiter {
	sys := newSystemClock()
	l := &Limiter{
		clk:   clockSource{clock: sys},
		log:   slog.New(slog.DiscardHandler),
		sweep: 10 * time.Second,
		keys:  newTable(),
		full:  make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(l)
	}
	if l.setup.store != nil {
		l.clk.clock = sys // see WithClock
		l.eng = newEngine(l)
	}
	if l.clk.clock == Clock(sys) {
		l.clk.sys = sys
	}
	return l
}

// Run evicts idle keys and, with a store, runs the credit engine's sync
// loop, until ctx ends. Before returning nil it pushes every hit, hands
// every reservation back and leaves the replica registry.
func (l *Limiter) Run(ctx context.Context) error {
	if l.eng != nil {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { l.eng.run(ctx) })
	}
	t := time.NewTicker(l.sweep)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.full:
			n := l.Sweep()
			if time.Since(warned) >= l.sweep {
				warned = time.Now()
				l.log.Warn("key table full: requests for keys not held are denied until keys are evicted",
					"max_keys", l.keys.max, "evicted", n, "live", l.Keys(), "refused_so_far", l.stats.modes[ModeFull].Load())
			}
		case <-t.C:
			if l.clk.sys != nil {
				l.clk.sys.anchor()
			}
			if n := l.Sweep(); n > 0 {
				l.log.Debug("evicted idle keys", "count", n, "live", l.Keys())
				if n >= spikeKeys && n >= l.Keys() {
					// A spike went: its memory goes back to the system now,
					// not whenever allocation next starts a collection.
					freeMemory()
				}
			}
		}
	}
}

// spikeKeys is the fewest keys one sweep must evict, and at least as many
// as it leaves, for Run to return their memory to the system.
const spikeKeys = 100_000

// freeMemory returns freed memory to the system (tests replace it).
var freeMemory = debug.FreeOSMemory

// Sweep evicts the keys whose state is as good as new and returns how many.
// Run calls it periodically.
func (l *Limiter) Sweep() int { return l.keys.sweep(l.now()) }

// Keys is the number of keys currently held.
func (l *Limiter) Keys() int { return int(l.keys.size.Load()) }

// Decide decides reqs together and writes one Result per request into out.
// It reports whether the batch is allowed: true iff no non-shadow request is
// denied. When the batch is denied, nothing it charged is kept, except
// charges of rules with AlwaysCharge; refunds always apply.
func (l *Limiter) Decide(reqs []Request, out []Result) (bool, error) {
	if len(out) < len(reqs) {
		return false, ErrBatchSize
	}
	now := l.now()
	deny := -1 // index of the first denying request
	for i := range reqs {
		r := &reqs[i]
		if deny >= 0 && r.Op != Refund {
			l.decideOne(&out[i], r, now, true)
			continue
		}
		l.decideOne(&out[i], r, now, false)
		if !out[i].Allowed && !r.Shadow && deny < 0 {
			deny = i
		}
	}
	if deny < 0 {
		return true, nil
	}
	l.rollback(reqs[:deny], out, now)
	return false, nil
}

// decideOne applies one request to its key and writes its result to
// res. A dry run charges nothing.
func (l *Limiter) decideOne(res *Result, r *Request, now int64, dry bool) {
	if r.Rule == nil {
		*res = Result{Allowed: true}
		return
	}
	hits := r.Hits
	if hits == 0 && r.Op == Charge {
		hits = 1
	}
	if l.keys.full() && l.keys.get(r.Key) == nil {
		l.refuseNew(res, r, dry)
		return
	}
	if eng := l.eng; eng != nil && !r.Rule.Tuning.localOnly() {
		var buf Request
		sr := eng.sharedRequest(r, &buf)
		eng.creditDecide(res, eng.creditFor(sr.Key, sr.Rule, now), sr, hits, now, dry)
		if !dry && !res.Allowed && r.Op == Charge && r.Rule.AlwaysCharge {
			eng.chargeDebt(sr, hits, now)
		}
		if sr != r {
			userResult(res, r.Rule)
		}
		return
	}
	e := l.keys.lock(r.Key, r.Rule, false)
	defer e.mu.Unlock()
	switch r.Op {
	case Refund:
		for i, w := range r.Rule.Windows {
			e.counters[i].Refund(w, r.Rule.Algorithm, now, hits)
		}
		l.finish(res, e, r.Rule, now, true, 0)
		return
	case Check:
		wt := waitAll(e.counters, r.Rule, now, 1)
		l.finish(res, e, r.Rule, now, wt == 0, wt)
		return
	}
	wt := waitAll(e.counters, r.Rule, now, hits)
	if !dry && (wt == 0 || r.Rule.AlwaysCharge) {
		for i, w := range r.Rule.Windows {
			e.counters[i].Charge(w, r.Rule.Algorithm, now, hits)
		}
	}
	l.finish(res, e, r.Rule, now, wt == 0, wt)
}

// refuseNew decides a request for a key the full table does not hold,
// keeping nothing: a charge is denied until the next sweep may make
// room, a check or a refund is allowed (the key is as good as new).
func (l *Limiter) refuseNew(res *Result, r *Request, dry bool) {
	w := r.Rule.Windows[0]
	*res = Result{Allowed: true, Limit: w.Limit, Period: w.Period, Remaining: w.Limit, Mode: ModeFull}
	if r.Op != Charge {
		return
	}
	res.Allowed, res.Remaining, res.RetryAfter, res.Reset = false, 0, l.sweep, l.sweep
	if !dry {
		l.stats.modes[ModeFull].Add(1)
		select {
		case l.full <- struct{}{}:
		default:
		}
	}
}

// waitAll is the longest wait over the rule's windows for n units.
func waitAll(cs []WindowState, rule *Rule, now int64, n uint64) time.Duration {
	var longest time.Duration
	for i, w := range rule.Windows {
		longest = max(longest, cs[i].Wait(w, rule.Algorithm, now, n))
	}
	return longest
}

// finish fills res from the key's state after the decision and records
// when the key becomes fresh. e.mu must be held.
func (l *Limiter) finish(res *Result, e *entry, rule *Rule, now int64, allowed bool, wt time.Duration) {
	res.Allowed, res.RetryAfter, res.Mode = allowed, 0, ModeLocal
	var fresh int64
	for i, w := range rule.Windows {
		c := e.counters[i]
		rem := c.Remaining(w, rule.Algorithm, now)
		if i == 0 || rem < res.Remaining {
			res.Limit, res.Period, res.Remaining = w.Limit, w.Period, rem
			res.Reset = c.UntilReset(w, rule.Algorithm, now)
		}
		fresh = max(fresh, c.FreshAt(w, rule.Algorithm))
	}
	e.fresh.Store(fresh)
	if !allowed {
		res.RetryAfter = finiteWait(wt, e.counters, rule, now)
		res.Reset = res.RetryAfter
	}
}

// finiteWait replaces Never (a request larger than a window can hold) by
// the time until the longest window resets.
func finiteWait(wt time.Duration, cs []WindowState, rule *Rule, now int64) time.Duration {
	if wt != Never {
		return wt
	}
	var d time.Duration
	for i, w := range rule.Windows {
		d = max(d, cs[i].UntilReset(w, rule.Algorithm, now), w.Period-time.Duration(now%int64(w.Period)))
	}
	return d
}

// rollback takes back the charges of an allowed prefix of a denied batch.
func (l *Limiter) rollback(reqs []Request, out []Result, now int64) {
	for i := range reqs {
		r := &reqs[i]
		if r.Rule == nil || r.Op != Charge || !out[i].Allowed || r.Rule.AlwaysCharge {
			continue
		}
		hits := max(r.Hits, 1)
		if eng := l.eng; eng != nil && !r.Rule.Tuning.localOnly() {
			eng.refund(eng.creditFor(r.Key, eng.sharedRule(r.Rule), now), int64(hits), now) // pushed meanwhile: a negative hit
			continue
		}
		e := l.keys.lock(r.Key, r.Rule, false)
		for j, w := range r.Rule.Windows {
			e.counters[j].Refund(w, r.Rule.Algorithm, now, hits) // charged at this same instant
		}
		l.finish(&out[i], e, r.Rule, now, true, 0)
		e.mu.Unlock()
	}
}

// String describes the limiter for logs.
func (l *Limiter) String() string {
	mode := "local"
	if l.eng != nil {
		mode = "shared as " + l.eng.replica
	}
	return fmt.Sprintf("limiter(%s, %d keys)", mode, l.Keys())
}
