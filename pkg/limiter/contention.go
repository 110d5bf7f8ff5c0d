package limiter

import (
	"context"
	"time"
)

// The contention feed, the replica's side: reading the keys other
// replicas need the shares of, and releasing this replica's share of
// them (see the package doc and credit_share.go).
//
// Contention. When requests on one replica wait for budget that other
// replicas hold, as shares or as credit, the store publishes the key
// (Store.Contention); every replica that reads it (each tick) releases
// the rest of its share of the key in that epoch, pushing its share hits
// with the release, and hands back its unused credit: a key at its limit
// is shared by credit alone, whose last units go to the requests that
// wait for them. Those requests wait past their StoreTimeout for it, up
// to contentionWait, while the store answers fast enough for a release
// and a round to fit in that time; a request is denied at once only when
// the window is full but for what others hold and use. A key still at
// its limit in the next epoch is published again. Only a replica that
// holds a share of an epoch releases it, the store counting every record
// as one of the epoch's sharers; but a replica that spent from a share
// of the epoch and no longer holds one (a store back empty keeps a new
// registry, which counts no sharer of the epoch under way) releases it
// unasked, or the store would count the rest of its record as held.

// maxContended bounds the contended keys a replica remembers through an
// epoch (or the keys it holds, WithMaxKeys, if fewer). A scale-out's
// newcomers publish every key they see in the epoch, and a key beyond
// the bound is neither shrunk nor released, its newcomers' requests
// denied: 4 096 did that to a scale-out over 5 000 keys. A tick visits
// only the entries read since the last (contWork.due); all are walked
// once a second or when the registry changes (contWalkEvery).
const maxContended = 1 << 20

// contWalkEvery is how often releases walks every contended key, apart
// from a new copy of the registry or replica count, which makes it walk
// them at once: what it could not do for a key (no copy of the registry
// to count the sharers from) is done then, and the keys of epochs over
// are forgotten.
const contWalkEvery = time.Second

// contention is a key another replica needs the shares of in an epoch.
type contention struct {
	rule     *Rule // as published: algorithm and windows
	epoch    int64 // the epoch it was read in (store clock)
	released int64 // the last epoch released for a key this replica does not hold
	fresh    bool  // read again since the key last handed back its credit
	// shrink: published to shrink the shares to a share at that live
	// count (Contended.Shrink, the most read); plain: to release them.
	// Both of epoch.
	shrink int
	plain  bool
	// shrunk is the live count this replica shrank its share of epoch
	// to, by an item of its own, for a key it does not hold; zero: none.
	shrunk int
	queued bool // in contWork.due
}

// contWork is the engine's walk of the contended keys (contMu guards it):
// the keys read since the last tick, and what the last walk of all of
// them saw.
type contWork struct {
	due      []string // keys whose entries changed since the last tick
	view     *memberView
	replicas int64
	walked   int64 // local ns of the last walk of every entry
	visits   int64 // entries visited, all ticks (tests)
	rules    map[contRule]*Rule
}

// contRule identifies a published rule: one fixed or sliding window.
type contRule struct {
	alg    Algorithm
	limit  uint64
	period time.Duration
}

// queue puts key's entry x in the next tick's walk. e.contMu must be held.
func (e *engine) queue(key string, x *contention) {
	if !x.queued {
		x.queued = true
		e.work.due = append(e.work.due, key)
	}
}

// contRuleOf is the one Rule of the published window w of algorithm a,
// shared by every entry of it. e.contMu must be held.
func (e *engine) contRuleOf(a Algorithm, w Window) *Rule {
	k := contRule{a, w.Limit, w.Period}
	if r := e.work.rules[k]; r != nil {
		return r
	}
	if e.work.rules == nil || len(e.work.rules) >= maxRuleWindows {
		e.work.rules = make(map[contRule]*Rule)
	}
	r := &Rule{Algorithm: a, Windows: []Window{w}}
	e.work.rules[k] = r
	return r
}

// readContention reads the keys published since the last read; this
// replica releases its share of each in the epoch it was published in.
func (e *engine) readContention(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	cs, next, err := e.store.Contention(ctx, e.replica, e.contCursor)
	if err != nil {
		// Heartbeats and rounds say whether the store is reachable; a
		// missed read delays releases by a read.
		e.log.Debug("reading contention failed", "err", err)
		return
	}
	e.contCursor = next
	e.contendAll(cs)
}

// feedWait is how long one wait on the contention feed lasts at most.
const feedWait = time.Second

// followFeed reads the contention feed as it is published, until ctx
// ends; the keys this replica holds are released in the next round, at
// the next tick. (Not at once: a round of a replica whose own requests
// wait would publish again, and the replicas would wake each other
// with no end.) A failed read is tried again after a tick: the rounds
// and heartbeats say whether the store is reachable.
func (e *engine) followFeed(ctx context.Context, fw FeedWaiter) {
	cursor := ""
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, feedWait+roundTimeout)
		cs, next, err := fw.WaitContention(rctx, e.replica, cursor, feedWait)
		cancel()
		if err != nil {
			e.log.Debug("waiting on the contention feed failed", "err", err)
			t := time.NewTimer(tick)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		cursor = next
		e.contendAll(cs)
	}
}

// contendAll notes the keys of cs as contended in the epoch they were
// published in (or, for an entry that does not say, the one this replica
// reckons now). A key contended just before a boundary and read after it
// is not released: the new epoch's shares are not the ones its waiter
// needed, and giving them up would send this replica's own requests of
// the new window to the store.
func (e *engine) contendAll(cs []Contended) {
	snow := e.storeNow(e.now())
	shrink := false
	for _, c := range cs {
		if c.Full {
			e.fullRead(c, snow)
			continue
		}
		if len(c.Windows) == 1 && shareableWindow(c.Algorithm, c.Windows[0]) && c.Windows[0].Period >= time.Microsecond {
			at := snow
			if c.At > 0 {
				at = c.At
			}
			shrink = e.contend(c, at/int64(c.Windows[0].Period/time.Microsecond), c.Shrink) || shrink
		}
	}
	if shrink {
		// A newcomer's requests wait for the shrink: the round that
		// says it goes now, not at the next tick. A shrink publishes
		// nothing, so rounds kicked so do not wake each other.
		e.kick()
	}
}

// contend notes the publication c of epoch, and reports whether it asks
// to shrink the shares to a smaller share than asked before.
func (e *engine) contend(c Contended, epoch int64, shrink int) bool {
	e.contMu.Lock()
	defer e.contMu.Unlock()
	x := e.contended[c.Key]
	if x == nil {
		if len(e.contended) >= maxContended || int64(len(e.contended)) >= e.keys.max {
			return false
		}
		x = &contention{rule: e.contRuleOf(c.Algorithm, c.Windows[0])}
		e.contended[c.Key] = x
		e.contN.Store(int64(len(e.contended)))
	}
	e.queue(c.Key, x)
	switch {
	case epoch > x.epoch:
		x.epoch, x.shrink, x.plain, x.shrunk = epoch, 0, false, 0
	case epoch < x.epoch:
		x.fresh = true // its credit is handed back, not the shares of now
		return false
	}
	x.fresh = true
	if shrink <= 0 {
		x.plain = true
		return false
	}
	more := shrink > x.shrink && !x.plain
	x.shrink = max(x.shrink, shrink)
	return more
}

// releases asks every contended key this replica holds to release its
// share of the epoch it was published in at its next sync, if this
// replica holds a share of it or the key a loan of it, or, published to
// shrink the shares and never to release them, to shrink its share to a
// share at the live count (credit_shrink.go); and to hand back its
// unused credit once for each time the key is read. It returns the
// release and shrink items of the contended keys it does not hold. Keys
// are forgotten once that epoch is over. A tick visits the keys read
// since the last; a new copy of the registry or a second gone makes it
// visit them all.
func (e *engine) releases(now int64) []SyncItem {
	e.contMu.Lock()
	defer e.contMu.Unlock()
	if len(e.contended) == 0 {
		e.work.due = e.work.due[:0]
		return nil
	}
	snow := e.storeNow(now)
	var items []SyncItem
	var ahead []string // published in an epoch this replica's clock has not reached
	visit := func(key string, x *contention) {
		x.queued = false
		e.work.visits++
		if e.releaseOne(key, x, snow, now, &items) {
			ahead = append(ahead, key)
		}
	}
	defer func() {
		// Visited again at the next tick, as the epoch may have begun:
		// a publication stamped by a clock a little ahead, just before
		// a boundary, waited for the walk of every key a second later,
		// its epoch over, and its waiters were denied.
		for _, key := range ahead {
			e.queue(key, e.contended[key])
		}
	}()
	if w := &e.work; w.view != e.members.Load() || w.replicas != e.replicas.Load() || now-w.walked >= int64(contWalkEvery) {
		w.view, w.replicas, w.walked = e.members.Load(), e.replicas.Load(), now
		for key, x := range e.contended {
			visit(key, x)
		}
		w.due = w.due[:0]
		return items
	}
	due := e.work.due
	e.work.due = nil
	for _, key := range due {
		if x := e.contended[key]; x != nil && x.queued {
			visit(key, x)
		}
	}
	e.work.due = due[:0]
	return items
}

// releaseOne does for the contended key x what releases says and
// appends to items the item to send for a key this replica does not
// hold, if one. It reports a key published in an epoch this replica's
// clock has not reached, to visit again. e.contMu must be held.
func (e *engine) releaseOne(key string, x *contention, snow, now int64, items *[]SyncItem) (ahead bool) {
	p := int64(x.rule.Windows[0].Period / time.Microsecond)
	epoch := snow / p
	if epoch != x.epoch {
		// Kept through the last epoch a bare release gave up (a sliding
		// window's next): a key made then takes the release (initShare).
		if epoch > x.epoch && epoch > x.released {
			delete(e.contended, key)
			e.contN.Store(int64(len(e.contended)))
		}
		return epoch < x.epoch
	}
	n := max(int(e.replicas.Load()), x.shrink)
	// The last epoch a release gives up: for a sliding window or a token
	// bucket, the next one too if this replica holds a share of it (its
	// sharers are those of this epoch, shareBase; share_sliding.go).
	through := epoch
	if aheadShares(x.rule.Algorithm) && e.sharers(e.shareBase(x.rule.Algorithm, (epoch+1)*p, p), p, now) != 0 {
		through = epoch + 1
	}
	if x.released >= through || !x.plain && !x.fresh && x.shrunk >= n {
		// Released, or shrunk by an item of its own to n: a key made
		// since started so (initShare). Published again, it still hands
		// back its credit and pushes what it spent of it (yieldHeld).
		if x.fresh {
			e.yieldHeld(key, x)
			x.fresh = false
		}
		return false
	}
	base := e.shareBase(x.rule.Algorithm, epoch*p, p)
	sharer := e.sharers(base, p, now) != 0
	if ent := e.keys.getString(key); ent != nil {
		if cs := ent.cs.Load(); cs != nil && cs.share != nil && (sharer || through > epoch || cs.share.lentOf(epoch)) {
			var asked bool
			switch {
			case x.plain:
				asked = cs.share.askRelease(through, epoch)
			case x.shrink > 0 && sharer:
				asked = e.askShrink(cs, epoch, n, x.fresh, now)
			}
			if x.fresh && yieldable(cs) {
				e.yieldHeld(key, x)
			} else if asked {
				e.enqueue(cs)
			}
			x.fresh = false
			return false
		}
	}
	x.fresh = false // no credit to hand back: the key is not held
	if !sharer && through == epoch {
		return false // no share or loan of this epoch to release
	}
	e.bareItem(key, x, epoch, through, p, n, snow, now, items)
	return false
}

// yieldable reports a key that holds credit, or hits of spent credit not
// yet pushed. A sliding window's and a token bucket's yield too, though
// their credit is handed out a unit at a time near the limit
// (dryGetsOne) and this replica's next request may then wait: kept to
// the holder's next sync, the waiters of the replica that published the
// key, which count on it coming back (keptElsewhere), polled the store
// every few milliseconds until it did or their wait ran out (190 ms).
// Denied at once instead, they were denied units the holder then did
// not use.
func yieldable(cs *creditState) bool {
	return cs.credit.Load() > 0 || cs.hits.Load() > 0
}

// yieldHeld has the next round of key, published contended again, hand
// back its unused credit and push the hits of the credit it spent: the
// waiters on the other replicas then see what is free, or that the
// window is full, rather than poll, round after round, on a reservation
// this replica has spent and not reported (its next regular sync may be
// a busy interval away). e.contMu must be held.
func (e *engine) yieldHeld(key string, x *contention) {
	ent := e.keys.getString(key)
	if ent == nil {
		return
	}
	if cs := ent.cs.Load(); cs != nil && yieldable(cs) {
		if cs.credit.Load() > 0 {
			cs.yield.Store(true)
		}
		e.enqueue(cs)
	}
}

// bareItem appends to items the release or the shrink of the share of
// epoch of a contended key x this replica, a sharer of the epoch, does
// not hold, once: a release if published to release, a shrink to a
// share at the n live if only to shrink and n is more than the epoch's
// sharers (or than a shrink made before). e.contMu must be held.
func (e *engine) bareItem(key string, x *contention, epoch, through, p int64, n int, snow, now int64, items *[]SyncItem) {
	switch {
	case x.plain:
		x.released = through
		// One that holds no share of epoch gives the next one's up ahead.
		ahead := through > epoch && e.sharers(e.shareBase(x.rule.Algorithm, epoch*p, p), p, now) == 0
		*items = append(*items, SyncItem{Key: key, Algorithm: x.rule.Algorithm, Windows: x.rule.Windows,
			Replicas: n, Lease: lease, Release: max(snow, x.released*p), ReleaseAhead: ahead,
			ReleasePrev: e.pushedPrev(x.rule.Algorithm, e.members.Load(), snow, p, now)})
	case x.shrink > 0 && n > x.shrunk:
		mv := e.members.Load()
		a := x.rule.Algorithm
		base := mv.shareBase(a, epoch*p, p)
		k := mv.sharers(base, p)
		if k <= 0 || n <= k || !mv.fresh(now) {
			return
		}
		x.shrunk = n
		it := SyncItem{Key: key, Algorithm: a, Windows: x.rule.Windows,
			Replicas: n, Lease: lease, Shrink: n, ShareEpoch: epoch, Sharers: k,
			SharersNext: mv.sharers(mv.shareBase(a, (epoch+1)*p, p), p), Gone: mv.gone(base, p)}
		it.Shrunk = mv.shrunk(a, base, epoch*p, p)
		if a != FixedWindow {
			prev := mv.shareBase(a, (epoch-1)*p, p)
			it.SharersPrev, it.ShrunkPrev = mv.sharers(prev, p), mv.shrunk(a, prev, (epoch-1)*p, p)
		}
		*items = append(*items, it)
	}
}

// unrelease forgets the releases and shrinks of a failed round, to send
// them again.
func (e *engine) unrelease(items []SyncItem) {
	e.contMu.Lock()
	defer e.contMu.Unlock()
	for _, it := range items {
		if x := e.contended[it.Key]; x != nil {
			e.queue(it.Key, x) // sent again at the next tick
			if it.Release != 0 {
				x.released = 0
			}
			if it.Shrink != 0 {
				x.shrunk = 0
			}
		}
	}
}

// askRelease asks for the release of the share through epoch unless it
// is released or asked for already, or, through the current epoch ep
// alone, spent and pushed whole: releasing it would free nothing and
// cost a round (a key over its limit, whose replicas spend their shares
// first thing each epoch, synced once a replica for each publication).
// It reports whether it asked. The sync that takes it releases through
// the epoch it reckons (releaseUpTo).
func (sh *shareState) askRelease(epoch, ep int64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.released >= epoch || sh.has(flagRelease) || epoch == ep && sh.spentWhole(ep) {
		return false
	}
	sh.set(flagRelease)
	return true
}

// spentWhole reports a share of epoch ep, not a loan, spent whole and
// pushed. sh.mu must be held.
func (sh *shareState) spentWhole(ep int64) bool {
	return sh.epoch == ep && sh.size > 0 && !sh.has(flagLent) && sh.state.Epoch == ep &&
		sh.state.Cur >= sh.size && sh.pendingN.Load() == 0
}
