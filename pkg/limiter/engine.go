package limiter

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Mode says how a decision was made, for metrics.
type Mode uint8

// Modes of a decision.
const (
	ModeLocal    Mode = iota // in process: from credit, or a local-only rule
	ModeSync                 // after waiting for a sync round
	ModeCold                 // after the key's first sync
	ModeOverrun              // the store was slow: admitted from held-back credit
	ModeDegraded             // the store is unreachable: fail-static or fail-open
	ModeFull                 // the key table is full: a key not held is refused (WithMaxKeys)
	modeCount
)

var modeNames = [modeCount]string{"local", "sync", "cold", "overrun", "degraded", "full"}

// String names the mode as metrics label it.
func (m Mode) String() string {
	if m < modeCount {
		return modeNames[m]
	}
	return "unknown"
}

// Stats are the engine's counters since start.
type Stats struct {
	// Decisions by mode: sync, cold, overrun, degraded, full. Decisions made
	// from local state are not counted here (the hot path stays free of
	// shared writes); the RLS metrics count every decision by mode.
	Decisions map[string]uint64
	// Rounds is the number of sync round trips; SyncFailures those that
	// failed (heartbeats included).
	Rounds, SyncFailures uint64
	// Replicas is the number of live replicas last seen.
	Replicas int
	// Degraded reports that the store has been unreachable for longer
	// than the default CacheTTL.
	Degraded bool
}

type stats struct {
	modes        [modeCount]atomic.Uint64
	rounds       atomic.Uint64
	syncFailures atomic.Uint64
}

func (e *engine) count(mode Mode) { e.stats.modes[mode].Add(1) }

// Stats returns the engine's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Decisions: make(map[string]uint64, modeCount), Replicas: 1}
	for i, n := range modeNames {
		if Mode(i) != ModeLocal { // local decisions are not counted: no shared write on the hot path
			s.Decisions[n] = l.stats.modes[i].Load()
		}
	}
	s.Rounds, s.SyncFailures = l.stats.rounds.Load(), l.stats.syncFailures.Load()
	if e := l.eng; e != nil {
		s.Replicas = int(e.replicas.Load())
		s.Degraded = e.degraded(&Rule{}, e.now())
	}
	return s
}

// engine is the credit engine: it shares rules through a Store. It owns
// the store, the replica registry's view, the estimate of the store's
// clock, the store's health, the keys waiting for a round and the sync
// loop's metrics; the Limiter hands it every decision of a shared rule.
// The key table, the concurrency caps, the clock and the decision counters
// are the Limiter's, shared with it.
type engine struct {
	keys  *table
	conc  *concurrency
	clk   *clockSource
	log   *slog.Logger
	stats *stats

	store    Store
	replica  string
	replicas atomic.Int64 // N: live replicas last seen
	// replicasSince is the local ns from which a heartbeat has said N,
	// 0 before the first.
	replicasSince atomic.Int64
	offset        atomic.Int64 // store clock − local clock, µs
	clockErr      atomic.Int64 // how far offset may be off, ns
	storeClk      storeClock   // what offset and clockErr are made from
	lastOK        atomic.Int64 // local ns of the last successful store call
	lastFail      atomic.Int64 // local ns of the last failed store call
	// outageOK is lastOK when the store last began to fail: it names the
	// outage, whose fallback windows a key seeds once. backAt is when the
	// store answered again after failing, downFor how long it had not
	// (local ns).
	outageOK, backAt, downFor atomic.Int64
	roundTrip                 atomic.Int64 // smoothed store round trip (rounds, heartbeats), ns
	kickCh                    chan struct{}
	pendingMu                 sync.Mutex
	pending                   []*creditState // keys that asked for a sync since the last round
	lastScan                  int64          // local ns of the last full scan (the rounds loop only)
	members                   atomic.Pointer[memberView]
	// decl is the shrink of its shares this replica decided, declared
	// or about to be (credit_declare.go); sharePeriod the longest period
	// of a rule with static shares it holds keys of, store µs.
	decl        atomic.Pointer[declState]
	sharePeriod atomic.Int64
	// feedPushed: the store's feed is read by followFeed, not polled.
	feedPushed atomic.Bool
	joined     atomic.Int64 // store µs of this replica's first heartbeat
	// closing: the final push has begun; no share admits more (shutdown).
	closing atomic.Bool
	// beatSoon asks the upkeep loop for a heartbeat before its time: a
	// round found its key contended by shares others hold unreported.
	beatSoon  atomic.Bool
	activeMu  sync.Mutex
	active    []*creditState // keys that synced and have not gone idle since (scanDue)
	contMu    sync.Mutex
	contended map[string]*contention // keys other replicas need the shares of
	contN     atomic.Int64           // len(contended), read without contMu by new keys
	work      contWork               // the walk of contended; guarded by contMu
	// windows holds each rule's windows in the store's unit (storeWindows),
	// shared by the rule's keys; cleared when it holds maxRuleWindows.
	windows  sync.Map // *Rule → []Window
	windowsN atomic.Int64
	// rules holds the rule the engine runs each token bucket of a burst
	// as (sharedRule); cleared when it holds maxRuleWindows.
	rules      sync.Map // *Rule → *Rule
	rulesN     atomic.Int64
	contCursor string // where the contention feed is read from (one reader: runUpkeep or followFeed)
	metrics    syncMetrics
	started    atomic.Int64 // local ns the sync loop started
	// degradedUnits counts the units admitted in degraded mode.
	degradedUnits atomic.Int64
	outage        outage // the store's health as last logged (runUpkeep only)
}

// newEngine builds the credit engine of l's settings.
func newEngine(l *Limiter) *engine {
	e := &engine{keys: l.keys, conc: &l.conc, clk: &l.clk, log: l.log, stats: &l.stats,
		store: l.setup.store, replica: l.setup.replica, metrics: l.setup.metrics,
		kickCh: make(chan struct{}, 1), contended: make(map[string]*contention)}
	e.replicas.Store(1)
	return e
}

// run runs the sync loop, and the feed's reader when the store pushes
// one, until ctx ends; then it pushes every hit, hands every reservation
// back and leaves the replica registry.
func (e *engine) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if fw, ok := e.store.(FeedWaiter); ok {
		e.feedPushed.Store(true)
		wg.Go(func() { e.followFeed(ctx, fw) })
	}
	wg.Go(func() { e.runSync(ctx) })
}

// now is the decision instant in Unix ns.
func (e *engine) now() int64 { return e.clk.now() }

// Store calls, the "call" label of ratelimit_sync_duration_seconds.
const (
	callSync      = "sync"
	callSlots     = "slots"
	callHeartbeat = "heartbeat"
)

// syncMetrics records store round trips; the zero value records nothing.
type syncMetrics struct {
	duration metric.Float64Histogram
	opts     map[[2]string]metric.RecordOption
}

// WithMeterProvider records store round-trip latency
// (ratelimit_sync_duration_seconds by call and result) through mp.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(l *Limiter) {
		h, err := mp.Meter("github.com/ratelimit-svc/ratelimit-svc/pkg/limiter").Float64Histogram(
			"ratelimit_sync_duration", metric.WithUnit("s"),
			metric.WithDescription("Store round trips of the sync loop, by call (sync, slots, heartbeat) and result."),
			metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1))
		if err != nil {
			return
		}
		m := syncMetrics{duration: h, opts: map[[2]string]metric.RecordOption{}}
		for _, call := range []string{callSync, callSlots, callHeartbeat} {
			for _, result := range []string{"ok", "error"} {
				m.opts[[2]string{call, result}] = metric.WithAttributeSet(attribute.NewSet(
					attribute.String("call", call), attribute.String("result", result)))
			}
		}
		l.setup.metrics = m
	}
}

// observe records one store call that began at start.
func (e *engine) observe(ctx context.Context, call string, start time.Time, err error) {
	if e.metrics.duration == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	e.metrics.duration.Record(ctx, time.Since(start).Seconds(), e.metrics.opts[[2]string{call, result}])
}

// Shared reports whether the limiter syncs rules through a store.
func (l *Limiter) Shared() bool { return l.eng != nil }

// WithStore makes the Limiter share every rule whose LocalAllowance is
// below 1 through store, as replica (a unique id per process).
func WithStore(store Store, replica string) Option {
	return func(l *Limiter) { l.setup.store, l.setup.replica = store, replica }
}

// creditFor returns key's credit state, creating it on first use. It
// takes no lock on the hot path once the key exists.
func (e *engine) creditFor(key []byte, rule *Rule, now int64) *creditState {
	ent := e.keys.get(key)
	if ent == nil || ent.cs.Load() == nil {
		ent = e.keys.lock(key, rule, true)
		if ent.cs.Load() == nil {
			cs := e.newCredit(ent.key, rule, now)
			cs.ent = ent
			ent.cs.Store(cs)
			if cs.share == nil {
				e.enqueue(cs)
			}
		}
		if cs := ent.cs.Load(); cs.share != nil && !cs.active.Load() {
			// Evictable once its share's epoch is over, unless used since
			// (table.sweep asks stillUsed).
			ent.fresh.Store(now + 2*int64(maxPeriod(rule)))
		} else {
			ent.fresh.Store(math.MaxInt64)
		}
		ent.mu.Unlock()
	}
	return ent.cs.Load()
}

// newCredit starts a key with no credit: credit the store does not know
// of would let the replicas together admit more than the limit (beside
// the shares the store counts as held, or the credit it grants
// meanwhile). A key with a static share spends the share; any other
// key's first request waits for a round, which charges it
// (credit_probe.go).
func (e *engine) newCredit(key string, rule *Rule, now int64) *creditState {
	var cs *creditState
	if shareable(rule) {
		e.noteSharePeriod(rule)
		x := new(sharedCredit) // one object for the garbage collector, not two
		cs = &x.creditState
		cs.share = &x.share
		e.initShare(cs.share, key)
	} else {
		cs = new(creditState)
	}
	cs.capacity = minCapacity(rule)
	cs.key, cs.rule, cs.ws, cs.nextSync = key, rule, e.windowsOf(rule), now
	return cs
}

// noteSharePeriod keeps the longest period of a rule with static shares
// the engine has seen (store µs): the epochs a shrink must cover
// (credit_declare.go).
func (e *engine) noteSharePeriod(rule *Rule) {
	p := int64(rule.Windows[0].Period / time.Microsecond)
	for {
		old := e.sharePeriod.Load()
		if p <= old || e.sharePeriod.CompareAndSwap(old, p) {
			return
		}
	}
}

// sharedCredit is the credit state of a key with a static share, its
// share held in the same object.
type sharedCredit struct {
	creditState
	share shareState
}

// maxRuleWindows bounds engine.windows: rules replaced by config reloads
// leave their entries behind until it is cleared.
const maxRuleWindows = 1 << 12

// windowsOf returns rule's windows in the store's unit, the same slice
// for every key of the rule (read only).
func (e *engine) windowsOf(rule *Rule) []Window {
	if ws, ok := e.windows.Load(rule); ok {
		return ws.([]Window)
	}
	ws := storeWindows(rule.Windows)
	if e.windowsN.Add(1) > maxRuleWindows {
		e.windows.Clear()
		e.windowsN.Store(1)
	}
	e.windows.Store(rule, ws)
	return ws
}

// degradedDecide decides while the store is unreachable: fail-open admits
// all; fail-static enforces ⌈L/N⌉ of every window locally. Either way the
// admits are pushed on recovery, each charged to the window it was made
// in.
func (e *engine) degradedDecide(cs *creditState, rule *Rule, n int64, now int64) Result {
	e.count(ModeDegraded)
	e.activate(cs) // its admits are pushed on recovery
	if rule.Tuning.OnStoreUnavailable == FailOpen {
		cs.addHits(n, e.hitSec(now))
		e.degradedUnits.Add(n)
		cs.share.spentElsewhere(cs.ws, n, e.storeNow(now))
		return Result{Allowed: true, Limit: rule.Windows[0].Limit, Period: rule.Windows[0].Period, Mode: ModeDegraded}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if ok := e.outageOK.Load(); cs.fb() == nil || len(cs.fb().ws) != len(rule.Windows) || cs.fb().ok != ok {
		// A new outage: what the key admitted since the last one, from
		// its share and its credit, counts against this one, at the N of
		// its start (the registry as heard back after it may not yet
		// count every replica).
		n := uint64(max(e.replicas.Load(), 1))
		cs.extras().fallback = &fallback{ws: cs.seedFallback(e, rule, n, now), ok: ok, n: n}
	}
	if n := uint64(e.replicas.Load()); n > cs.fb().n && e.storeHealthy() {
		// Settling, and the registry heard since counts more replicas
		// than the outage began with (a replica that never reached the
		// store counted itself alone): enforce the smaller part.
		cs.fb().n = n
	}
	fb, shares := cs.fb().ws, cs.fb().n
	res := Result{Allowed: true, Mode: ModeDegraded}
	var wait time.Duration
	for i, w := range rule.Windows {
		w.Limit = (w.Limit + shares - 1) / shares
		w.Burst = (w.Burst + shares - 1) / shares
		wait = max(wait, fb[i].Wait(w, rule.Algorithm, now, uint64(n)))
	}
	for i, w := range rule.Windows {
		w.Limit = (w.Limit + shares - 1) / shares
		w.Burst = (w.Burst + shares - 1) / shares
		if wait == 0 {
			fb[i].Charge(w, rule.Algorithm, now, uint64(n))
		}
		rem := fb[i].Remaining(w, rule.Algorithm, now)
		if i == 0 || rem < res.Remaining {
			res.Limit, res.Period, res.Remaining = rule.Windows[i].Limit, w.Period, rem
			res.Reset = fb[i].UntilReset(w, rule.Algorithm, now)
		}
	}
	if wait != 0 {
		res.Allowed, res.RetryAfter = false, finiteWait(wait, fb, rule, now)
		res.Reset = res.RetryAfter
		return res
	}
	cs.addHits(n, e.hitSec(now))
	e.degradedUnits.Add(n)
	cs.share.spentElsewhere(cs.ws, n, e.storeNow(now))
	if e.storeHealthy() && cs.kicked.CompareAndSwap(false, true) {
		e.enqueue(cs) // settling: pushed at the next tick, before others get credit
	}
	return res
}

// seedFallback starts the local windows of degraded mode from this
// replica's share of the last view plus its unpushed admits, and for a
// key with a static share never below what that share admitted in the
// window (all a key that never synced has to go on), so entering
// fail-static in mid-window does not hand out a fresh ⌈L/N⌉. cs.mu must
// be held.
func (cs *creditState) seedFallback(e *engine, rule *Rule, shares uint64, now int64) []WindowState {
	fb := make([]WindowState, len(rule.Windows))
	snow := e.storeNow(now)
	if view := cs.view.Load(); view != nil && rule.Algorithm != TokenBucket {
		// What this replica admitted that the view does not count:
		// pending, and pushed by a round still in flight (a store that
		// hangs: its outage began while the round waited).
		pending := uint64(max(cs.hits.Load(), 0) + cs.share.pendingUnits() + cs.flying)
		for i, w := range cs.ws {
			v := view.windows[i]
			v.Roll(w, snow)
			fb[i] = WindowState{Epoch: v.Epoch, Cur: v.Cur/shares + pending, Prev: v.Prev / shares}
		}
	}
	if cs.share != nil {
		// A view that counts this replica's share hits, pushed, splits
		// them over the N replicas: it would admit them again.
		w := cs.ws[0]
		epoch := snow / int64(w.Period)
		spent := cs.share.spentIn(w, snow) + uint64(max(cs.hits.Load(), 0))
		if rule.Algorithm == TokenBucket {
			// The local bucket of ⌈L/N⌉ starts short of what the share
			// admitted in the epoch.
			lw := rule.Windows[0]
			lw.Limit, lw.Burst = (lw.Limit+shares-1)/shares, (lw.Burst+shares-1)/shares
			fb[0].TAT = max(fb[0].TAT, satAddInt(now, spend(spent, lw)))
			return fb
		}
		if fb[0] == (WindowState{}) { // no view
			fb[0].Epoch = epoch
		}
		if fb[0].Epoch == epoch {
			fb[0].Cur = max(fb[0].Cur, spent)
		}
	}
	return fb
}
