package limiter

import (
	"context"
	"errors"
	"time"
)

// Store is the shared state behind the credit engine: per key, the
// windows' counters and each replica's reservation; per concurrency key,
// each replica's held and reserved slots; and the replica registry. The
// Limiter calls it from its background loops only, never on the request
// path except for a waiter bounded by the rule's StoreTimeout; the loops
// call it concurrently (sync rounds beside heartbeats and slot rounds), so
// an implementation must be safe for concurrent use.
//
// Every method is one round trip and takes a batch, so a sync round costs
// one pipeline however many keys are due. All instants are the store's
// clock in Unix microseconds (Redis TIME), so replica clocks may disagree;
// window states in replies count time in the same unit. Implementations
// must apply the maths of KeyRecord.Sync and ConcRecord.Sync exactly: the
// in-process reference store (package memstore) is their executable
// specification, and a parity test holds the Redis store to it.
type Store interface {
	// Sync applies items for replica, writing one SyncResult per item.
	// It keeps neither slice once it returns: the engine reuses them.
	Sync(ctx context.Context, replica string, items []SyncItem, out []SyncResult) error
	// SyncSlots applies concurrency items for replica.
	SyncSlots(ctx context.Context, replica string, items []SlotItem, out []SlotResult) error
	// Heartbeat renews replica's lease and counts the live replicas.
	Heartbeat(ctx context.Context, replica string, lease time.Duration) (Membership, error)
	// Release drops replica's reservations on keys and its slots on
	// slotKeys (shutdown, idle hand-back).
	Release(ctx context.Context, replica string, keys, slotKeys []string) error
	// Declare records in the registry replica's shrink of its static
	// shares (Declaration; the zero value withdraws it): heartbeats list
	// it with the replica (Member.Shrink) until it withdraws it, joins
	// again after its lease ended, or is forgotten.
	Declare(ctx context.Context, replica string, d Declaration) error
	// Leave ends replica's lease now, after it pushed its last share hits
	// and released its shares: the registry remembers it for the windows
	// it may hold a share of (Membership.Members), marked as gone, so a
	// share of it that no record reports holds nothing (SyncItem.Gone).
	Leave(ctx context.Context, replica string) error
	// Contention returns the keys other replicas than replica published
	// since cursor (empty: from now on) and the cursor to read from next.
	Contention(ctx context.Context, replica, cursor string) ([]Contended, string, error)
}

// ErrStoreUnavailable wraps store errors that mean "cannot be reached".
var ErrStoreUnavailable = errors.New("store unavailable")

// Hit is a number of units admitted at an instant (store clock, Unix µs).
// A negative N is a refund.
type Hit struct {
	At int64
	N  int64
}

// SyncItem is one key's part of a sync round.
type SyncItem struct {
	Key       string
	Algorithm Algorithm
	Windows   []Window
	// Hits admitted since the last round, charged to the windows they were
	// admitted in. They are recorded even past the limit.
	Hits []Hit
	// Unused is the credit the replica still holds unspent and keeps if
	// its reservation still backs it.
	Unused uint64
	// Want is the new credit wanted on top of Unused.
	Want uint64
	// Waiting is the units requests are waiting for (last mile).
	Waiting uint64
	// Probe is the units of requests waiting that the store charges at
	// once, as hits at its own instant, as far as they fit beside the
	// other replicas' reservations and shares and the caller's kept
	// credit (SyncResult.Probed): those requests are decided by this
	// round, with nothing reserved, pushed or handed back after it
	// (credit_probe.go). Units that do not fit are not charged: a
	// window is never charged with units nobody was granted, which
	// would revoke reservations other replicas may be spending.
	Probe uint64
	// Denied is the requests the replica denied since its last round.
	Denied uint64
	// Share is the fraction of the free budget replicas may hold as credit
	// (local_allowance, at most 1).
	Share float64
	// Replicas is N, the live replicas the caller last saw (at least 1).
	Replicas int
	// Lease is how long the reservation stays valid without a sync.
	Lease time.Duration
	// ShareEpoch, when positive, gives the rule static shares: each of
	// the Sharers replicas that may hold a share of epoch ShareEpoch of
	// the window (Membership.Sharers; a sliding window's are the sharers
	// of the epoch before, shareBase) admits up to ⌊Share·Limit/Sharers⌋
	// of it with no round trip, SharersNext those of the next epoch, and
	// the store counts what each has not reported as reserved
	// (KeyRecord.Sync). Only rules of one fixed or sliding window have
	// static shares (a sliding window's are half as large: see
	// ShareFraction); zero means none. SharersPrev counts those of the
	// epoch before, whose shares a sliding window still counts in part.
	ShareEpoch                        int64
	Sharers, SharersNext, SharersPrev int
	// Gone names sharers of epoch ShareEpoch that left the registry by
	// Leave (Membership.Gone): in that epoch, the store counts the share
	// of one with no record that reports it as holding nothing.
	Gone []string
	// Shrunk names sharers of epoch ShareEpoch that declared in the
	// registry a shrink of their shares of it (Membership.Shrunk,
	// Declaration), each with its count: in that epoch the store counts
	// the share of each as ShareSize at that count (less what its record
	// reports), not at Sharers. Only a sharer that pushed every share hit
	// beyond that size declares, so its unreported share hits of any key
	// fit in it.
	Shrunk []ShrunkSharer
	// ShrunkPrev is Shrunk of the epoch before ShareEpoch, for a sliding
	// window or a token bucket, whose shares of it still count.
	ShrunkPrev []ShrunkSharer
	// ShareHits are units admitted from the replica's static share. They
	// are charged to the window like Hits and to the replica's share
	// record.
	ShareHits []Hit
	// Floor is the key's window states as the replica last saw them (its
	// last SyncResult.Windows, store units), or nil. A store whose record
	// of the key holds nothing (windows all zero) raises it to them before
	// it charges the hits (WindowState.Raise): a store that lost the key,
	// restarted empty or failed over to a copy that missed writes, gets
	// back the counts the replica saw. A record that holds counts is left
	// as it is, so a floor that predates a refund does not undo it; but a
	// floor read from an earlier generation of the record (FloorGen) adds
	// what it holds beyond every such floor before it (KeyRecord.Base):
	// the replica that synced last before the loss saw the most, and the
	// first to sync after it need not be that one.
	Floor []WindowState
	// FloorGen is the generation of the record Floor was read from
	// (SyncResult.Gen; 0: not known).
	FloorGen int64
	// ShareFloor is, for a rule with static shares, the replica's share
	// hits the store was told of before this item, as a state of the
	// share's window; the store raises the replica's share record to it,
	// so that a record lost with the key does not count again, as
	// unreported share, units the floor's window counts hold.
	ShareFloor WindowState
	// Lent is the size of a share of epoch ShareEpoch the store lent this
	// replica (SyncResult.Lent), which is not one of the epoch's sharers;
	// zero: none. Its ShareHits, ShareFloor and Release are of the loan. A
	// store that lost the loan's record makes it again.
	Lent uint64
	// Borrow asks for a share of epoch ShareEpoch on loan: the replica is
	// not one of the epoch's sharers (it joined after them) and holds
	// none (KeyRecord.lend).
	Borrow bool
	// Release, when nonzero, is an instant (store clock, µs): the replica
	// gives up the rest of its static share of every epoch up to the one
	// that contains it (the current epoch or the next), because another
	// replica needs that budget (Contention).
	Release int64
	// ReleaseAhead says that Release, an instant of the next epoch, gives
	// up only the replica's share of that epoch: it holds none of the
	// current one (ShareRecord.From). A sliding window's replica that
	// needs more than the current epoch's credit gives its share of the
	// next up ahead, as the next epoch's shares count now (share_sliding.go).
	ReleaseAhead bool
	// ReleasePrev says that the replica, a sharer of the epoch before
	// ShareEpoch (of the store's, for an item of no share epoch), pushed
	// every share hit of that epoch with this item or before it: of a
	// sliding window or a token bucket, whose store counts that epoch's
	// shares no replica has reported (share_sliding.go, share_bucket.go).
	// Ignored for a fixed window.
	ReleasePrev bool
	// Shrink, when more than Sharers, is a replica count m: the replica
	// shrinks its static share of epoch ShareEpoch to ShareSize at m
	// (replicas joined after the epoch's sharers and need a share of it:
	// SyncResult.Shrink). The store counts no more of the share as held
	// from then on, and never more again in the epoch. Zero: not shrunk.
	Shrink int
	// Hold, until HoldUntil (store clock, µs), is what the replica may
	// still admit of every window on its own authority, telling the store
	// only afterwards: a key settling after an outage, decided in degraded
	// mode while other replicas already ask for credit (health.go). The
	// store records it as the replica's reservation (if it exceeds the
	// credit granted) however full the windows are, and grants no credit
	// for it: the other replicas' credit leaves it room. Zero: none.
	Hold      uint64
	HoldUntil int64
}

// SyncResult is a store's answer for one SyncItem.
type SyncResult struct {
	// Credit is the replica's reservation now: kept + granted units it may
	// admit locally until Now + Lease.
	Credit uint64
	// Others is the sum of the other replicas' live reservations and the
	// static shares they hold unreported (Held).
	Others uint64
	// Held is the part of Others that is other replicas' static shares,
	// unreported and not released: units a release may free (Contended).
	Held uint64
	// Windows is the state after charging, for denials and headers, with
	// time in µs (TAT) and epochs as window indexes.
	Windows []WindowState
	// Now is the store clock when the item was applied.
	Now int64
	// Probed is the units of SyncItem.Probe charged, at Now.
	Probed uint64
	// Pressed reports a sliding-window key for which a replica reported
	// requests waiting or denied within its shortest period: its units go
	// to waiters only (KeyRecord.Pressed).
	Pressed bool
	// Expires is when the reservation lapses (store clock, µs): now +
	// lease, or the end of the window's epoch for credit granted from
	// shares released in it.
	Expires int64
	// Contended reports that requests waited for more than the replica
	// was granted while other replicas hold unreported static shares or,
	// for a rule with shares, reservations: the store publishes the key to
	// every replica (Contention), so they release their shares and hand
	// back their unused credit.
	Contended bool
	// Gen is the generation of the key's record: the store instant (µs)
	// it began at, anew after the store lost it.
	Gen int64
	// Lent is the size of the share of the current epoch (that of Now)
	// the store lends the replica, which asked to borrow one
	// (SyncItem.Borrow): the replica admits from it with no round trip
	// until the epoch ends, and the store counts it as held until the
	// replica reports or releases it. Zero: none.
	Lent uint64
	// Shrink qualifies Contended: the live replicas (SyncItem.Replicas)
	// outnumber the epoch's sharers, and some sharers hold more than a
	// share at that count: shrinking their shares to it
	// (SyncItem.Shrink) frees a share for each replica that joined,
	// where a release would leave the sharers none.
	Shrink bool
	// Filled reports that the item filled the current epoch of a rule of
	// one fixed window with hits: its count was below the limit before
	// and is at it or past it after. Nothing is admitted in the epoch any
	// more (the credit and shares the store counts are spent and pushed)
	// but after a refund: the store publishes the key (Contended.Full),
	// so the other replicas deny it at once instead of each asking.
	Filled bool
}

// FeedWaiter is a Store that can wait for the contention feed: it
// returns what Contention returns, but when nothing was published after
// cursor it blocks until something is, wait passes or ctx ends. A replica
// whose store is one reads the feed on its own goroutine, so a release
// follows a publication by a round trip, at no cost while nothing is
// published; otherwise it polls Contention every contentionEvery.
type FeedWaiter interface {
	WaitContention(ctx context.Context, replica, cursor string, wait time.Duration) ([]Contended, string, error)
}

// Contended is a key published because one replica needs budget other
// replicas hold as static shares, or because its epoch is full (Full).
type Contended struct {
	Key       string
	Algorithm Algorithm
	Windows   []Window
	// Replica is the replica that needs it.
	Replica string
	// At is the store instant (µs) the key was found contended
	// (SyncResult.Now): the other replicas release their shares of the
	// epoch that contains it, not of one that began before they read it.
	// Zero for an entry that does not say: the reader's reckoning of now.
	At int64
	// Shrink, when positive, asks the epoch's sharers to shrink their
	// shares to a share at that live count (the needing replica's
	// SyncItem.Replicas, or their own if more) rather than release them
	// (SyncResult.Shrink). Zero: release them.
	Shrink int
	// Full says the key's epoch that contains At is full of hits
	// (SyncResult.Filled), not that anyone needs budget: the readers that
	// hold the key deny it until the epoch ends, and release nothing.
	Full bool
}

// SlotItem is one concurrency key's part of a sync round.
type SlotItem struct {
	Key string
	// Max is the cluster-wide cap.
	Max uint64
	// Held is the slots the replica holds now; Want the spare slots it
	// would like reserved on top.
	Held, Want uint64
	Lease      time.Duration
}

// SlotResult is a store's answer for one SlotItem.
type SlotResult struct {
	// Granted is the slots the replica may hold (held + reserved); it is
	// never below Held, as held slots cannot be revoked.
	Granted uint64
	// Others is the sum of the other replicas' published slots.
	Others uint64
	Now    int64
}
