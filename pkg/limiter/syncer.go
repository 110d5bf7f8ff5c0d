package limiter

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Engine timing. A replica heartbeats every heartbeatEvery and its lease
// lasts lease; N counts the replicas whose lease is live.
const (
	heartbeatEvery = time.Second
	startupBeat    = 50 * time.Millisecond // heartbeat period in a replica's first second
	// contendedBeat is the least time between heartbeats asked for by a
	// key that waits for other replicas' shares (engine.beatSoon).
	contendedBeat = 100 * time.Millisecond
	lease         = 3 * time.Second
	quietInterval = time.Second // sync period of a quiet key
	roundTimeout  = time.Second // bound on one background round trip
	// shutdownTimeout bounds the final push: every key at once, on a
	// store that may be busy, well within the 30 s Kubernetes gives a
	// process told to stop by default.
	shutdownTimeout = 5 * time.Second
	tick            = 10 * time.Millisecond
	// contentionEvery is how often the contention feed is polled when the
	// store cannot wait on it (FeedWaiter): a key another replica needs
	// is released within it and a round.
	contentionEvery = 5 * tick
	// contentionWait bounds how long past its StoreTimeout a request
	// waits: for other replicas to release their shares of its key and
	// hand back their credit (a feed read, their round and the key's
	// next one, with room to spare), or for a late round of a store
	// usually fast (a collection, a descheduled process: a busy moment).
	// A request denied when it runs out is a key under its limit denied
	// if the units were on their way: on 4 replicas of a 2-core machine,
	// 90 ms left 7–183 such answers in 10 s of workload B of
	// scripts/many-keys.sh, 180 ms 0–1 (BENCHMARKS.md). With the default
	// StoreTimeout the wait ends within 190 ms, inside the 200 ms the
	// examples give Envoy, whose timeout for the rate limit service must
	// exceed StoreTimeout + contentionWait.
	contentionWait = 18 * tick
	// lateRoundWait bounds how long past its StoreTimeout a request
	// waits for a round of a store that is not usually fast: two round
	// trips of a store 60 ms away, not of one 80 ms away. With 50 ms
	// (a store 25 ms away), a sliding window's or a token bucket's keys
	// between a quarter and half of their limit, whose waiters need the
	// other replicas' releases, were denied on a store 50 ms late
	// (TestSimSlowStoreSliding).
	lateRoundWait = 12 * tick
)

// enqueue lists a key that asked for a sync, so the next round finds it
// without scanning every key.
func (e *engine) enqueue(cs *creditState) {
	e.pendingMu.Lock()
	e.pending = append(e.pending, cs)
	e.pendingMu.Unlock()
}

// fullScanEvery bounds how often a round looks at every key (for keys due
// by time); in between, rounds take only the keys that asked.
const fullScanEvery = 100 * time.Millisecond

// kick wakes the sync loop for an early round.
func (e *engine) kick() {
	select {
	case e.kickCh <- struct{}{}:
	default:
	}
}

// storeNow estimates the store clock (µs) at local instant now (ns).
func (e *engine) storeNow(now int64) int64 { return now/1000 + e.offset.Load() }

// hitSec is the second of the store clock a hit admitted at local
// instant now is counted in (credit_hits.go).
func (e *engine) hitSec(now int64) int64 { return e.storeNow(now) / 1_000_000 }

// runSync is the credit engine's loops: sync rounds when keys are due or
// a request asks (runRounds), and beside them the upkeep of heartbeats,
// the contention poll, concurrency slot leases and health (runUpkeep),
// each loop on its own goroutine, so that a round a request waits for
// never queues behind a heartbeat or a slot round; then, once both have
// stopped, the final push.
func (e *engine) runSync(ctx context.Context) {
	e.started.Store(e.now())
	e.heartbeat(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.runRounds(ctx) })
	wg.Go(func() { e.runUpkeep(ctx) })
	wg.Wait()
	e.shutdown()
}

// runRounds runs a sync round every tick and whenever a request asks,
// one at a time: a round on its own loop never waits for a heartbeat or a
// slot round. Rounds that overlapped, so that a request asking while one
// is in flight got its own at once, answered near-timeout stores faster
// in the simulation (TestSimSkewedRoundsLongTail: 25–38 key-seconds
// denied under the limit, not 80) but not measurably on workload B of
// scripts/many-keys.sh (0–17 keys, one at a time 0–12); they are not
// used. The window one over its limit once blamed on them came from the
// sweep (TestSweepKeepsActiveShareKey).
func (e *engine) runRounds(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.kickCh:
		}
		e.syncRound(ctx)
	}
}

// runUpkeep heartbeats, polls the contention feed where the store cannot
// push it, renews slot leases and follows the store's health, every tick.
func (e *engine) runUpkeep(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	started := e.now()
	lastBeat, lastRead := started, started
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := e.now()
		every := int64(heartbeatEvery)
		if now-started < int64(heartbeatEvery) {
			// Replicas that start together see each other only from
			// their second heartbeat; until then N is too small and the
			// first keys' credit too generous. And a founding epoch's
			// founders are known from a copy of the registry taken
			// foundingSpan after the first joined.
			every = int64(startupBeat)
		}
		// A store back from an outage is heard from at once: the registry
		// it keeps may be new (a store back empty), and the sharers a
		// round counts come from the copy heard last.
		// So is a registry that may have changed under a contended key: a
		// share it waits for may be a replica's that has left.
		soon := e.beatSoon.Load() && now-lastBeat >= int64(contendedBeat)
		if now-lastBeat >= every || e.backAt.Load() > lastBeat || soon {
			e.beatSoon.Store(false)
			e.heartbeat(ctx)
			lastBeat = now
		}
		if now-lastRead >= int64(contentionEvery) && !e.feedPushed.Load() {
			e.readContention(ctx)
			lastRead = now
		}
		e.slotRound(ctx)
		e.watchHealth(e.now())
	}
}

// heartbeat renews this replica's lease and learns N and the clock offset.
func (e *engine) heartbeat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	sent := e.now()
	start := time.Now()
	m, err := e.store.Heartbeat(ctx, e.replica, lease)
	e.observe(ctx, callHeartbeat, start, err)
	if err != nil {
		e.storeFailed(err)
		return
	}
	e.learnRoundTrip(time.Since(start))
	e.learnClock(sent, m.Now)
	if n := int64(max(m.Replicas, 1)); e.replicas.Swap(n) != n || e.replicasSince.Load() == 0 {
		e.replicasSince.Store(e.now())
	}
	e.members.Store(&memberView{m: m, at: e.now()})
	if m.Joined == 0 {
		m.Joined = m.Now // a store that does not say
	}
	if e.joined.Swap(m.Joined) != m.Joined {
		e.decl.Store(nil) // the registry dropped its shrink with its lease
		e.dropShares()    // joined again: its shares are reckoned again, from the incarnations the registry counts
	}
	e.declareShrink(ctx, m, e.now())
}

// learnRoundTrip smooths the duration of store round trips, sync rounds
// and heartbeats (EWMA, 1/8, from the first).
func (e *engine) learnRoundTrip(d time.Duration) {
	old := e.roundTrip.Load()
	if old == 0 {
		old = int64(d)
	}
	e.roundTrip.Store(old + (int64(d)-old)/8)
}

// SyncRound runs one round now: every key that is due, asked for, or half
// due rides along, in one store call. The sync loop calls it; simulations
// may too. Without a store it does nothing.
func (l *Limiter) SyncRound(ctx context.Context) {
	if l.eng != nil {
		l.eng.syncRound(ctx)
	}
}

// syncRound runs one round now (SyncRound): the keys that asked and, on
// a full scan, every key that is due.
func (e *engine) syncRound(ctx context.Context) {
	now := e.now()
	released := e.releases(now)
	due := e.collectDue(now, e.fullScanDue(now))
	if len(due) == 0 && len(released) == 0 {
		return
	}
	b := roundBufs.Get().(*roundBuf)
	defer b.put()
	items := slices.Grow(b.items[:0], len(due)+len(released))[:len(due)]
	for i, cs := range due {
		items[i] = e.prepare(cs, now)
	}
	items = append(items, released...)
	out := slices.Grow(b.out[:0], len(items))[:len(items)]
	b.items, b.out = items, out
	rctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	e.stats.rounds.Add(1)
	start := time.Now()
	err := e.store.Sync(rctx, e.replica, items, out)
	e.observe(ctx, callSync, start, err)
	e.learnRoundTrip(time.Since(start))
	if err != nil {
		e.storeFailed(err)
		for i, cs := range due {
			cs.abort(items[i])
		}
		e.unrelease(released)
		return
	}
	e.learnClock(now, out[0].Now)
	for i, cs := range due {
		e.apply(cs, &out[i])
	}
}

// roundBuf holds a round's items and results for the rounds after it
// (Store.Sync keeps neither): made anew, they were some 400 bytes a key
// of every round.
type roundBuf struct {
	items []SyncItem
	out   []SyncResult
}

var roundBufs = sync.Pool{New: func() any { return new(roundBuf) }}

// roundBufMax is the most items a round's buffers keep for the next: a
// burst's round of many keys does not hold its memory for good.
const roundBufMax = 4096

// put clears b and returns it to the pool, unless a burst made it large.
func (b *roundBuf) put() {
	if cap(b.items) > roundBufMax {
		return
	}
	clear(b.items)
	clear(b.out)
	b.items, b.out = b.items[:0], b.out[:0]
	roundBufs.Put(b)
}

// shutdown pushes every hit and hands every reservation back, then leaves
// the registry. It leaves (Store.Leave) only once the store has every
// share hit: the store then counts no unreported share of this replica
// (SyncItem.Gone). Without the push, or with share hits pushed ahead into
// the next epoch (an admit within the clock's uncertainty of a boundary,
// which the next epoch counts this replica a sharer of only while its
// lease runs), its lease just ends, as a crashed replica's does.
func (e *engine) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	e.closing.Store(true)
	var items []SyncItem
	var keys []string
	now := e.now()
	snow := e.storeNow(now)
	clean := true
	e.keys.eachCredit(func(_ *entry, cs *creditState) {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		it := SyncItem{Key: cs.key, Algorithm: cs.rule.Algorithm, Windows: cs.rule.Windows,
			Replicas: int(e.replicas.Load()), Lease: lease}
		it.Hits = cs.pushHits(cs.takeHits(snow), snow)
		cs.share.takeShare(&it, snow, cs.ws[0], false, snow/int64(cs.ws[0].Period))
		for _, h := range it.ShareHits {
			if p := int64(cs.ws[0].Period); h.At/p > snow/p {
				clean = false
			}
		}
		items = append(items, it)
		keys = append(keys, cs.key)
	})
	if len(items) > 0 {
		if err := e.store.Sync(ctx, e.replica, items, make([]SyncResult, len(items))); err != nil {
			e.log.Warn("final push failed", "err", err, "keys", len(items))
			clean = false
		}
	}
	// Leave before the release of the reservations: the others wait for
	// the shares this replica held, not for its credit, which lapses
	// within a lease anyway.
	if clean {
		if err := e.store.Leave(ctx, e.replica); err != nil {
			e.log.Warn("leaving the registry failed", "err", err)
		}
	}
	if slotKeys := e.slotKeys(); len(keys) > 0 || len(slotKeys) > 0 {
		if err := e.store.Release(ctx, e.replica, keys, slotKeys); err != nil {
			e.log.Warn("releasing reservations failed", "err", err)
		}
	}
}

// activate lists cs among the keys scanDue visits.
func (e *engine) activate(cs *creditState) {
	if cs.active.Swap(true) {
		return
	}
	e.activeMu.Lock()
	if !cs.listed {
		cs.listed = true
		e.active = append(e.active, cs)
	}
	e.activeMu.Unlock()
}

// deactivate marks cs to leave the active keys at the next scan.
func (e *engine) deactivate(cs *creditState) { cs.active.Store(false) }

// eachActive calls fn for every active key, dropping those no longer
// active or swept. fn may take the key's lock but not activeMu.
func (e *engine) eachActive(fn func(cs *creditState)) {
	e.activeMu.Lock()
	keys := e.active[:0:0]
	keep := e.active[:0]
	for _, cs := range e.active {
		if cs.active.Load() && !cs.orphan.Load() {
			keep = append(keep, cs)
		} else {
			cs.listed = false
		}
	}
	clear(e.active[len(keep):])
	e.active = keep
	keys = append(keys, keep...)
	e.activeMu.Unlock()
	for _, cs := range keys {
		fn(cs)
	}
}
