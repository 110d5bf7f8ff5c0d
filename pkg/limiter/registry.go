package limiter

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// The replica registry, as a heartbeat reads it: who may hold a static
// share of which epoch.
//
// Founding epochs. An epoch no replica joined a lease before (a fresh
// deployment's first minute, or the first after every replica had gone)
// has no sharers by the rule above, and every key's first request on
// every replica would wait for a round. Nobody was live between its
// start and the first join since, G: nobody wrote to it before G. Its
// founders are the replicas that joined within foundingSpan of G; once
// a replica's copy of the registry is from foundingSpan after G, every
// replica counts the same founders, m. Each founder then holds a static
// share of the epoch of ⌊share·L/2⌋/m: the founders' shares together
// hold at most half the limit, and the store counts that half as
// reserved from G on (Sharers is −m, or −1 before the founders are known:
// the half as one share). The other half is what credit granted before
// the founders were known, and after, may take. A founder's request
// before it knows the founders (at most foundingSpan and a startup
// heartbeat, 150 ms, after G) waits for them rather than for a round,
// whose credit that half could leave short. Only windows of
// foundingPeriod or more have founding epochs.

// Membership is the registry's answer to a heartbeat.
type Membership struct {
	Replicas int   // live replicas, at least 1
	Now      int64 // store clock, Unix µs
	// Members lists every replica whose lease ended after Since, live
	// ones included, in no order: enough to count the replicas that may
	// hold a share of any window that began after Since (Sharers).
	Members []Member
	Since   int64
	// Joined is when the caller joined: first, or again after its lease
	// had ended.
	Joined int64
}

// Member is one replica in the registry: when it first joined and when
// its lease ends (store clock, Unix µs). A replica back after its lease
// ended is a new member; its earlier incarnation stays listed, so a
// window that began while it was a member keeps counting it.
type Member struct {
	Joined, Expires int64
	// Caller marks the calling replica's own entries, the live one and
	// its earlier incarnations.
	Caller bool
	// Name is the replica's name (an earlier incarnation's too), the one
	// its share records are kept under.
	Name string
	// Left marks an incarnation that ended by Leave: it had pushed every
	// share hit and released its shares, so it holds no share it has not
	// reported, and an incarnation of the same name that joins later does
	// not take its shares over.
	Left bool
	// Shrink is the shrink of its static shares the replica declared
	// (Store.Declare); zero: none.
	Shrink Declaration
	// Ahead marks a replica of a version that holds and counts the
	// static shares of a sliding window and of a token bucket of any
	// burst, which the store counts beside the next epoch's
	// (share_sliding.go, share_bucket.go, bucket_epoch.go). One of an
	// earlier version grants, through its own scripts, credit out of
	// budget such shares hold (one that knew a token bucket's shares only
	// of a burst equal to its rate reckons any other in its own window,
	// counting none): while one may be live, none is held (AheadReady).
	Ahead bool
	// DeclaresAhead marks a replica of a version whose declared shrink
	// (Shrink) holds its shares of a sliding window and of a token
	// bucket too, not only of a fixed window's: only such a one is named
	// shrunk in those rules' syncs (ShrunkOf). One of an earlier version
	// shrinks them key by key or releases them.
	DeclaresAhead bool
}

// AheadReady reports whether a sliding window's or a token bucket's
// static shares may be held of epochs whose sharers are those of the epoch of period that
// began at start (shareBase): every one of those sharers (or founders)
// counts them. Every replica reading one registry answers the same, as
// it counts the same sharers. A replica of an earlier version that
// joined since (a rollback, or one restarted in the middle of an
// upgrade) is not one of them: its syncs do not count the shares of the
// epochs under way, for at most the two whose sharers were counted
// before it joined.
func (m Membership) AheadReady(start, period int64, lease time.Duration) bool {
	if start <= m.Since {
		return true // no sharers: no shares
	}
	lu := int64(lease / time.Microsecond)
	sharer := func(x Member) bool { return x.Joined <= start-lu && x.Expires > start }
	if m.Sharers(start, period, lease) < 0 {
		f := m.founding(start, period)
		span := int64(foundingSpan / time.Microsecond)
		sharer = func(x Member) bool { return x.Joined >= f.g && x.Joined < f.g+span }
	}
	for _, x := range m.Members {
		if !x.Ahead && sharer(x) {
			return false
		}
	}
	return true
}

// Declaration is a replica's shrink of its static shares, declared in
// the registry once, for every key, rather than key by key when a
// newcomer finds a key's budget held (credit_shrink.go). Replicas that
// joined in the middle of an epoch are not its sharers; the sharers
// hold all of it. A sharer that declares holds, of every epoch that
// ends after At and began before Until, at most ShareSize at N of each
// key, or what it spent of the key if more, and it pushed every share
// hit of a key it spent more of before it declared: what it holds
// unreported of any key fits in a share at N. The store counts its share
// so (SyncItem.Shrunk), and the rest is free for the newcomers to
// borrow at their first request of a key, without the key's publication
// and a shrink round of each sharer first.
type Declaration struct {
	// At is the store instant (µs) from which the shrink holds.
	At int64
	// N is the live count whose share the declaring replica holds at
	// most; zero: no declaration.
	N int
	// Until is the store instant (µs) from which every replica live at
	// At is a sharer of the epochs that begin (it joined a lease before):
	// their sharers count them, and the shrink need not hold.
	Until int64
}

// ShrunkSharer is a sharer of an epoch that declared a shrink of its
// shares of it to a share at N replicas (SyncItem.Shrunk).
type ShrunkSharer struct {
	Name string
	N    int
}

// covers reports whether d shrinks a share of the epoch of period that
// began at start (store µs) held by one of n sharers.
func (d Declaration) covers(start, period int64, n int) bool {
	return d.coversOf(start, start, period, n)
}

// coversOf is covers for an epoch whose sharers are those of the epoch
// that began at base (shareBase): one whose sharers were known before
// Until, and may not count the replicas that joined since. A sliding
// window's or a token bucket's epoch after the scale-out's has the same
// sharers as it, and is shrunk too.
func (d Declaration) coversOf(base, start, period int64, n int) bool {
	return d.N > n && n > 0 && start+period > d.At && base < d.Until
}

// PastIncarnation is the registry id under which a store keeps the
// earlier incarnation of replica that joined at joined (store µs), once
// replica joins again.
func PastIncarnation(replica string, joined int64) string {
	return replica + "\x00" + strconv.FormatInt(joined, 10)
}

// IncarnationOf reports whether registry id is replica or one of its
// earlier incarnations (PastIncarnation).
func IncarnationOf(id, replica string) bool {
	rest, ok := strings.CutPrefix(id, replica)
	return ok && (rest == "" || rest[0] == 0)
}

// holds reports whether the caller may hold a static share of a window
// that began at start: one of its own incarnations is counted among the
// window's sharers (Sharers), or the window is founding, the caller one
// of its founders, and this copy lists them all.
func (m Membership) holds(start, period int64, lease time.Duration) bool {
	if start <= m.Since {
		return false
	}
	lu := int64(lease / time.Microsecond)
	n := 0
	for _, x := range m.Members {
		if x.Joined <= start-lu && x.Expires > start {
			n++
		}
		if x.Caller && !x.Left && x.Joined <= start-lu && (x.Expires > start || x.Joined == m.Joined) {
			return true
		}
	}
	if n > 0 {
		return false
	}
	f := m.founding(start, period)
	return f.g != 0 && f.known && f.caller
}

// Sharers counts the replicas that may hold a static share of a window
// that began at start (store clock, µs): those that joined at least a
// lease before it and whose lease had not ended by then. Every replica
// reading one registry counts the same, however stale its copy, as long
// as the copy is younger than lease minus a heartbeat; it is 0 when the
// registry no longer reaches back to start. For a founding epoch (none
// such, and some replica live after start) it is −m, m the founders, or
// −1 while this copy may not list them all yet (founding).
func (m Membership) Sharers(start, period int64, lease time.Duration) int {
	if start <= m.Since {
		return 0
	}
	lu := int64(lease / time.Microsecond)
	n := 0
	for _, x := range m.Members {
		if x.Joined <= start-lu && x.Expires > start {
			n++
		}
	}
	if n > 0 {
		return n
	}
	f := m.founding(start, period)
	if f.g == 0 {
		return 0
	}
	if !f.known {
		return -1
	}
	return -f.m
}

const (
	// foundingSpan is how long after the first replica of a founding
	// epoch joined (G) another may join and still be one of its founders.
	foundingSpan = 100 * time.Millisecond
	// foundingPeriod is the shortest window whose epochs may be founding.
	// Before its founders are known, credit may take only half of the
	// limit: a window of 10 s or more sees a tenth of it go by at most
	// at a steady rate, where a second's would see all of it. A shorter
	// window has sharers within a lease and a period of the first join.
	foundingPeriod = 10 * time.Second
)

// founders describes the founding of an epoch: G, the first join after
// its start (0: the epoch is not founding), m the founders, whether this
// copy lists them all, and whether the caller is one.
type founders struct {
	g      int64
	m      int
	known  bool
	caller bool
}

// founding reports on the epoch that began at start, which has no
// sharers (Sharers): its founders are the replicas that joined within
// foundingSpan of G, the earliest join of a replica whose lease ended
// after start. A caller one of whose founding incarnations left
// (Member.Left) holds no share of it: that one's record says it was
// reported and released.
func (m Membership) founding(start, period int64) founders {
	var f founders
	if period < int64(foundingPeriod/time.Microsecond) {
		return f
	}
	for _, x := range m.Members {
		if x.Expires > start && (f.g == 0 || x.Joined < f.g) {
			f.g = x.Joined
		}
	}
	if f.g == 0 {
		return f
	}
	span := int64(foundingSpan / time.Microsecond)
	left := false
	for _, x := range m.Members {
		if x.Joined >= f.g && x.Joined < f.g+span {
			f.m++
			f.caller = f.caller || x.Caller
			left = left || x.Caller && x.Left
		}
	}
	f.caller = f.caller && !left
	f.known = m.Now >= f.g+span
	return f
}

// Gone lists the names of the sharers of a window of period that began
// at start (Sharers: its founders, of a founding epoch whose founders
// this copy lists) that left by Leave, and of no other sharer of it:
// each reported every share hit before it left, so the store counts a
// share of one that no record of the key reports as holding nothing
// (SyncItem.Gone). Nil when there are none, or the registry no longer
// reaches back to start.
func (m Membership) Gone(start, period int64, lease time.Duration) []string {
	if start <= m.Since {
		return nil
	}
	lu := int64(lease / time.Microsecond)
	sharer := func(x Member) bool { return x.Joined <= start-lu && x.Expires > start }
	if n := m.Sharers(start, period, lease); n < 0 {
		f := m.founding(start, period)
		if !f.known {
			return nil // the founders' half counts as one share
		}
		span := int64(foundingSpan / time.Microsecond)
		sharer = func(x Member) bool { return x.Joined >= f.g && x.Joined < f.g+span }
	}
	var gone []string
	for _, x := range m.Members {
		if x.Left && sharer(x) && !slices.Contains(gone, x.Name) {
			gone = append(gone, x.Name)
		}
	}
	for _, x := range m.Members {
		if len(gone) > 0 && !x.Left && sharer(x) {
			gone = slices.DeleteFunc(gone, func(n string) bool { return n == x.Name })
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return gone
}

// Shrunk lists the sharers of a window of period that began at start
// that declared a shrink of their shares of it (Declaration), each with
// its count: what a sync tells the store (SyncItem.Shrunk). A name with
// more than one incarnation among the sharers is left out (its records
// are one), as are the sharers of a founding epoch. Nil when there are
// none.
func (m Membership) Shrunk(start, period int64, lease time.Duration) []ShrunkSharer {
	return m.ShrunkOf(start, start, period, lease, false)
}

// ShrunkOf is Shrunk for a window whose sharers are those of the window
// that began at base (a sliding window's or a token bucket's are the
// window's before, shareBase); start is when the window began. Of a
// sliding window or a token bucket (ahead), only sharers whose
// declarations hold their shares of those are named (DeclaresAhead).
func (m Membership) ShrunkOf(base, start, period int64, lease time.Duration, ahead bool) []ShrunkSharer {
	n := m.Sharers(base, period, lease)
	if n <= 0 {
		return nil
	}
	lu := int64(lease / time.Microsecond)
	var out []ShrunkSharer
	for i, x := range m.Members {
		if !x.Shrink.coversOf(base, start, period, n) || x.Joined > base-lu || x.Expires <= base || ahead && !x.DeclaresAhead {
			continue
		}
		twice := false
		for j, y := range m.Members {
			twice = twice || j != i && y.Name == x.Name && y.Joined <= base-lu && y.Expires > base
		}
		if !twice {
			out = append(out, ShrunkSharer{Name: x.Name, N: x.Shrink.N})
		}
	}
	return out
}

// foundersDue is, for a founding epoch that began at start whose
// founders this copy may not list all of yet, when it will (G plus
// foundingSpan, store µs); else 0.
func (m Membership) foundersDue(start, period int64, lease time.Duration) int64 {
	if m.Sharers(start, period, lease) != -1 {
		return 0
	}
	if f := m.founding(start, period); !f.known {
		return f.g + int64(foundingSpan/time.Microsecond)
	}
	return 0
}
