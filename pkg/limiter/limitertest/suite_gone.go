package limitertest

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testGoneShares: of the sharers of an epoch, one that left by Leave
// (SyncItem.Gone) holds nothing unreported: with no record of the key its
// share counts as nothing, and with one it counts as any record does.
// Three sharers of 100 (S = 33): b pushed 10 share hits and released
// the rest, c never reported, a asks for credit. Counting c's share as
// unreported leaves a 100 − 10 − 2·33 = 24; with b and c gone, a's own
// share is the only one unreported, 57 free. A gone list only speaks of
// the epoch ShareEpoch: an item of the epoch before counts c again.
func testGoneShares(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	setUp := func(key string) {
		t.Helper()
		b := shared(key, w, 0, 3, e)
		r := sync1(t, st, "b", b)
		b.ShareHits, b.Release = []limiter.Hit{{At: r.Now, N: 10}}, r.Now
		sync1(t, st, "b", b)
	}
	cases := []struct {
		key           string
		gone          []string
		epoch         int64
		credit, other uint64
	}{
		{"kept", nil, e, 24, 66},
		{"gone", []string{"c", "b", "c"}, e, 57, 33},
		{"gone, one", []string{"c"}, e, 57, 33},
		{"gone, not c", []string{"b"}, e, 24, 66},
		{"gone, of the epoch before", []string{"c", "b"}, e - 1, 24, 66},
	}
	for _, c := range cases {
		setUp(c.key)
		a := shared(c.key, w, 1000, 3, c.epoch)
		a.Gone = c.gone
		r := sync1(t, st, "a", a)
		expect(t, c.key+": usage", r.Windows[0].Cur, 10)
		expect(t, c.key+": credit", r.Credit, c.credit)
		expect(t, c.key+": others", r.Others, c.other)
	}
}

// testFoundingShares: an epoch no replica joined a lease before is
// founding: Sharers is −m, and its m founders' shares hold half the limit
// between them, ⌊share·L/2⌋/m each (−1: the half as one share, the count
// of a replica whose registry does not list all founders yet). 100 an
// hour: two founders hold 25 each, and a's credit is the other half;
// with b's 10 share hits reported, b's record holds 15 and c's share 25.
func testFoundingShares(t *testing.T, st limiter.Store) {
	w := limiter.Window{Limit: 100, Period: time.Hour}
	e := epochOf(t, st, w)
	cases := []struct {
		key           string
		sharers       int
		share         float64
		hits          int64
		credit, other uint64
	}{
		{"two founders", -2, 1, 0, 50, 50},
		{"founders not known", -1, 1, 0, 50, 50},
		{"half a share each", -2, 0.5, 0, 38, 24}, // ⌊0.5·(100 − 2·12)⌋
		{"one reported", -2, 1, 10, 50, 40},       // 100 − 10 − 15 − 25
		{"one reported, founders not known", -1, 1, 10, 50, 40},
		{"a regular epoch", 2, 1, 0, 0, 100},
	}
	for _, c := range cases {
		if c.hits > 0 {
			b := shared(c.key, w, 0, c.sharers, e)
			r := sync1(t, st, "b", b)
			b.ShareHits = []limiter.Hit{{At: r.Now, N: c.hits}}
			sync1(t, st, "b", b)
		}
		a := shared(c.key, w, 1000, c.sharers, e)
		a.Share = c.share
		r := sync1(t, st, "a", a)
		expect(t, c.key+": credit", r.Credit, c.credit)
		expect(t, c.key+": others", r.Others, c.other)
	}
}
