package limiter

import (
	"testing"
	"time"
)

// TestProbeBookkeeping follows a probe through its rounds: the waiters it
// admits in order as far as the store charged it, the units charged that
// no waiter took refunded at the instant they were charged, a failed
// round's hits without the refund, and refunds dropped once no window
// counts them.
func TestProbeBookkeeping(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	e := l.eng
	rule := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	sec := int64(time.Second / time.Microsecond)
	newKey := func() (*creditState, []*waiter) {
		cs := e.newCredit("k", rule, 0)
		cs.share = nil // probes are for keys without a static share
		var ws []*waiter
		for range 3 {
			w := &waiter{n: 1, done: make(chan bool, 1)}
			cs.waiters = append(cs.waiters, w)
			cs.waiting++
			ws = append(ws, w)
		}
		return cs, ws
	}
	snow := 100*sec + sec/2 // mid-window
	cs, ws := newKey()
	if p := e.probeFor(cs, snow, 0); p != 3 {
		t.Fatalf("probe of a cold key with 3 waiters: %d units", p)
	}
	it := SyncItem{}
	cs.addProbes(&it, 3, snow)
	if it.Probe != 3 || len(it.Hits) != 0 {
		t.Fatalf("item probe %d, hits %v: want the probe apart from the hits", it.Probe, it.Hits)
	}
	// The store charged 2 of the 3: the first two are admitted, the
	// third waits, and nothing is owed back.
	e.settleProbe(cs, &SyncResult{Probed: 2, Now: snow + 1000})
	if !recv(ws[0]) || !recv(ws[1]) || len(ws[2].done) != 0 {
		t.Fatal("want the first two waiters admitted, the third waiting")
	}
	if len(cs.waiters) != 1 || cs.waiting != 1 || cs.prb().admitted != 2 || len(cs.prb().refunds) != 0 {
		t.Fatalf("waiters %d, waiting %d, probed %d, refunds %v", len(cs.waiters), cs.waiting, cs.prb().admitted, cs.prb().refunds)
	}
	// A probe charged whole whose waiter gave up meanwhile: its unit is
	// refunded at the instant the store charged it.
	cs, ws = newKey()
	cs.addProbes(&SyncItem{}, e.probeFor(cs, snow, 0), snow)
	cs.dropWaiter(ws[2])
	at := snow + 1000
	e.settleProbe(cs, &SyncResult{Probed: 3, Now: at})
	if !recv(ws[0]) || !recv(ws[1]) || len(cs.waiters) != 0 {
		t.Fatalf("want both waiters left admitted; %d wait", len(cs.waiters))
	}
	if len(cs.prb().refunds) != 1 || cs.prb().refunds[0] != (Hit{At: at, N: 1}) {
		t.Fatalf("refunds %v, want the unit no waiter took, at %d", cs.prb().refunds, at)
	}
	// The next round refunds it, in the next window too (the store frees
	// it in the window it was charged in); it fails, and the refund
	// waits again.
	it = SyncItem{Hits: []Hit{{At: 101*sec + 2000, N: 4}}}
	cs.addProbes(&it, 0, 101*sec+2000)
	if len(it.Hits) != 2 || it.Hits[1] != (Hit{At: at, N: -1}) {
		t.Fatalf("item hits %v, want the admitted hits and the refund at %d", it.Hits, at)
	}
	if got := cs.takeBackProbes(it.Hits); len(got) != 1 || got[0].N != 4 {
		t.Fatalf("a failed round's hits without its refund: %v", got)
	}
	if len(cs.prb().refunds) != 1 {
		t.Fatalf("refunds after a failed round: %v, want the one back", cs.prb().refunds)
	}
	// Two windows on, no window counts it: dropped.
	it = SyncItem{}
	cs.addProbes(&it, 0, 102*sec+1000)
	if len(it.Hits) != 0 || len(cs.prb().refunds) != 0 {
		t.Fatalf("two windows on: item hits %v, kept %v; want it dropped", it.Hits, cs.prb().refunds)
	}
	// No probe near a window's end, nor for a key with credit.
	cs, _ = newKey()
	if p := e.probeFor(cs, 101*sec-1000, 0); p != 0 {
		t.Fatalf("probe near the end: %d", p)
	}
	cs.credit.Store(1)
	if p := e.probeFor(cs, snow, 0); p != 0 {
		t.Fatalf("probe with credit: %d", p)
	}
}

func recv(w *waiter) bool {
	select {
	case ok := <-w.done:
		return ok
	default:
		return false
	}
}
