package limiter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// wipedStore is a reference store that can come back empty, as a Redis
// restarted without persistence or failed over to a replica that missed
// the last writes: wipe replaces everything it held with nothing.
type wipedStore struct {
	mu  sync.Mutex
	cur *memstore.Store
}

func newWipedStore() *wipedStore { return &wipedStore{cur: memstore.New(nil)} }

func (s *wipedStore) store() *memstore.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *wipedStore) wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = memstore.New(nil)
}

func (s *wipedStore) Sync(ctx context.Context, r string, it []limiter.SyncItem, out []limiter.SyncResult) error {
	return s.store().Sync(ctx, r, it, out)
}

func (s *wipedStore) SyncSlots(ctx context.Context, r string, it []limiter.SlotItem, out []limiter.SlotResult) error {
	return s.store().SyncSlots(ctx, r, it, out)
}

func (s *wipedStore) Heartbeat(ctx context.Context, r string, lease time.Duration) (limiter.Membership, error) {
	return s.store().Heartbeat(ctx, r, lease)
}

func (s *wipedStore) Release(ctx context.Context, r string, keys, slotKeys []string) error {
	return s.store().Release(ctx, r, keys, slotKeys)
}

func (s *wipedStore) Leave(ctx context.Context, r string) error { return s.store().Leave(ctx, r) }

func (s *wipedStore) Contention(ctx context.Context, r, cursor string) ([]limiter.Contended, string, error) {
	return s.store().Contention(ctx, r, cursor)
}

// TestSimStoreWipedMidWindow: a 100/minute key under 5× load on 4
// replicas, and the store loses everything 30 s into the minute. The
// counts the replicas last saw come back with their next rounds (each
// item carries its key's last view as a floor), so the minute still
// admits at most its limit, plus one unit per replica for the rounds in
// flight; the next minute, at most its limit. Before the floors, the
// wiped minute admitted its limit twice over.
func TestSimStoreWipedMidWindow(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow} {
		st := newWipedStore()
		rule := perMinute(100)
		rule.Algorithm = alg
		pace := time.Minute * 16 / 500 // 5× of 100/minute over 16 callers
		r := sim{rule: rule, replicas: 4, callers: 4, store: st, duration: 119 * time.Second,
			pace: func(int) time.Duration { return pace },
			during: func(*simRun) {
				time.Sleep(30 * time.Second)
				st.wipe()
			}}.run(t)
		// The sim starts one second into the first minute.
		var first, second uint64
		for sec, n := range r.admitted {
			if sec < 59 {
				first += n
			} else {
				second += n
			}
		}
		t.Logf("%v: admitted %d in the wiped minute, %d in the next", alg, first, second)
		if first > 100+4 {
			t.Errorf("%v: the minute the store was wiped in admitted %d > L + N", alg, first)
		}
		if second > 100 {
			t.Errorf("%v: the minute after admitted %d > L", alg, second)
		}
		if alg == limiter.FixedWindow && (first < 90 || second < 90) {
			t.Errorf("%v: admitted %d and %d, want near the limit of 100 in each minute", alg, first, second)
		}
	}
}
