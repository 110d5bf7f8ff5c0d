package limiter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// lateBeats is a store that loses everything (wipe) and then fails the
// heartbeats of every replica but first until blind ends: the replicas
// whose heartbeats fall later in the second after a Redis restart.
type lateBeats struct {
	*wipedStore
	first string
	blind atomic.Int64 // Unix ns
}

func (s *lateBeats) Heartbeat(ctx context.Context, r string, lease time.Duration) (limiter.Membership, error) {
	if r != s.first && time.Now().UnixNano() < s.blind.Load() {
		return limiter.Membership{}, errors.New("heartbeat lost")
	}
	return s.wipedStore.Heartbeat(ctx, r, lease)
}

// TestSimWipeKeepsUnreportedShares: 4 replicas at 1.6× a limit of 100
// per 5 s, every unit from their static shares of 25, which they have not
// reported when the store loses everything 2 s into a window (each has
// spent about 15), just before the replicas heartbeat. One replica
// heartbeats at once and joins the new, empty registry, which lists no
// sharer of the window under way: it releases its share and its rounds
// tell the store to count no one else's. The others' heartbeats are lost
// for a while; they go on spending their shares unreported. What keeps
// the window at its limit is the contention feed: the first replica's
// waiters have the others release their shares, pushing their share hits,
// within a round. The window may admit its limit, plus a unit per replica
// for the rounds in flight.
func TestSimWipeKeepsUnreportedShares(t *testing.T) {
	for _, blind := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond} {
		st := &lateBeats{wipedStore: newWipedStore(), first: "replica-0"}
		rule := &limiter.Rule{Windows: []limiter.Window{{Limit: 100, Period: 5 * time.Second}}}
		// The sim starts 1 s into the first 5 s window; the replicas hold
		// shares from the window of [10 s, 15 s), wiped at 11.95 s, just before
		// the replicas heartbeat.
		r := sim{rule: rule, replicas: 4, callers: 1, store: st, duration: 18 * time.Second,
			pace: func(int) time.Duration { return 125 * time.Millisecond },
			during: func(*simRun) {
				time.Sleep(10950 * time.Millisecond)
				st.blind.Store(time.Now().Add(blind).UnixNano())
				st.wipe()
			}}.run(t)
		var wiped, next uint64
		for sec := int64(9); sec < 14; sec++ {
			wiped += r.admitted[sec]
			next += r.admitted[sec+5]
		}
		t.Logf("others blind %v: admitted %d in the wiped window, %d in the next", blind, wiped, next)
		if wiped > 100+4 {
			t.Errorf("others blind %v: the wiped window admitted %d > L + N", blind, wiped)
		}
		if next > 100 {
			t.Errorf("others blind %v: the window after admitted %d > L", blind, next)
		}
	}
}

// heldAtWipe is what the replicas of s hold that a store losing its
// records forgets: credit unspent, and admits from credit not pushed yet.
func heldAtWipe(s *simRun) uint64 {
	var held int64
	for _, l := range s.lims {
		for _, ks := range l.Snapshot("", 10) {
			if ks.Shared != nil {
				held += max(ks.Shared.Credit, 0) + max(ks.Shared.Pending, 0)
			}
		}
	}
	return uint64(held)
}

// TestSimWipeKeepsReleases: replica 0 spends its share and the credit,
// and the others release their shares of the window to it; then the store
// loses everything, 1.8 s into the window, and the others' heartbeats are
// lost for 0.9 s. Every sync of a key whose share was released says so
// again, and the store that lost the release hears it: before, it counted
// the released shares as held for the rest of the window, which admitted
// 56 to 58 of its 100 with 155 asked.
func TestSimWipeKeepsReleases(t *testing.T) {
	st := &lateBeats{wipedStore: newWipedStore(), first: "replica-0"}
	// 100 per 5 s, static shares of 80 (20 each), credit for the rest.
	rule := &limiter.Rule{Windows: []limiter.Window{{Limit: 100, Period: 5 * time.Second}},
		Tuning: limiter.Tuning{LocalAllowance: 0.8}}
	var held uint64
	// The sim starts 1 s into the first 5 s window; the replicas hold
	// shares from the window of [10 s, 15 s).
	r := sim{rule: rule, replicas: 4, callers: 1, store: st, duration: 18 * time.Second,
		pace: func(rep int) time.Duration {
			if rep == 0 {
				return 40 * time.Millisecond
			}
			return 500 * time.Millisecond
		},
		during: func(s *simRun) {
			time.Sleep(10800 * time.Millisecond)
			st.blind.Store(time.Now().Add(900 * time.Millisecond).UnixNano())
			held = heldAtWipe(s)
			st.wipe()
		}}.run(t)
	var wiped uint64
	for sec := int64(9); sec < 14; sec++ {
		wiped += r.admitted[sec]
	}
	t.Logf("admitted %d in the wiped window, 155 asked; %d held at the wipe", wiped, held)
	if wiped < 97 {
		t.Errorf("the wiped window admitted %d of its limit of 100, with 155 asked", wiped)
	}
	if wiped > 100+held+4 {
		t.Errorf("the wiped window admitted %d > L + held + N = %d", wiped, 100+held+4)
	}
}
