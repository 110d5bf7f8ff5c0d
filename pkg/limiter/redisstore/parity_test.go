package redisstore_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

var (
	paritySeed = flag.Uint64("parity.seed", 0, "seed of the parity test (0: from the clock)")
	parityRuns = flag.Int("parity.sequences", 400, "random operation sequences of the parity test")
)

// TestParity runs random operation sequences against a real Redis and
// requires every reply to equal, field by field, the reference store's
// reply to the same operation at the instant Redis applied it (the
// reply's Now: Redis TIME cannot be faked, so the reference follows it).
// Sequences run concurrently, each with its own service and reference
// store; the script cache and the functions are flushed twice on the
// way, so rounds take the NOSCRIPT and "Function not found" reload paths.
// Half the sequences run the rate script with EVALSHA, half as a function.
func TestParity(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	loads := &loadCounter{}
	client.AddHook(loads)
	seed := *paritySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -parity.seed=%d)", seed, seed)

	n := *parityRuns
	if testing.Short() {
		n = 60
	}
	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, 32)
		ops    atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		sum    tally
	)
	for i := range n {
		if i == n/3 || i == 2*n/3 {
			if err := client.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.FunctionFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if failed.Load() {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p := newParity(t, client, seed, i)
			if !p.run(40) {
				failed.Store(true)
			}
			ops.Add(int64(p.ops))
			mu.Lock()
			sum.add(p.tally)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("%d sequences, %d operations, %d script loads; replies: %d window rolls, %d weighted sliding windows, %d with credit, %d with others' reservations, %d pressed",
		n, ops.Load(), loads.n.Load(), sum.rolls, sum.weighted, sum.granted, sum.others, sum.pressed)
	t.Logf("floors of an earlier generation: %d items; items of a rule an earlier item of their call gave: %d; naming gone sharers: %d; of founding epochs: %d",
		sum.lifted, sum.ruleRefs, sum.gone, sum.founded)
	if sum.gone == 0 && !failed.Load() {
		t.Error("no item named a gone sharer: Gone went untested")
	}
	t.Logf("items naming sharers that declared a shrink: %d, of the epoch before: %d; shrinks declared: %d", sum.declared, sum.declaredPrev, sum.declares)
	if (sum.declared == 0 || sum.declaredPrev == 0 || sum.declares == 0) && !failed.Load() {
		t.Error("no item named a declared shrink, or none was declared: Shrunk and Declare went untested")
	}
	t.Logf("items of a sliding window with shares: %d; of a token bucket: %d; releasing ahead: %d; the epoch before: %d", sum.slidingShares, sum.bucketShares, sum.ahead, sum.releasePrev)
	if (sum.slidingShares == 0 || sum.bucketShares == 0 || sum.ahead == 0 || sum.releasePrev == 0) && !failed.Load() {
		t.Error("no item of a sliding window or a token bucket had shares, or none released ahead: they went untested")
	}
	if sum.ruleRefs == 0 && !failed.Load() {
		t.Error("no call named a rule an earlier item gave")
	}
	t.Logf("static shares: %d items with shares, %d with share hits, %d releasing; replies: %d with others' shares held, %d contended, %d lapsing at the epoch's end; %d contentions read, %d registry members listed",
		sum.shared, sum.shareHits, sum.releases, sum.held, sum.contended, sum.epochEnd, sum.feed, sum.members)
	t.Logf("loans: %d items asking, %d replies lending, %d items holding one", sum.borrowed, sum.lent, sum.relent)
	if (sum.lent == 0 || sum.relent == 0) && !failed.Load() {
		t.Error("no loan lent or held: SyncItem.Borrow and Lent went untested")
	}
	t.Logf("shrinks: %d items shrinking a share, %d replies asking sharers to shrink, %d of them of a sliding window", sum.shrinking, sum.shrinkable, sum.slidingShrink)
	if (sum.shrinking == 0 || sum.shrinkable == 0 || sum.slidingShrink == 0) && !failed.Load() {
		t.Error("no share shrunk or shrink asked for: SyncItem.Shrink and SyncResult.Shrink went untested")
	}
	t.Logf("probes: %d items probing, %d replies charging some of one", sum.probes, sum.probed)
	if (sum.probes == 0 || sum.probed == 0 || sum.probed == sum.probes) && !failed.Load() {
		t.Error("no probe charged, or none found no room: SyncItem.Probe and SyncResult.Probed went untested")
	}
	t.Logf("holds: %d items holding past their credit; %d replies filling a fixed window", sum.holds, sum.filled)
	if (sum.holds == 0 || sum.filled == 0) && !failed.Load() {
		t.Error("no hold outlasted its reply, or no item filled a window: SyncItem.Hold or SyncResult.Filled went untested")
	}
	if (loads.n.Load() == 0 || loads.fn.Load() < 3) && !failed.Load() {
		t.Errorf("scripts loaded %d times, the rate function %d: want both reloaded after SCRIPT FLUSH and FUNCTION FLUSH", loads.n.Load(), loads.fn.Load())
	}
}

// loadCounter counts SCRIPT LOAD (n) and FUNCTION LOAD (fn) commands.
type loadCounter struct{ n, fn atomic.Int64 }

func (*loadCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *loadCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && fmt.Sprint(a[1]) == "load" {
			switch cmd.Name() {
			case "script":
				l.n.Add(1)
			case "function":
				l.fn.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}
func (*loadCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// parity is one sequence: a Redis store and a reference store following
// Redis's clock.
type parity struct {
	t       *testing.T
	rng     *rand.Rand
	seq     int
	redis   *redisstore.Store
	ref     *memstore.Store
	clock   *limitertest.Clock
	keys    []string
	rules   map[string]limiter.Rule
	states  map[string][]limiter.WindowState
	gens    map[string]int64 // the key's record generation, from its last reply
	slots   []string
	ids     []string
	cursors map[string][2]string // replica → its contention cursors: redis, reference
	lastNow int64
	ops     int
	tally   tally
	log     []string
}

func newParity(t *testing.T, client *redis.Client, seed uint64, seq int) *parity {
	p := &parity{
		t:       t,
		rng:     rand.New(rand.NewPCG(seed, uint64(seq))),
		seq:     seq,
		redis:   redisstore.New(client, fmt.Sprintf("parity-%d", seq)),
		clock:   limitertest.NewClock(time.Now()),
		rules:   make(map[string]limiter.Rule),
		states:  make(map[string][]limiter.WindowState),
		gens:    make(map[string]int64),
		cursors: make(map[string][2]string),
	}
	p.ref = memstore.New(p.clock)
	if seq%2 == 1 { // half the sequences run the rate script with EVALSHA
		redisstore.NoFunctions(p.redis)
	}
	for i := range 1 + p.rng.IntN(3) {
		k := fmt.Sprintf("api|k=%d{x}:%c", i, rune(p.rng.IntN(256)))
		p.keys = append(p.keys, k)
		p.rules[k] = p.rule(seq%7 == 0)
		if i > 0 && p.rng.IntN(3) == 0 { // the rule of another key
			p.rules[k] = p.rules[p.keys[0]]
		}
	}
	for i := range 1 + p.rng.IntN(2) {
		p.slots = append(p.slots, fmt.Sprintf("conc|%d", i))
	}
	for i := range 2 + p.rng.IntN(3) {
		p.ids = append(p.ids, fmt.Sprintf("replica-%d", i))
	}
	p.lastNow = time.Now().UnixMicro()
	return p
}

var periods = []time.Duration{time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

const year = 365 * 24 * time.Hour

// rule draws a valid rule; extreme ones take limits near 2^32 and day or
// year windows, where the sliding window's products pass 2^53.
func (p *parity) rule(extreme bool) limiter.Rule {
	for {
		r := limiter.Rule{Algorithm: limiter.Algorithm(p.rng.IntN(3))}
		for range 1 + p.rng.IntN(3) {
			w := limiter.Window{Period: periods[p.rng.IntN(len(periods))], Limit: p.limit()}
			if extreme {
				w.Period = []time.Duration{24 * time.Hour, year}[p.rng.IntN(2)]
				w.Limit = 1<<32 - uint64(p.rng.IntN(3))
			}
			if r.Algorithm == limiter.TokenBucket {
				switch p.rng.IntN(4) {
				case 0:
					w.Burst = p.limit()
				case 1:
					w.Burst = w.Limit // a bucket with shares too
				}
			}
			r.Windows = append(r.Windows, w)
		}
		if r.Validate() == nil && tbFits(r) {
			return r
		}
	}
}

// changed draws a new rule for a live key: new limits on the same
// periods, or another number of windows (which resets the windows) of
// which the first keeps its period (the share records, which outlive
// the reset, count in it). A key's periods never change otherwise: the
// rule's fingerprint is part of the limiter's key, so a changed period is
// a new key.
func (p *parity) changed(r limiter.Rule) limiter.Rule {
	for {
		n := p.rule(false)
		n.Windows[0].Period = r.Windows[0].Period
		if len(n.Windows) == len(r.Windows) {
			for i := range n.Windows {
				n.Windows[i].Period = r.Windows[i].Period
			}
		}
		if n.Validate() == nil && tbFits(n) {
			return n
		}
	}
}

func (p *parity) limit() uint64 {
	switch p.rng.IntN(5) {
	case 0:
		return 1 + p.rng.Uint64N(5)
	case 1:
		return 1 + p.rng.Uint64N(100)
	case 2:
		return 1 + p.rng.Uint64N(100_000)
	case 3:
		return 1 << 32
	default:
		return 1 + p.rng.Uint64N(1<<32)
	}
}

// tbFits keeps a token bucket's tolerance under 2^50 µs, so arrival
// times with the debt the sequence pushes stay below 2^53.
func tbFits(r limiter.Rule) bool {
	if r.Algorithm != limiter.TokenBucket {
		return true
	}
	for _, w := range r.Windows {
		hi, lo := mul(w.Capacity(r.Algorithm), uint64(interval(w)))
		if hi != 0 || lo > 1<<50 {
			return false
		}
	}
	return true
}

func mul(a, b uint64) (uint64, uint64) {
	if a == 0 || b == 0 {
		return 0, 0
	}
	if a > math.MaxUint64/b {
		return 1, 0
	}
	return 0, a * b
}

// interval is the token bucket's emission interval in µs.
func interval(w limiter.Window) int64 {
	p, l := int64(w.Period/time.Microsecond), int64(w.Limit)
	return (p + l - 1) / l
}

func (p *parity) pick(s []string) string { return s[p.rng.IntN(len(s))] }

// run plays n operations; it reports false after the first mismatch.
func (p *parity) run(n int) bool {
	for range n {
		var ok bool
		switch x := p.rng.IntN(100); {
		case x < 55:
			ok = p.sync()
		case x < 66:
			ok = p.syncSlots()
		case x < 74:
			ok = p.heartbeat()
		case x < 79:
			ok = p.release()
		case x < 82:
			ok = p.leave()
		case x < 84:
			ok = p.declare()
		case x < 88:
			ok = p.contention()
		case x < 89: // long enough to roll 1 s windows and forget records
			time.Sleep(time.Duration(300+p.rng.IntN(900)) * time.Millisecond)
			ok = true
		default: // long enough to expire short leases
			time.Sleep(time.Duration(p.rng.IntN(25)) * time.Millisecond)
			ok = true
		}
		p.ops++
		if !ok {
			return false
		}
	}
	return true
}

func (p *parity) fail(format string, args ...any) bool {
	p.t.Helper()
	p.t.Errorf("sequence %d, op %d: %s\nhistory:\n%v", p.seq, p.ops, fmt.Sprintf(format, args...), p.log)
	return false
}

func (p *parity) sync() bool {
	replica := p.pick(p.ids)
	items := make([]limiter.SyncItem, 1+p.rng.IntN(3))
	for i := range items {
		items[i] = p.item(p.pick(p.keys))
		p.sameRule(items[:i+1])
	}
	got := make([]limiter.SyncResult, len(items))
	if err := p.redis.Sync(context.Background(), replica, items, got); err != nil {
		return p.fail("redis sync: %v", err)
	}
	for i := range items {
		want := make([]limiter.SyncResult, 1)
		p.clock.Set(time.UnixMicro(got[i].Now))
		if err := p.ref.Sync(context.Background(), replica, items[i:i+1], want); err != nil {
			return p.fail("reference sync: %v", err)
		}
		p.log = append(p.log, fmt.Sprintf("sync %s %+v → %+v", replica, items[i], got[i]))
		if !reflect.DeepEqual(got[i], want[0]) {
			return p.fail("sync %s item %+v\n redis     %+v\n reference %+v", replica, items[i], got[i], want[0])
		}
		p.count(&items[i], got[i])
		p.lastNow = got[i].Now
		p.states[items[i].Key] = got[i].Windows
		p.gens[items[i].Key] = got[i].Gen
	}
	return true
}

// sameRule gives the last of items, half the time, the rest of the rule
// of an earlier item of the call with its windows (the same key, or
// another of the same rule): a call sends a rule once, and later items of
// it name it (rate.lua's ARGV).
func (p *parity) sameRule(items []limiter.SyncItem) {
	it := &items[len(items)-1]
	for _, e := range items[:len(items)-1] {
		if e.Algorithm == it.Algorithm && reflect.DeepEqual(e.Windows, it.Windows) && p.rng.IntN(2) == 0 {
			it.Share, it.Replicas, it.Lease = e.Share, e.Replicas, e.Lease
			it.ShareEpoch, it.Sharers, it.SharersNext, it.Gone, it.Shrunk = e.ShareEpoch, e.Sharers, e.SharersNext, e.Gone, e.Shrunk
			it.ShrunkPrev = e.ShrunkPrev
			it.SharersPrev = e.SharersPrev
			p.tally.ruleRefs++
			return
		}
	}
}

// count tallies what a reply exercised, so the test can show its reach.
func (p *parity) count(it *limiter.SyncItem, r limiter.SyncResult) {
	prev := p.states[it.Key]
	for i, w := range r.Windows {
		if i < len(prev) && len(prev) == len(r.Windows) && w.Epoch > prev[i].Epoch {
			p.tally.rolls++
		}
		if it.Algorithm == limiter.SlidingWindow && w.Prev > 0 {
			p.tally.weighted++
		}
	}
	if r.Credit > 0 {
		p.tally.granted++
	}
	if r.Others > 0 {
		p.tally.others++
	}
	if r.Pressed {
		p.tally.pressed++
	}
	if len(it.Floor) > 0 && it.FloorGen != 0 && it.FloorGen < r.Gen {
		p.tally.lifted++
	}
	if it.ShareEpoch > 0 {
		p.tally.shared++
	}
	if len(it.ShareHits) > 0 {
		p.tally.shareHits++
	}
	if it.Release != 0 {
		p.tally.releases++
	}
	if r.Contended {
		p.tally.contended++
	}
	if it.Borrow {
		p.tally.borrowed++
	}
	if r.Lent > 0 {
		p.tally.lent++
	}
	if it.Lent > 0 {
		p.tally.relent++
	}
	if it.Shrink > it.Sharers && it.Sharers > 0 {
		p.tally.shrinking++
	}
	if r.Shrink {
		p.tally.shrinkable++
		if it.Algorithm == limiter.SlidingWindow {
			p.tally.slidingShrink++
		}
	}
	if it.Probe > 0 {
		p.tally.probes++
	}
	if it.Hold > r.Credit && it.HoldUntil > r.Now {
		p.tally.holds++
	}
	if r.Filled {
		p.tally.filled++
	}
	if r.Probed > 0 {
		p.tally.probed++
	}
	if r.Expires != r.Now+int64(it.Lease/time.Microsecond) {
		p.tally.epochEnd++
	}
	if it.ShareEpoch > 0 && len(it.Windows) == 1 && it.Algorithm != limiter.TokenBucket && r.Others > 0 {
		p.tally.held++ // a lower bound: others' reservations may make up Others
	}
	if it.ShareEpoch > 0 && len(it.Windows) == 1 && it.Algorithm == limiter.SlidingWindow {
		p.tally.slidingShares++
	}
	if it.ShareEpoch > 0 && len(it.Windows) == 1 && it.Algorithm == limiter.TokenBucket && it.Windows[0].Capacity(it.Algorithm) == it.Windows[0].Limit {
		p.tally.bucketShares++
	}
}

// tally counts what the replies exercised.
type tally struct {
	rolls, weighted, granted, others, pressed                             int64
	shared, shareHits, releases, held, contended, epochEnd, feed, members int64
	lifted                                                                int64 // items with a floor of an earlier generation
	ruleRefs                                                              int64 // items given an earlier item's rule in their call
	gone                                                                  int64 // items naming sharers that left (SyncItem.Gone)
	declared                                                              int64 // items naming sharers that declared a shrink (SyncItem.Shrunk)
	declares                                                              int64 // shrinks recorded in the registry (Store.Declare)
	declaredPrev                                                          int64 // items naming sharers of the epoch before that declared a shrink
	slidingShares                                                         int64 // items of a sliding window with shares
	bucketShares                                                          int64 // items of a token bucket with shares
	releasePrev                                                           int64 // items saying the epoch before's hits are all pushed
	ahead                                                                 int64 // items releasing the next epoch's share ahead
	founded                                                               int64 // items of founding epochs (Sharers < 0)
	borrowed, lent, relent                                                int64 // items asking a loan, replies lending, items saying a loan held
	shrinking, shrinkable                                                 int64 // items shrinking a share, replies asking sharers to shrink
	slidingShrink                                                         int64 // sliding-window replies asking sharers to shrink
	probes, probed                                                        int64 // items probing, replies charging some of a probe
	holds                                                                 int64 // items whose hold outlasts the reply and exceeds its credit
	filled                                                                int64 // replies saying the item filled a fixed window
}

func (t *tally) add(o tally) {
	t.rolls += o.rolls
	t.weighted += o.weighted
	t.granted += o.granted
	t.others += o.others
	t.pressed += o.pressed
	t.lifted += o.lifted
	t.ruleRefs += o.ruleRefs
	t.gone += o.gone
	t.declared += o.declared
	t.declares += o.declares
	t.declaredPrev += o.declaredPrev
	t.slidingShares += o.slidingShares
	t.slidingShrink += o.slidingShrink
	t.bucketShares += o.bucketShares
	t.releasePrev += o.releasePrev
	t.ahead += o.ahead
	t.founded += o.founded
	t.shared += o.shared
	t.shareHits += o.shareHits
	t.releases += o.releases
	t.held += o.held
	t.contended += o.contended
	t.epochEnd += o.epochEnd
	t.feed += o.feed
	t.members += o.members
	t.borrowed += o.borrowed
	t.lent += o.lent
	t.relent += o.relent
	t.shrinking += o.shrinking
	t.shrinkable += o.shrinkable
	t.probes += o.probes
	t.probed += o.probed
	t.holds += o.holds
	t.filled += o.filled
}

// item draws one key's sync: hits (late, future, on boundaries, refunds,
// huge), unused, want, waiting, denied, share, replicas and lease.
func (p *parity) item(key string) limiter.SyncItem {
	r := p.rules[key]
	if p.rng.IntN(25) == 0 { // a changed rule on a live key
		r = p.changed(r)
		p.rules[key] = r
	}
	it := limiter.SyncItem{
		Key: key, Algorithm: r.Algorithm, Windows: r.Windows,
		Unused: p.units(r), Want: p.units(r), Waiting: p.units(r),
		Share:    []float64{0, 1, 0.5, 1.0 / 3, 0.9, p.rng.Float64(), 2, -0.5}[p.rng.IntN(8)],
		Replicas: p.rng.IntN(6),
		Lease:    []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute}[p.rng.IntN(7)],
	}
	if p.rng.IntN(4) != 0 { // no waiters: a sliding window may stay unpressed
		it.Waiting = 0
	}
	if p.rng.IntN(8) == 0 {
		it.Denied = 1 + p.rng.Uint64N(3)
	}
	if p.rng.IntN(6) == 0 { // a hold: lapsed, ending now or soon, or past the lease
		it.Hold = p.units(r)
		it.HoldUntil = p.lastNow + []int64{-1000, 0, 500, 50_000, 120_000_000}[p.rng.IntN(5)]
	}
	if p.rng.IntN(4) == 0 { // a probe: a few units, as many as the window holds, or an odd number
		it.Probe = []uint64{1 + p.rng.Uint64N(3), p.units(r), math.MaxUint64}[p.rng.IntN(3)]
	}
	for range p.rng.IntN(4) {
		it.Hits = append(it.Hits, p.hit(r, key))
	}
	p.shares(&it, r, key)
	p.floors(&it, r, key)
	return it
}

// floors draws an item's floors, most items none: the windows as the
// key's last reply left them (a replica's view, against a store that kept
// them or, for a key new to it, lost them), or states of epochs around
// the store's, counts from none to past the limit; and for an item with
// share hits or a share epoch, a share floor.
func (p *parity) floors(it *limiter.SyncItem, r limiter.Rule, key string) {
	if p.rng.IntN(3) != 0 {
		return
	}
	if st := p.states[key]; len(st) == len(r.Windows) && p.rng.IntN(2) == 0 {
		it.Floor = st
	} else {
		it.Floor = make([]limiter.WindowState, len(r.Windows))
		for i, w := range r.Windows {
			it.Floor[i] = p.floorState(w, r.Algorithm)
		}
	}
	if g := p.gens[key]; g != 0 {
		// Of the record's generation, an earlier one (added beyond the
		// floors of it before), or a later one.
		it.FloorGen = []int64{0, g, g - 1, g - 1, g + 1}[p.rng.IntN(5)]
	}
	if it.ShareEpoch != 0 || len(it.ShareHits) > 0 {
		it.ShareFloor = p.floorState(r.Windows[0], r.Algorithm)
	}
}

// floorState draws one window's floor around the store's now.
func (p *parity) floorState(w limiter.Window, a limiter.Algorithm) limiter.WindowState {
	per := int64(w.Period / time.Microsecond)
	e := p.lastNow / per
	if a == limiter.TokenBucket { // an arrival time near now: far ones leave the exact range
		return limiter.WindowState{TAT: p.lastNow + p.rng.Int64N(2*per+1) - per}
	}
	count := func() uint64 {
		return []uint64{0, 1 + p.rng.Uint64N(w.Limit+2), w.Limit, 1 << 50}[p.rng.IntN(4)]
	}
	return limiter.WindowState{Epoch: []int64{e, e, e - 1, e + 1, e - 3, 0}[p.rng.IntN(6)], Cur: count(), Prev: count()}
}

// shares draws an item's static shares, mostly for rules of one fixed
// or sliding window (the others carry them too, now and then: the stores
// then record share hits and releases but count no shares): the share epoch
// (mostly the current one, or the one before, whose next may be the
// store's; now and then one the store has left or not reached, or none),
// sharers of it and of the next, share hits in the current and previous
// window (some empty, negative or huge) and a release instant (with no
// share epoch, a replica releasing a key it does not hold).
func (p *parity) shares(it *limiter.SyncItem, r limiter.Rule, key string) {
	single := len(r.Windows) == 1 && (r.Algorithm != limiter.TokenBucket || r.Windows[0].Capacity(r.Algorithm) == r.Windows[0].Limit)
	if p.rng.IntN(5) == 0 || !single && p.rng.IntN(3) != 0 {
		return
	}
	w := r.Windows[0]
	per := int64(w.Period / time.Microsecond)
	now := p.lastNow
	switch e := now / per; p.rng.IntN(10) {
	case 0:
	case 1:
		it.ShareEpoch = e - 1
	case 2:
		it.ShareEpoch = []int64{e - 2, e + 1, 1}[p.rng.IntN(3)]
	default:
		it.ShareEpoch = e
	}
	it.Sharers = p.rng.IntN(9) - 3
	it.SharersNext = it.Sharers
	if p.rng.IntN(3) == 0 {
		it.SharersNext = p.rng.IntN(9) - 3
	}
	it.SharersPrev = it.Sharers
	if p.rng.IntN(3) == 0 {
		it.SharersPrev = p.rng.IntN(9) - 3
	}
	if it.Sharers < 0 {
		p.tally.founded++
	}
	if p.rng.IntN(3) == 0 { // sharers that left: some with records, some twice, some not sharers at all
		for range 1 + p.rng.IntN(3) {
			it.Gone = append(it.Gone, p.pick(p.ids))
		}
		p.tally.gone++
	}
	if p.rng.IntN(3) == 0 { // declared shrinks: some with records, some twice, some gone, some not above the sharers
		for range 1 + p.rng.IntN(3) {
			it.Shrunk = append(it.Shrunk, limiter.ShrunkSharer{Name: p.pick(p.ids), N: max(it.Sharers, 0) + p.rng.IntN(4) - 1})
		}
		p.tally.declared++
	}
	if it.Algorithm != limiter.FixedWindow && p.rng.IntN(3) == 0 { // and of the epoch before
		for range 1 + p.rng.IntN(3) {
			it.ShrunkPrev = append(it.ShrunkPrev, limiter.ShrunkSharer{Name: p.pick(p.ids), N: max(it.SharersPrev, 0) + p.rng.IntN(4) - 1})
		}
		p.tally.declaredPrev++
	}
	if p.rng.IntN(4) == 0 { // past every epoch's end: credit from released shares lapses first
		it.Lease = 25 * time.Hour
	}
	size := limiter.ShareSize(w, limiter.ShareFraction(r.Algorithm, it.Share), it.Sharers)
	for range p.rng.IntN(4) {
		var h limiter.Hit
		switch p.rng.IntN(6) {
		case 0, 1:
			h.At = now + p.rng.Int64N(2000)
		case 2:
			h.At = now/per*per - 1 - p.rng.Int64N(per) // the previous window
		case 3:
			h.At = now/per*per + p.rng.Int64N(2) // on the boundary
		case 4:
			h.At = now + 5_000_000 // ahead of Redis: counts as now
		default:
			h.At = now - p.rng.Int64N(3*per+1) // late, or too late to count
		}
		switch p.rng.IntN(10) {
		case 0:
			h.N = 0
		case 1:
			h.N = -1 - p.rng.Int64N(int64(min(size, 1<<40))+1)
		case 2:
			h.N = int64(1) << (30 + p.rng.IntN(11))
		default:
			h.N = 1 + p.rng.Int64N(int64(min(size, 1<<40))+2)
		}
		if r.Algorithm == limiter.TokenBucket {
			room := p.bucketRoom(r, key)
			h.N = max(min(h.N, room), -room)
		}
		it.ShareHits = append(it.ShareHits, h)
	}
	switch p.rng.IntN(9) {
	case 0:
		it.Release = now + p.rng.Int64N(2000)
	case 1, 2:
		it.Release = (now/per + 1) * per // through the next epoch
	case 3:
		it.Release = now/per*per - 1 - p.rng.Int64N(per) // the previous epoch
	case 4:
		it.Release = now + p.rng.Int64N(3*per) // the next epoch or further: the next
	case 5:
		it.Release = []int64{-1, 1, -per, 1 << 62}[p.rng.IntN(4)]
	}
	if it.Release != 0 && p.rng.IntN(3) == 0 { // a share of the next epoch alone given up
		it.ReleaseAhead = true
		p.tally.ahead++
	}
	if p.rng.IntN(3) == 0 { // the epoch before's hits all pushed: a token bucket's held no more
		it.ReleasePrev = true
		p.tally.releasePrev++
	}
	switch p.rng.IntN(6) {
	case 0, 1: // a loan asked for
		it.Borrow = true
	case 2: // a loan held, one the store may have lost, or an odd one
		it.Lent = []uint64{1 + p.rng.Uint64N(size+1), size, 1 << 52, math.MaxUint64}[p.rng.IntN(4)]
		it.Borrow = p.rng.IntN(2) == 0
	}
	if p.rng.IntN(4) == 0 { // a shrink to the live count, beyond it, or an odd one
		it.Shrink = []int{it.Replicas, it.Sharers + 1, it.Replicas + 1 + p.rng.IntN(4), it.Sharers, -1, 1 << 40}[p.rng.IntN(6)]
	}
	if it.Release != 0 && p.rng.IntN(2) == 0 { // a share left to release, a window left to grant from
		it.Hits, it.ShareHits = nil, it.ShareHits[:min(len(it.ShareHits), 1)]
	}
}

func (p *parity) units(r limiter.Rule) uint64 {
	switch p.rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return 1 + p.rng.Uint64N(3)
	default:
		return p.rng.Uint64N(r.Windows[0].Capacity(r.Algorithm) + 2)
	}
}

func (p *parity) hit(r limiter.Rule, key string) limiter.Hit {
	w := r.Windows[p.rng.IntN(len(r.Windows))]
	per := int64(w.Period / time.Microsecond)
	now := p.lastNow
	var at int64
	switch p.rng.IntN(7) {
	case 0, 1:
		at = now + p.rng.Int64N(2000)
	case 2:
		at = now - p.rng.Int64N(2*per+1) // late: often the previous window
	case 3:
		at = now/per*per - p.rng.Int64N(2) // on the boundary
	case 4:
		at = (now/per - 1) * per // first instant of the previous window
	case 5:
		at = now + 5_000_000 // ahead of Redis: counts as now
	default:
		at = []int64{0, -5, 1}[p.rng.IntN(3)]
	}
	var n int64
	switch p.rng.IntN(8) {
	case 0:
		n = 0
	case 1, 2:
		n = -1 - p.rng.Int64N(int64(min(w.Limit, 1<<40)))
	case 3:
		n = int64(1) << (30 + p.rng.IntN(11))
	default:
		n = 1 + p.rng.Int64N(int64(min(w.Capacity(r.Algorithm), 1<<40)))
	}
	if r.Algorithm == limiter.TokenBucket { // refunds too: Go's n·interval must not wrap
		room := p.bucketRoom(r, key)
		n = max(min(n, room), -room)
	}
	return limiter.Hit{At: at, N: n}
}

// bucketRoom bounds a token bucket charge or refund so arrival times stay
// below 2^53 µs, the scripts' exact range (and n·interval far from int64
// overflow in the reference).
func (p *parity) bucketRoom(r limiter.Rule, key string) int64 {
	room := int64(1) << 40
	st := p.states[key]
	for i, w := range r.Windows {
		tat := p.lastNow + 10_000_000
		if i < len(st) {
			tat = max(tat, st[i].TAT)
		}
		room = min(room, max((1<<52-tat)/interval(w), 0))
	}
	return room / 32 // up to 3 hits and 3 share hits in each of 3 items of a round

}

func (p *parity) syncSlots() bool {
	replica := p.pick(p.ids)
	items := make([]limiter.SlotItem, 1+p.rng.IntN(2))
	for i := range items {
		items[i] = limiter.SlotItem{
			Key:   p.pick(p.slots),
			Max:   []uint64{0, 1, 3, 10, 1 << 32}[p.rng.IntN(5)],
			Held:  p.rng.Uint64N(6),
			Want:  p.rng.Uint64N(6),
			Lease: []time.Duration{0, time.Millisecond, 10 * time.Millisecond, time.Second}[p.rng.IntN(4)],
		}
	}
	got := make([]limiter.SlotResult, len(items))
	if err := p.redis.SyncSlots(context.Background(), replica, items, got); err != nil {
		return p.fail("redis sync slots: %v", err)
	}
	for i := range items {
		want := make([]limiter.SlotResult, 1)
		p.clock.Set(time.UnixMicro(got[i].Now))
		if err := p.ref.SyncSlots(context.Background(), replica, items[i:i+1], want); err != nil {
			return p.fail("reference sync slots: %v", err)
		}
		p.log = append(p.log, fmt.Sprintf("slots %s %+v → %+v", replica, items[i], got[i]))
		if got[i] != want[0] {
			return p.fail("sync slots %s %+v\n redis     %+v\n reference %+v", replica, items[i], got[i], want[0])
		}
		p.lastNow = got[i].Now
	}
	return true
}

func (p *parity) heartbeat() bool {
	replica := p.pick(p.ids)
	lease := []time.Duration{0, time.Millisecond, 20 * time.Millisecond, 3 * time.Second}[p.rng.IntN(4)]
	got, err := p.redis.Heartbeat(context.Background(), replica, lease)
	if err != nil {
		return p.fail("redis heartbeat: %v", err)
	}
	p.clock.Set(time.UnixMicro(got.Now))
	want, err := p.ref.Heartbeat(context.Background(), replica, lease)
	if err != nil {
		return p.fail("reference heartbeat: %v", err)
	}
	p.log = append(p.log, fmt.Sprintf("heartbeat %s %v → %+v", replica, lease, got))
	if !sameMembership(got, want) {
		return p.fail("heartbeat %s %v: redis %+v, reference %+v", replica, lease, got, want)
	}
	p.tally.members += int64(len(got.Members))
	p.lastNow = got.Now
	return true
}

// sameMembership compares memberships field by field, Members as sets.
func sameMembership(a, b limiter.Membership) bool {
	if a.Replicas != b.Replicas || a.Now != b.Now || a.Since != b.Since || len(a.Members) != len(b.Members) {
		return false
	}
	sorted := func(ms []limiter.Member) []limiter.Member {
		return slices.SortedFunc(slices.Values(ms), func(x, y limiter.Member) int {
			return cmp.Or(cmp.Compare(x.Joined, y.Joined), cmp.Compare(x.Expires, y.Expires))
		})
	}
	return slices.Equal(sorted(a.Members), sorted(b.Members))
}

func (p *parity) release() bool {
	replica := p.pick(p.ids)
	var keys, slots []string
	for _, k := range p.keys {
		if p.rng.IntN(2) == 0 {
			keys = append(keys, k)
		}
	}
	if p.rng.IntN(2) == 0 {
		slots = append(slots, p.pick(p.slots))
	}
	p.log = append(p.log, fmt.Sprintf("release %s %q %q", replica, keys, slots))
	if err := p.redis.Release(context.Background(), replica, keys, slots); err != nil {
		return p.fail("redis release: %v", err)
	}
	if err := p.ref.Release(context.Background(), replica, keys, slots); err != nil {
		return p.fail("reference release: %v", err)
	}
	return true
}

func (p *parity) leave() bool {
	replica := p.pick(p.ids)
	now, err := p.redis.LeaveNow(context.Background(), replica)
	if err != nil {
		return p.fail("redis leave: %v", err)
	}
	p.log = append(p.log, fmt.Sprintf("leave %s at %d", replica, now))
	p.clock.Set(time.UnixMicro(now))
	if err := p.ref.Leave(context.Background(), replica); err != nil {
		return p.fail("reference leave: %v", err)
	}
	p.lastNow = now
	return true
}

// declare declares a shrink (now and then none: a withdrawal) as a
// replica, on both stores: one Redis refuses (the replica is not live at
// its clock) is not applied to the reference, whose clock is behind it;
// one Redis records the reference must too. Heartbeats then compare the
// members' shrinks.
func (p *parity) declare() bool {
	replica := p.pick(p.ids)
	var d limiter.Declaration
	if p.rng.IntN(4) != 0 {
		d = limiter.Declaration{At: p.lastNow - p.rng.Int64N(2_000_000), N: 1 + p.rng.IntN(5), Until: p.lastNow + p.rng.Int64N(5_000_000)}
	}
	err := p.redis.Declare(context.Background(), replica, d)
	p.log = append(p.log, fmt.Sprintf("declare %s %+v → %v", replica, d, err))
	if err != nil {
		return true
	}
	if err := p.ref.Declare(context.Background(), replica, d); err != nil {
		return p.fail("reference declare %s: %v, where redis recorded it", replica, err)
	}
	p.tally.declares++
	return true
}

// contention reads the feed as every replica, each from its own cursors
// of each store (a replica's first read starts from now).
func (p *parity) contention() bool {
	for _, replica := range p.ids {
		cur := p.cursors[replica]
		got, gotNext, err := p.redis.Contention(context.Background(), replica, cur[0])
		if err != nil {
			return p.fail("redis contention: %v", err)
		}
		want, wantNext, err := p.ref.Contention(context.Background(), replica, cur[1])
		if err != nil {
			return p.fail("reference contention: %v", err)
		}
		p.log = append(p.log, fmt.Sprintf("contention %s %q → %d entries, %q", replica, cur[0], len(got), gotNext))
		if len(got) != len(want) || len(got) > 0 && !reflect.DeepEqual(got, want) {
			return p.fail("contention %s after %q, %q\n redis     %+v\n reference %+v", replica, cur[0], cur[1], got, want)
		}
		if gotNext == "" {
			return p.fail("contention %s after %q: empty cursor", replica, cur[0])
		}
		p.cursors[replica] = [2]string{gotNext, wantNext}
		p.tally.feed += int64(len(got))
	}
	return true
}
