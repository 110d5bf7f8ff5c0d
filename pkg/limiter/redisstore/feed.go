package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// The contention feed is a stream of the service's (one key, on one node
// of a Cluster): one entry per contended item, holding its key,
// algorithm, windows, the replica that needs it, the store instant it
// was found contended and whether sharers are to shrink their shares
// (limiter.Contended.Shrink).
const (
	// feedLen is how many entries the feed keeps, at least (MAXLEN ~):
	// a scale-out's newcomers publish each key they see, thousands in a
	// second, and a reader that falls further behind loses entries. About
	// 3 MB of Redis memory at the most.
	feedLen = 16384
	// feedRead is the most entries one Contention call reads; the next
	// call reads on from where it stopped.
	feedRead = 1024
	// feedTTL is how long the feed outlives its last entry: readers wait
	// on it or poll it every few tens of milliseconds, and one that comes
	// back later reads on from its cursor into a new feed, whose entry
	// ids, times, are later.
	feedTTL = time.Hour
)

// publish adds the items whose result is contended or filled to the
// feed, in one pipeline. It is best effort: the round's syncs are applied
// whatever becomes of it, and a replica still short of budget is
// contended again at its next sync, which publishes the key again.
func (s *Store) publish(ctx context.Context, replica string, items []limiter.SyncItem, out []limiter.SyncResult) {
	var pipe redis.Pipeliner
	key := s.keys.feed()
	for i := range items {
		if !out[i].Contended && !out[i].Filled {
			continue
		}
		if pipe == nil {
			pipe = s.c.Pipeline()
		}
		it := &items[i]
		if out[i].Contended {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: feedLen, Approx: true, Values: []any{
				"key", it.Key, "algorithm", int(it.Algorithm), "windows", encodeWindows(it.Windows), "replica", replica,
				"at", out[i].Now, "shrink", shrinkArg(it, out[i]),
			}})
		}
		if out[i].Filled {
			// The windows under "full", not "windows": a replica of a
			// version that knows no full entries skips the entry rather
			// than release its share for it.
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: feedLen, Approx: true, Values: []any{
				"key", it.Key, "algorithm", int(it.Algorithm), "full", encodeWindows(it.Windows), "replica", replica, "at", out[i].Now,
			}})
		}
	}
	if pipe == nil {
		return
	}
	pipe.PExpire(ctx, key, feedTTL)
	_, _ = pipe.Exec(ctx)
}

// Contention returns the keys replicas other than replica published after
// cursor, a stream entry id, of at most feedRead entries, and the id to
// read on from. The empty cursor returns none and the id of the feed's last
// entry ("0-0" for an empty feed): reading from now on.
func (s *Store) Contention(ctx context.Context, replica, cursor string) ([]limiter.Contended, string, error) {
	return s.contention(ctx, replica, cursor, -1)
}

// WaitContention is Contention that blocks (XREAD BLOCK) up to wait for
// an entry after cursor (limiter.FeedWaiter): it holds one connection of
// the pool while it waits, and costs Redis nothing until an entry comes.
func (s *Store) WaitContention(ctx context.Context, replica, cursor string, wait time.Duration) ([]limiter.Contended, string, error) {
	return s.contention(ctx, replica, cursor, max(wait, time.Millisecond))
}

// contention reads the feed after cursor, blocking up to block (-1: not
// at all).
func (s *Store) contention(ctx context.Context, replica, cursor string, block time.Duration) ([]limiter.Contended, string, error) {
	key := s.keys.feed()
	if cursor == "" {
		last, err := s.c.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, cursor, wrap("contention", err)
		}
		if len(last) == 0 {
			return nil, "0-0", nil
		}
		return nil, last[0].ID, nil
	}
	streams, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: []string{key, cursor}, Count: feedRead, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, cursor, nil
	}
	if err != nil {
		return nil, cursor, wrap("contention", err)
	}
	var out []limiter.Contended
	next := cursor
	for _, st := range streams {
		for _, m := range st.Messages {
			next = m.ID
			// An entry this store did not write is skipped: an error
			// would leave the reader's cursor before it for good.
			if c, err := decodeContended(m.Values); err == nil && c.Replica != replica {
				out = append(out, c)
			}
		}
	}
	return out, next, nil
}

// encodeWindows writes windows as "limit period(ns) burst", separated by
// ",".
func encodeWindows(ws []limiter.Window) string {
	var b []byte
	for i, w := range ws {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, w.Limit, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(w.Period), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, w.Burst, 10)
	}
	return string(b)
}

func decodeWindows(s string) ([]limiter.Window, error) {
	var ws []limiter.Window
	for _, part := range strings.Split(s, ",") {
		f := strings.Fields(part)
		if len(f) != 3 {
			return nil, fmt.Errorf("window %q", part)
		}
		limit, err1 := strconv.ParseUint(f[0], 10, 64)
		period, err2 := strconv.ParseInt(f[1], 10, 64)
		burst, err3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("window %q: %w", part, err)
		}
		ws = append(ws, limiter.Window{Limit: limit, Period: time.Duration(period), Burst: burst})
	}
	return ws, nil
}

// decodeContended reads one feed entry.
func decodeContended(v map[string]any) (limiter.Contended, error) {
	var c limiter.Contended
	str := func(f string) (string, error) {
		x, ok := v[f].(string)
		if !ok {
			return "", fmt.Errorf("no %s", f)
		}
		return x, nil
	}
	key, err := str("key")
	if err != nil {
		return c, err
	}
	alg, err := str("algorithm")
	if err != nil {
		return c, err
	}
	a, err := strconv.ParseUint(alg, 10, 8)
	if err != nil {
		return c, fmt.Errorf("algorithm %q", alg)
	}
	enc, err := str("windows")
	if full, ok := v["full"].(string); ok && err != nil {
		enc, err, c.Full = full, nil, true
	}
	if err != nil {
		return c, err
	}
	ws, err := decodeWindows(enc)
	if err != nil {
		return c, err
	}
	replica, err := str("replica")
	if err != nil {
		return c, err
	}
	var at int64
	if s, ok := v["at"].(string); ok { // absent from entries of older replicas
		if at, err = strconv.ParseInt(s, 10, 64); err != nil {
			return c, fmt.Errorf("at %q", s)
		}
	}
	var shrink int
	if s, ok := v["shrink"].(string); ok { // absent from entries of older replicas: a release
		if shrink, err = strconv.Atoi(s); err != nil || shrink < 0 {
			return c, fmt.Errorf("shrink %q", s)
		}
	}
	return limiter.Contended{Key: key, Algorithm: limiter.Algorithm(a), Windows: ws, Replica: replica, At: at,
		Shrink: shrink, Full: c.Full}, nil
}

// shrinkArg is the feed entry's shrink: the caller's live count if the
// sharers are to shrink their shares to a share at it, else 0.
func shrinkArg(it *limiter.SyncItem, r limiter.SyncResult) int {
	if r.Shrink {
		return max(it.Replicas, 1)
	}
	return 0
}

var _ limiter.FeedWaiter = (*Store)(nil)
