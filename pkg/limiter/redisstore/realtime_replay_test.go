package redisstore_test

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// A recorded run replayed through the reference: every item a replica
// synced against Redis, applied in the order Redis applied them (by the
// store clock each reply carries) to the Go reference's KeyRecord, must
// get the reply Redis gave. The parity test drives both with generated
// items; this drives them with what the engine sends under real load.

// syncLog is the items of a run's sync rounds and Redis's replies.
type syncLog struct {
	mu    sync.Mutex
	calls int
	items []syncedItem
}

// syncedItem is one item of a round: its round (call) and place in it.
type syncedItem struct {
	call, idx int
	replica   string
	item      limiter.SyncItem
	reply     limiter.SyncResult
}

// recordingStore records the sync rounds that succeed.
type recordingStore struct {
	limiter.Store
	log *syncLog
}

// WaitContention passes the feed through (limiter.FeedWaiter), so that a
// recorded replica reads it as it is published, as one unrecorded does.
func (s recordingStore) WaitContention(ctx context.Context, replica, cursor string, wait time.Duration) ([]limiter.Contended, string, error) {
	return s.Store.(limiter.FeedWaiter).WaitContention(ctx, replica, cursor, wait)
}

func (s recordingStore) Sync(ctx context.Context, replica string, items []limiter.SyncItem, out []limiter.SyncResult) error {
	if err := s.Store.Sync(ctx, replica, items, out); err != nil {
		return err
	}
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	for i, it := range items {
		it.Hits, it.ShareHits = slices.Clone(it.Hits), slices.Clone(it.ShareHits)
		it.Floor = slices.Clone(it.Floor)
		r := out[i]
		r.Windows = slices.Clone(r.Windows)
		l.items = append(l.items, syncedItem{call: l.calls, idx: i, replica: replica, item: it, reply: r})
	}
	return nil
}

// replay applies the log to the reference, as memstore keeps its records,
// and fails t for every reply that differs from Redis's (the first few
// in full). Call it once the replicas have stopped.
func (l *syncLog) replay(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortStableFunc(l.items, func(a, b syncedItem) int {
		return cmp.Or(cmp.Compare(a.reply.Now, b.reply.Now), cmp.Compare(a.call, b.call), cmp.Compare(a.idx, b.idx))
	})
	type record struct {
		rec     limiter.KeyRecord
		expires int64
	}
	recs := map[string]*record{}
	differ := 0
	for _, x := range l.items {
		now := x.reply.Now
		r := recs[x.item.Key]
		if r == nil || r.expires <= now {
			r = &record{}
			recs[x.item.Key] = r
		}
		it := x.item
		got := r.rec.Sync(x.replica, &it, now)
		r.expires = max(r.rec.ExpiresAt(it.Algorithm, it.Windows), now+1)
		want := x.reply
		if got.Credit != want.Credit || got.Others != want.Others || got.Held != want.Held || got.Expires != want.Expires ||
			got.Pressed != want.Pressed || got.Contended != want.Contended || !slices.Equal(got.Windows, want.Windows) {
			if differ++; differ <= 3 {
				t.Errorf("%s synced %s at %d µs:\nitem      %+v\nredis     %+v\nreference %+v", x.replica, x.item.Key, now, x.item, want, got)
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d items replayed through the reference got another reply than from Redis", differ, len(l.items))
	}
	t.Logf("%d items of %d rounds replayed through the reference: the replies Redis gave", len(l.items), l.calls)
}
