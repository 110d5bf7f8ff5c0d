package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// rediser is the part of a go-redis client the store uses.
type rediser interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	XRead(ctx context.Context, a *redis.XReadArgs) *redis.XStreamSliceCmd
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
}

var (
	_ rediser = (*redis.Client)(nil)
	_ rediser = (*redis.ClusterClient)(nil)
	_ rediser = (*redis.Ring)(nil)
	_ rediser = redis.UniversalClient(nil)

	_ limiter.Store = (*Store)(nil)
)

// Store is a limiter.Store kept in Redis. It holds no state of its own
// beyond the client, so any number of Stores (and processes) may share a
// Redis. It is safe for concurrent use; the zero value is not usable,
// call New.
type Store struct {
	c    rediser
	keys keys
	// batches: every key lives on the one server c talks to, so one
	// script call may sync several.
	batches bool
	// noFunctions: the server would not run the rate script as a
	// function (functions.go); EVALSHA runs it.
	noFunctions atomic.Bool
}

// Option configures a Store.
type Option interface{ apply(*options) }

type options struct {
	prefix string
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithKeyPrefix puts prefix before every Redis key, ahead of the hash
// tag, for Redis ACL key patterns (~prefix*) on a shared Redis. It must
// not contain '{' or '}', which would change the hash tag.
func WithKeyPrefix(prefix string) Option {
	return optionFunc(func(o *options) { o.prefix = prefix })
}

// New returns a Store of service's keys on client: a *redis.Client
// (single node or Sentinel), *redis.ClusterClient, *redis.Ring or any
// redis.UniversalClient. The client should not retry (MaxRetries -1):
// the limiter's next sync is the retry. service namespaces every key, so
// replica sets with different services never share state. New panics if
// a key prefix holds '{' or '}'.
func New(client rediser, service string, opts ...Option) *Store {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	if strings.ContainsAny(o.prefix, "{}") {
		panic(fmt.Sprintf("redisstore: key prefix %q holds a brace", o.prefix))
	}
	_, single := client.(*redis.Client)
	return &Store{c: client, keys: newKeys(o.prefix, service), batches: single}
}

// clampU and clampI bound the scripts' inputs to limiter.MaxExact, the
// largest integer every double in the scripts holds exactly.
func clampU(v uint64) uint64 { return min(v, limiter.MaxExact) }

func clampI(v int64) int64 { return max(min(v, limiter.MaxExact), -limiter.MaxExact) }

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// Sync applies items for replica in one pipeline and fills out[i] for
// items[i]. On a single node (or Sentinel's master) one call of the rate
// script syncs up to batchKeys keys; on a Cluster or Ring, whose keys
// live on different nodes, each key has its own call.
func (s *Store) Sync(ctx context.Context, replica string, items []limiter.SyncItem, out []limiter.SyncResult) error {
	if len(items) == 0 {
		return nil
	}
	if len(out) < len(items) {
		return errors.New("redisstore: sync: out shorter than items")
	}
	for i := range items {
		if err := checkItem(&items[i]); err != nil {
			return fmt.Errorf("redisstore: sync %q: %w", items[i].Key, err)
		}
	}
	calls, starts := s.rateCalls(replica, items)
	cmds, err := s.rateRound(ctx, calls)
	if err != nil {
		return wrap("sync", err)
	}
	for i, c := range cmds {
		from, to := starts[i], starts[i]+len(calls[i].keys)
		if err := decodeSyncs(c, items[from:to], out[from:to]); err != nil {
			return err
		}
	}
	s.publish(ctx, replica, items, out)
	return nil
}

// rateCalls groups items into rate script calls, each with the index of
// its first item: up to batchKeys keys a call when s batches, else one.
func (s *Store) rateCalls(replica string, items []limiter.SyncItem) ([]call, []int) {
	per := 1
	if s.batches {
		per = batchKeys
	}
	calls := make([]call, 0, (len(items)+per-1)/per)
	starts := make([]int, 0, cap(calls))
	var ra rateArgs
	for i := range items {
		if len(calls) == 0 || len(calls[len(calls)-1].keys) == per {
			if len(calls) > 0 {
				calls[len(calls)-1].args = ra.args
			}
			n := min(per, len(items)-i)
			ra = rateArgs{args: append(make([]any, 0, 1+ruleArgs+n*keyArgs), replica), rules: ra.rules[:0]}
			calls = append(calls, call{keys: make([]string, 0, n)})
			starts = append(starts, i)
		}
		c := &calls[len(calls)-1]
		c.keys = append(c.keys, s.keys.rate(items[i].Key))
		ra.add(&items[i])
	}
	if len(calls) > 0 {
		calls[len(calls)-1].args = ra.args
	}
	return calls, starts
}

// batchKeys is the most keys one rate script call syncs: enough to spread
// the call's fixed cost, few enough that the script never holds Redis
// for long.
const batchKeys = 32

// keyArgs is about how many arguments an item of one window adds to a
// call beside its rule: a reference to the rule, 14 fields, a hit or a
// share hit (2) and a floor; ruleArgs about how many a rule of one
// window takes the first time a call names it. A call's arguments are
// sized from them at once: with 16 for both, the slice grew once or
// twice in most calls, some 5 KB a round of ten keys.
const (
	keyArgs  = 20
	ruleArgs = 15
)

// checkItem refuses what the maths cannot run: no window, a period under
// the clock's microsecond, a token bucket without a rate.
func checkItem(it *limiter.SyncItem) error {
	if len(it.Windows) == 0 {
		return errors.New("no window")
	}
	for i, w := range it.Windows {
		if w.Period < time.Microsecond {
			return fmt.Errorf("window %d: period under 1µs", i)
		}
		if it.Algorithm == limiter.TokenBucket && w.Limit == 0 {
			return fmt.Errorf("window %d: token bucket without rate", i)
		}
	}
	return nil
}

// rateArgs builds one rate script call's arguments: the replica, then
// per item a reference to its rule and its own fields. A rule goes in
// full once a call, with the first item of it; a later item of the same
// rule names it by its index (rate.lua's ARGV).
type rateArgs struct {
	args  []any
	rules []*limiter.SyncItem // the items that gave the call's rules
}

// add appends an item's arguments.
func (ra *rateArgs) add(it *limiter.SyncItem) {
	for i, r := range ra.rules {
		if sameRule(r, it) {
			ra.args = append(ra.args, i+1)
			ra.appendKeyArgs(it)
			return
		}
	}
	ra.rules = append(ra.rules, it)
	ra.args = append(ra.args, 0, int(it.Algorithm), len(it.Windows))
	for _, w := range it.Windows {
		ra.args = append(ra.args, micros(w.Period), clampU(w.Limit), clampU(w.Capacity(it.Algorithm)))
	}
	ra.args = append(ra.args, strconv.FormatFloat(shareOf(it), 'g', -1, 64), max(it.Replicas, 1), micros(it.Lease),
		clampI(it.ShareEpoch), clampI(int64(it.Sharers)), clampI(int64(it.SharersNext)), clampI(int64(it.SharersPrev)), len(it.Gone))
	for _, g := range it.Gone {
		ra.args = append(ra.args, g)
	}
	for _, ds := range [...][]limiter.ShrunkSharer{it.Shrunk, it.ShrunkPrev} {
		ra.args = append(ra.args, len(ds))
		for _, d := range ds {
			ra.args = append(ra.args, d.Name, max(d.N, 0))
		}
	}
	ra.appendKeyArgs(it)
}

// shareOf is an item's share of the free budget, 1 unless in (0, 1].
func shareOf(it *limiter.SyncItem) float64 {
	if it.Share > 0 && it.Share <= 1 {
		return it.Share
	}
	return 1 // also NaN
}

// sameRule reports whether two items' rule arguments are the same.
func sameRule(a, b *limiter.SyncItem) bool {
	if a.Algorithm != b.Algorithm || shareOf(a) != shareOf(b) || max(a.Replicas, 1) != max(b.Replicas, 1) ||
		micros(a.Lease) != micros(b.Lease) || a.ShareEpoch != b.ShareEpoch || a.Sharers != b.Sharers ||
		a.SharersNext != b.SharersNext || a.SharersPrev != b.SharersPrev || len(a.Windows) != len(b.Windows) || !slices.Equal(a.Gone, b.Gone) ||
		!slices.Equal(a.Shrunk, b.Shrunk) || !slices.Equal(a.ShrunkPrev, b.ShrunkPrev) {
		return false
	}
	for i, w := range a.Windows {
		v := b.Windows[i]
		if micros(w.Period) != micros(v.Period) || clampU(w.Limit) != clampU(v.Limit) ||
			clampU(w.Capacity(a.Algorithm)) != clampU(v.Capacity(b.Algorithm)) {
			return false
		}
	}
	return true
}

// appendKeyArgs appends an item's own fields, those of its key.
func (ra *rateArgs) appendKeyArgs(it *limiter.SyncItem) {
	args := append(ra.args, clampU(it.Unused), clampU(it.Want), clampU(it.Waiting), clampU(it.Denied), len(it.Hits))
	for _, h := range it.Hits {
		args = append(args, clampI(h.At), clampI(h.N))
	}
	args = append(args, clampI(it.Release), len(it.ShareHits))
	for _, h := range it.ShareHits {
		args = append(args, clampI(h.At), clampI(h.N))
	}
	if len(it.Floor) == len(it.Windows) {
		args = append(args, len(it.Floor), clampI(it.FloorGen))
		for _, f := range it.Floor {
			args = append(args, stateArg(f))
		}
	} else {
		args = append(args, 0, 0)
	}
	if it.ShareFloor == (limiter.WindowState{}) {
		args = append(args, "")
	} else {
		args = append(args, stateArg(it.ShareFloor))
	}
	args = append(args, clampU(it.Lent), bit(it.Borrow), max(it.Shrink, 0), clampU(it.Probe), bit(it.ReleaseAhead), bit(it.ReleasePrev),
		clampU(it.Hold), clampI(it.HoldUntil))
	ra.args = args
}

// bit is b as the scripts read it: 1 or 0.
func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stateArg is a window state as the record holds one: "epoch cur prev
// tat", each clamped to what the script's doubles hold exactly.
func stateArg(s limiter.WindowState) string {
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, clampI(s.Epoch), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(clampU(s.Cur)), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(clampU(s.Prev)), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, clampI(s.TAT), 10)
	return string(b)
}

// decodeSyncs reads one rate.lua reply, one entry per item, into out.
func decodeSyncs(c *redis.Cmd, items []limiter.SyncItem, out []limiter.SyncResult) error {
	v, err := c.Slice()
	if err == nil && len(v) != len(items) {
		err = fmt.Errorf("%d replies for %d keys", len(v), len(items))
	}
	if err != nil {
		return fmt.Errorf("redisstore: sync %q: reply: %w", items[0].Key, err)
	}
	for i := range items {
		if err := decodeSync(v[i], len(items[i].Windows), &out[i]); err != nil {
			return fmt.Errorf("redisstore: sync %q: %w", items[i].Key, err)
		}
	}
	return nil
}

// decodeSync reads one key's reply: now, credit, the others'
// reservations and static shares held, pressed, expires, contended (1,
// or 2 to shrink; plus 4 filled), the record's generation, the share lent, the probe's
// units charged, then epoch, cur, prev and TAT per window.
func decodeSync(reply any, windows int, out *limiter.SyncResult) error {
	const head = 10
	r, ok := reply.([]any)
	if !ok || len(r) != head+4*windows {
		return fmt.Errorf("reply %v for %d windows", reply, windows)
	}
	v := make([]int64, len(r))
	for i, x := range r {
		if v[i], ok = x.(int64); !ok {
			return fmt.Errorf("reply %v for %d windows", reply, windows)
		}
	}
	ws := make([]limiter.WindowState, windows)
	for i := range ws {
		w := v[head+4*i:]
		ws[i] = limiter.WindowState{Epoch: w[0], Cur: uint64(w[1]), Prev: uint64(w[2]), TAT: w[3]}
	}
	*out = limiter.SyncResult{Credit: uint64(v[1]), Others: satAdd(uint64(v[2]), uint64(v[3])), Held: uint64(v[3]), Windows: ws, Now: v[0],
		Pressed: v[4] == 1, Expires: v[5], Contended: v[6]&3 != 0, Gen: v[7], Lent: uint64(v[8]), Probed: uint64(v[9]), Shrink: v[6]&3 == 2,
		Filled: v[6]&4 != 0}
	return nil
}

// satAdd is a + b, saturating at the largest uint64 as the reference's
// Others does: every unit is held by the shares of an epoch the item
// does not know (2^53 - 1) on top of the reservations.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// SyncSlots applies concurrency items for replica in one pipeline.
func (s *Store) SyncSlots(ctx context.Context, replica string, items []limiter.SlotItem, out []limiter.SlotResult) error {
	if len(items) == 0 {
		return nil
	}
	if len(out) < len(items) {
		return errors.New("redisstore: sync slots: out shorter than items")
	}
	calls := make([]call, len(items))
	for i := range items {
		it := &items[i]
		calls[i] = call{keys: []string{s.keys.slots(it.Key)}, args: []any{
			replica, clampU(it.Max), clampU(it.Held), clampU(it.Want), micros(it.Lease),
		}}
	}
	cmds, err := s.evalRound(ctx, slotsScript, calls)
	if err != nil {
		return wrap("sync slots", err)
	}
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err == nil && len(v) != 3 {
			err = fmt.Errorf("%d values", len(v))
		}
		if err != nil {
			return fmt.Errorf("redisstore: sync slots %q: reply: %w", items[i].Key, err)
		}
		out[i] = limiter.SlotResult{Granted: uint64(v[1]), Others: uint64(v[2]), Now: v[0]}
	}
	return nil
}

// Release drops replica's reservations on keys and its slots on slotKeys,
// in one pipeline. Its static share records stay: they count until their
// epoch ends.
func (s *Store) Release(ctx context.Context, replica string, keys, slotKeys []string) error {
	if len(keys)+len(slotKeys) == 0 {
		return nil
	}
	field := reservationField(replica)
	pipe := s.c.Pipeline()
	for _, k := range keys {
		pipe.HDel(ctx, s.keys.rate(k), field)
	}
	for _, k := range slotKeys {
		pipe.HDel(ctx, s.keys.slots(k), field)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap("release", err)
	}
	return nil
}
