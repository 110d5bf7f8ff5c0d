package limiter

import (
	"testing"
	"time"
)

// TestProbeBookkeeping follows a probe through its rounds: the waiters it
// admits in order while the reply has room, the units it refunds in
// their window, a failed round's hits without it, and refunds dropped
// once their window is over or kept while it is about to end.
func TestProbeBookkeeping(t *testing.T) {
	l := New(WithStore(nopStore{}, "r"))
	e := l.eng
	rule := &Rule{Algorithm: SlidingWindow, Windows: []Window{{Limit: 10, Period: time.Second}}}
	sec := int64(time.Second / time.Microsecond)
	newKey := func() (*creditState, []*waiter) {
		cs := e.newCredit("k", rule, 0)
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
	if len(it.Hits) != 1 || it.Hits[0] != (Hit{At: snow, N: 3}) {
		t.Fatalf("item hits %v, want the probe", it.Hits)
	}
	// The reply: the window held 7 before the probe, so 2 of its 3 fit
	// beside a reservation of 1 elsewhere.
	r := &SyncResult{Windows: []WindowState{{Epoch: 100, Cur: 7 + 3}}, Others: 1, Now: snow + 1000}
	e.settleProbe(cs, r)
	if !recv(ws[0]) || !recv(ws[1]) || len(ws[2].done) != 0 {
		t.Fatal("want the first two waiters admitted, the third waiting")
	}
	if len(cs.waiters) != 1 || cs.waiting != 1 || cs.prb().admitted != 2 {
		t.Fatalf("waiters %d, waiting %d, probed %d", len(cs.waiters), cs.waiting, cs.prb().admitted)
	}
	if len(cs.prb().refunds) != 1 || cs.prb().refunds[0] != (Hit{At: snow, N: 1}) {
		t.Fatalf("refunds %v, want the third's unit at the probe's instant", cs.prb().refunds)
	}
	// The next round refunds it; it fails, and the refund waits again.
	it = SyncItem{Hits: []Hit{{At: snow + 2000, N: 4}}}
	cs.addProbes(&it, 0, snow+2000)
	if len(it.Hits) != 2 || it.Hits[1].N != -1 {
		t.Fatalf("item hits %v, want the admitted hits and the refund", it.Hits)
	}
	if got := cs.takeBackProbes(it.Hits); len(got) != 1 || got[0].N != 4 {
		t.Fatalf("a failed round's hits without its refund: %v", got)
	}
	if len(cs.prb().refunds) != 1 {
		t.Fatalf("refunds after a failed round: %v, want the one back", cs.prb().refunds)
	}
	// Near the window's end it is kept; in the next window dropped.
	it = SyncItem{}
	cs.addProbes(&it, 0, 101*sec-1000)
	if len(it.Hits) != 0 || len(cs.prb().refunds) != 1 {
		t.Fatalf("near the end: item hits %v, kept %v", it.Hits, cs.prb().refunds)
	}
	cs.addProbes(&it, 0, 101*sec+1000)
	if len(it.Hits) != 0 || len(cs.prb().refunds) != 0 {
		t.Fatalf("in the next window: item hits %v, kept %v; want it dropped", it.Hits, cs.prb().refunds)
	}
	// A reply from the next window admits none of a probe: its units
	// went to the window they were charged in.
	cs, ws = newKey()
	cs.addProbes(&SyncItem{}, e.probeFor(cs, snow, 0), snow)
	e.settleProbe(cs, &SyncResult{Windows: []WindowState{{Epoch: 101, Prev: 3}}, Now: 101*sec + 10})
	if len(ws[0].done) != 0 || len(cs.waiters) != 3 || cs.prb().refunds[0].N != 3 {
		t.Fatalf("across a boundary: waiters %d, refunds %v", len(cs.waiters), cs.prb().refunds)
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
