// Package limiter decides whether a unit of work for a key may proceed under
// a Rule of one or more windows (fixed window, sliding window or token
// bucket), and tells the caller what to put in rate-limit headers. It also
// caps concurrent holders per key (Acquire/Release).
//
// Model. State is kept per key; every window of the key's Rule must admit a
// request for it to be admitted. The window maths are pure functions of
// (state, now, n) on WindowState; a Limiter reads its Clock once per call
// and passes the instant down. Windows are aligned to the Unix epoch. A
// denied request charges nothing unless its Rule sets AlwaysCharge, and a
// batch of requests passed to one Decide call is admitted or denied as a
// whole.
//
// Two engines. Built with New alone, a Limiter is local-only: each process
// enforces every Rule in full. Built WithStore, rules whose LocalAllowance
// is below 1 are shared by every replica using the same Store (Redis, or
// the in-process reference store): a replica admits from local credit, an
// atomic add and a compare with no lock and no I/O, and a background loop
// (Run) syncs due keys with the store in one batched round trip, pushing
// the hits admitted and asking for more credit. Hits are charged to the
// window they were admitted in: the hot path notes the second of the
// store clock of a key's latest hit, and a round stamps the unpushed
// hits of an earlier second in that second (credit_hits.go), so a round
// that comes after a boundary does not count them against the next
// window; a hit of the earlier second counted just after the first of
// the next may still go there, never the other way round. The store grants credit
// only from the budget no replica has reserved (KeyRecord.Sync), so while
// the store is healthy the replicas together never admit more than the
// limit. A request that finds no credit waits for a round at most the
// rule's StoreTimeout; while the store answers, on for its round, within
// StoreTimeout + 180 ms on a store usually fast (its fastest recent round
// trips well within StoreTimeout: a late round is a busy moment), else
// for two of its usual round trips within StoreTimeout + 120 ms (its round
// may have waited for the one in flight); past it, it is admitted from
// the quarter of the credit the hot path holds back for late rounds
// (still covered by the reservation), or denied. A key starts with no
// credit. The round a request waits for on a quiet key without a static
// share (not busy, its rate asking for a few units at most) sends the
// waiting units as a probe and asks for no credit: the store charges, at
// its own instant, as many as fit beside every reservation and says how
// many, and those are admitted (credit_probe.go): one key sync a
// request, as a per-request counter. A window is never charged with
// units nobody was granted: a refund frees units of the window it was
// stamped in (WindowState.RefundAt). Credit is asked for at half spent, sized from
// the key's rate; once over half of a window is used or reserved, a
// replica holds credit only to a fixed window's end (a sliding window's
// next sync) and hands the rest back, and the store gives a replica that
// runs dry one unit of a budget too small to split (of a sliding window,
// only while its slack holds a unit for each replica and no request
// waits or is denied), so at 0.9× of a limit almost no request waits.
// When the store has been unreachable for the rule's CacheTTL, each
// replica enforces ⌈L/N⌉ (or admits all, FailOpen) and pushes its admits
// on recovery, each charged to the window it was made in (a window after
// the outage is not charged for it). A key decided so keeps its ⌈L/N⌉
// until the end of its window that holds the store's return plus
// CacheTTL (at most a minute more), asking for no credit: by then every
// replica has pushed its degraded admits, which credit granted earlier
// would not have counted. Replicas come back apart (a call in flight
// fails at its deadline), and one back in the next window settles a
// window longer than the others: its rounds meanwhile have the store
// hold its ⌈L/N⌉ as its reservation (SyncItem.Hold), so the credit the
// others ask for leaves room for what it admits on its own. A replica that has not reached the store since
// it started counts CacheTTL from its start and N as 1 (it has heard of no
// other); once the store answers, a key still settling enforces ⌈L/N⌉ of
// the N it hears then, if that is more.
// Before its CacheTTL has passed, a store that hangs is a slow one: a
// request beyond what the replica holds waits its StoreTimeout and is
// denied, as one late round may be all it is, and admitting it on the
// last view could pass the limit while the others are granted the rest.
// After the store answers again, a replica heartbeats at once, and
// releases unasked the share of an epoch it spent from and no longer
// holds: a store back empty keeps a new registry, in which no replica
// holds a share of the window under way.
//
// Static shares. A rule of one fixed window gives each of the n replicas
// that may hold a share of the window's current epoch a static share
// ⌊L/n⌋ (times local_allowance), which it admits before any credit, under
// the key's own lock, with no round trip: a key far below its limit never
// waits for the store, not even for its first request. The store counts
// every share it has not been told about as reserved (KeyRecord.Sync), so
// credit beyond the shares stays exact. Share hits are pushed only when
// the key syncs for another reason and at shutdown. A crash loses them
// from the store's counts, not from its budget: the crashed replica's
// share (or loan, below) stays reserved until its window ends, so the
// limit holds across a rolling restart. A replica that stops pushes its share hits, releases
// the shares it spent from, and only once the store has them leaves the
// registry (Store.Leave); the store then counts no share of it that no
// record reports (SyncItem.Gone), so a deployment of one replica,
// replaced in the middle of a window, does not deny its successor the
// keys it never saw. One whose last push failed does not leave: it is
// counted as a crashed one. A replica whose copy of the registry is
// older than a lease less a heartbeat (its first heartbeats failed)
// cannot count the sharers as the others do: it holds no share, and the
// store grants its rounds nothing of a rule with shares until a
// heartbeat succeeds. n counts the replicas that joined the registry a
// lease before the epoch began and were live when it began
// (Membership.Sharers): every replica counts the same n, a newcomer holds
// no share of an epoch that began less than a lease after it joined, and
// a replica that left stays counted for the epochs it was live in, so no
// share grows within an epoch. A newcomer (or a founding epoch's late
// joiner, below) borrows a share of such an epoch instead, key by key,
// in the round its key's first request waits for (SyncItem.Borrow): the
// store lends one out of the budget no reservation or share holds (a
// replica that left, by Leave, holds none of the keys it never
// reported), only the borrower's part of it once a live replica
// released its share of the key, and counts it as held, like a share,
// until reported or released; it lapses with its epoch (credit_loan.go). After a rolling update, the new
// replicas' later requests of a key are decided locally, not a round
// each until the first epoch they are sharers of (for an hour or a day
// rule, hours). An epoch of a window of 10 s or more that
// no replica joined a lease before (a fresh deployment's first minute)
// is founding: nobody wrote to it before the first replica joined since,
// and the replicas that joined within foundingSpan (100 ms) of that one,
// its founders, hold half of it between them, ⌊L/2⌋/m each (registry.go),
// so a key's first request is decided locally even then; the other half
// is credit's. A founder's request in the moment before it knows the
// founders waits for them, at most StoreTimeout + contentionWait. When
// requests on one replica wait for budget other replicas hold as shares,
// the store publishes the key with the instant it found it contended;
// the others release their share of that instant's epoch (not of a later
// one they read it in), epoch by epoch while it stays contended, and the
// key is shared by credit alone. A newcomer's borrow that finds nothing
// free while the live replicas outnumber the epoch's sharers (a
// scale-out) is published to shrink instead: the sharers shrink their
// shares to a share at the live count, keeping what they spent, the
// newcomers borrow what that frees, and everyone goes on deciding
// locally (credit_shrink.go); only a key still contended once every
// sharer has shrunk or left is released. A sharer that died without
// leaving never shrinks: while more replicas are live than the epoch's
// sharers, such a key is not released in that epoch, and a newcomer gets
// what the others' shrinks freed. Key by key that is four syncs or so
// for a newcomer's first request of a key, so a sharer that hears of
// more live replicas than an epoch under way counts shrinks its shares
// of every key at once: it pushes the share hits of the keys it spent
// more of than a share at the live count, then declares the shrink in
// the registry (Store.Declare, Declaration); the newcomers name it in
// their syncs (SyncItem.Shrunk), the store counts those shares shrunk,
// and a newcomer's first request of a key borrows in one round
// (credit_declare.go). A rule of one sliding window has static shares
// too, spent epoch by epoch as a fixed window's, but the shares of an
// epoch hold half of the limit between them (ShareFraction), so that
// those of two epochs side by side fit in it; a replica holds one from
// the second epoch that begins a lease after it joined (the sharers of
// epoch e are those of e−1, shareBase), so the next epoch's sharers are
// known all through the current one. Beside a fixed window's sum, the
// store counts the shares of the epoch before, weighted as the window's
// own count, until their replicas say they pushed all of that epoch's
// hits (SyncItem.ReleasePrev, at a key's first sync of the epoch), and
// those of the next epoch, which the window counts whole
// at that epoch's start beside what this one admitted: a unit is granted
// only if it fits beside both. A busy key's replicas give their shares
// of the next epoch up ahead, and a key whose requests wait for them is
// published contended, so a key at its limit is shared by credit alone
// and a quiet one keeps its shares (share_sliding.go). After a
// scale-out its sharers shrink their shares as a fixed window's do, by
// one declaration, in the epoch of the scale-out and in the next too,
// whose sharers are still the old ones (Declaration.coversOf); a token
// bucket's the same. The store counts the shrinks of the epoch before
// beside this epoch's, declared (SyncItem.ShrunkPrev) or of a key
// (ShareRecord.ShrinkPrevN), and its loans (LentPrev): the epoch
// before's shares still count, weighted, and counted whole they left no
// room for the newcomers' loans. A newcomer's borrow that finds no whole
// share free (a shrink not declared yet) publishes the key to shrink,
// its request probed or not, and the next borrows one. While a replica
// of a version that does not count them may be live (Member.Ahead),
// a sliding window has none. A token bucket whose capacity is its rate
// per period has shares of an epoch of that period as a sliding window
// does, half of the rate between them; the store counts beside them the
// next epoch's shares against what the bucket will hold when it begins,
// and the shares of the epoch before that no replica reported as spent
// as this epoch began, until their replicas say they pushed all of that
// epoch's hits (SyncItem.ReleasePrev); what is still unreported the
// epoch after is charged to the bucket (share_bucket.go). A crash loses
// none of a share's hits; a bucket's credit carried into an epoch lapses
// in its middle, and a key in use renews it before then. A bucket of
// another capacity is the bucket of its capacity refilled whole every
// capacity·T, T its refill interval (the same arrival-time arithmetic):
// the engine runs it as that one, whose epochs of capacity·T hold its
// shares, if they last from a second to a day (bucket_epoch.go). Rules
// of several windows are shared by credit alone.
//
// A store that loses its state (Redis restarted without persistence, or
// failed over to a copy that missed writes) gets the counts back from the
// replicas: every sync item carries the key's last view as a floor, and a
// static share's reported hits, which the store raises a record it lost
// (windows all zero) to before charging (WindowState.Raise); a record
// that holds counts is left alone, so a floor that predates a refund
// does not undo it. The first replica to sync a lost key restores it
// from its view; the others' floors then find it held. A replica that
// released its share of an epoch says so again with every sync of the
// key in that epoch, so a store that lost the release does not count the
// share as held for the rest of the epoch (TestSimWipeKeepsReleases). A window that lost its record
// admits at most its limit plus the credit the replicas held unspent at
// that instant, which the store may grant again before each holder syncs
// (TestSimStoreWipedMidWindow, TestRealtimeRedisWiped); without floors it
// admitted its limit over again.
//
// Retry-After. A denial carries the time until every window admits the
// request's units again; a retry at that instant is admitted unless other
// traffic spent the budget first. It never undershoots.
//
// Memory. Keys whose state has returned to "fresh" (their windows passed,
// their bucket refilled, no credit held; a key with a static share once
// the sync loop has let it go and two periods have passed since its last
// use, so no share is counted twice in an epoch) are evicted by Run, so
// memory is bounded by the keys active within their windows, not by
// every key seen;
// the table's maps are rebuilt for the keys left, so a spike's memory is
// returned. At most WithMaxKeys keys are held: at the bound a charge of a
// key not held is denied (ModeFull), never admitted untracked.
//
// Concurrency. A Limiter is safe for concurrent use. Keys live in a sharded
// table whose lookups take no lock once a key is published to its shard's
// read map; a local decision takes its key's own lock, a credit decision
// only atomics; no lock is shared by all keys. The zero Limiter is not
// usable; build one with New. Run owns the only goroutines a Limiter
// starts and returns once they have stopped.
//
// Layout. The Limiter owns the key table, the concurrency caps, the clock
// and the decision counters, and picks in one place (decideOne) whether a
// rule is decided locally or by the credit engine (engine.go), which owns
// the store, the registry's view, the store's clock offset, its health,
// the keys waiting for a round and the sync loop's metrics. A key's credit
// state has a lock-free half the hot path uses and a half its mutex
// guards (creditAtomics, creditLocked). Time: a local-only Limiter may be
// given a fake Clock; the credit engine reads the runtime's clock for its
// decisions, loops and timers alike, so its tests run in testing/synctest.
package limiter
