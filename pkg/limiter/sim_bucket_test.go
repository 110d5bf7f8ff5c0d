package limiter_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// Simulations of token buckets with static shares (share_bucket.go).

// bucketRule is a token bucket of limit a period, whose capacity is the
// limit: one with static shares.
func bucketRule(limit uint64, period time.Duration) *limiter.Rule {
	return &limiter.Rule{Algorithm: limiter.TokenBucket, Windows: []limiter.Window{{Limit: limit, Period: period}}}
}

// checkBucket fails t for every key whose admits a token bucket of the
// rule's rate and capacity would have refused: replayed in order through
// such a bucket (exact, in ns; the rules of these tests refill a unit in
// a whole number of ns), no admit may find it empty. It returns how many
// admits did and the most units any went over by (one admit too many
// makes the ones after it count as over too, until the bucket catches
// up: the count says how long, the units how far).
func (r *keyRun) checkBucket(t *testing.T) (over int, most uint64) {
	t.Helper()
	return r.bucketExcess(func(k uint64, at time.Duration, units uint64) {
		if over++; over <= 5 || units > most {
			t.Errorf("key %d at %v: the bucket holds %d units fewer than were admitted", k, at, units)
		}
		most = max(most, units)
	})
}

// bucketExcess replays every key's admits as checkBucket does and calls
// found for each that found the bucket empty, with the units it went
// over by; it returns how many did, and the most units.
func (r *keyRun) bucketExcess(found func(k uint64, at time.Duration, units uint64)) (over int, most uint64) {
	w := r.s.rule.Windows[0]
	T := int64(w.Period) / int64(w.Limit)
	tol := int64(w.Capacity(limiter.TokenBucket)) * T
	for k, at := range r.admits {
		slices.Sort(at)
		var tat int64
		for _, a := range at {
			tat = max(tat, a) + T
			if tat-a <= tol {
				continue
			}
			units := uint64((tat - a - tol + T - 1) / T)
			over++
			most = max(most, units)
			found(k, time.Duration(a-r.start.UnixNano()), units)
		}
	}
	return over, most
}

// TestSimBucketChurn is TestSimSlidingChurn of a token bucket of 50 per
// 10 s: while replicas join, stop and (in half the runs) crash every few
// seconds, no admit finds a key's bucket empty, but for the hits a
// crashed replica admitted from credit and had not pushed (a unit a crash
// at most is allowed). Its unreported share hits are not lost: the store
// settles the crashed replica's share whole in the epoch after.
func TestSimBucketChurn(t *testing.T) {
	simBucketChurn(t, bucketRule(50, 10*time.Second))
}

// TestSimBurstBucketChurn is TestSimBucketChurn of a token bucket of 50
// per 10 s with a burst of 20 (run as 20 every 4 s, bucket_epoch.go).
func TestSimBurstBucketChurn(t *testing.T) {
	simBucketChurn(t, burstRule(50, 10*time.Second, 20))
}

func simBucketChurn(t *testing.T, rule *limiter.Rule) {
	largeSim(t)
	t.Parallel()
	for _, crashes := range []bool{false, true} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("crashes %v, seed %d", crashes, seed), func(t *testing.T) {
				t.Parallel()
				crashed := 0
				r := keySim{rule: rule, replicas: 4, keys: 1000, zipf: 1.1, rate: 2000,
					duration: 90 * time.Second, measureFrom: 90 * time.Second,
					during: func(r *keyRun) { crashed = churn(r, seed, crashes) }}.run(t)
				over, most := r.bucketExcess(func(uint64, time.Duration, uint64) {})
				t.Logf("%d requests, %d replicas started, %d crashed; %d admits over, by %d at most", r.requests, len(r.lims), crashed, over, most)
				if most > uint64(crashed) {
					t.Errorf("a key's admits emptied its bucket by %d units, after %d crashes", most, crashed)
				}
			})
		}
	}
}

// TestSimManyKeysFarBelowBucket: TestSimManyKeysFarBelowLimit of a token
// bucket of 100 a minute: once the replicas hold their static shares
// (from the second minute that begins a lease after they joined, as a
// sliding window's), nothing is denied, no decision waits for the store,
// no key syncs and no admit finds the bucket empty.
func TestSimManyKeysFarBelowBucket(t *testing.T) {
	simManyKeysFarBelow(t, bucketRule(100, time.Minute), warmUp+time.Minute)
}

// TestSimSkewedManyKeysBucket: 1 000 keys of a token bucket of 10 a
// second with Zipf(1.1) popularity over 4 replicas, 3 000 requests a
// second, the hot keys far over their rate: no admit finds the bucket
// empty, and a key sent at most half its rate in a second, and in the
// second before, is never denied: such a key never empties its bucket,
// and is decided from the shares or from credit the store has room for.
func TestSimSkewedManyKeysBucket(t *testing.T) {
	largeSim(t)
	t.Parallel()
	st := &feedCounter{Store: memstore.New(nil)}
	r := keySim{rule: bucketRule(10, time.Second), replicas: 4, keys: 1000, zipf: 1.1, rate: 3000, store: st,
		duration: 20 * time.Second, measureFrom: 5 * time.Second}.run(t)
	over, most := r.checkBucket(t)
	quiet, denied := r.quietDenials(t, 2)
	t.Logf("%d requests; %d denied after 5 s; %d admits over, by %d at most; %d quiet key windows with denials; %d decisions waited for the store, the longest %v",
		r.requests, denied, over, most, quiet, r.waited, r.longest)
	skewedWaits(t, r, st)
}

// quietDenials fails t for every key window with a denial that was sent
// no more than 1/part of the limit, nor the window before it; it returns
// how many, and all the denials.
func (r *keyRun) quietDenials(t *testing.T, part uint64) (quiet int, denied uint64) {
	t.Helper()
	for _, n := range r.denied {
		denied += n
	}
	quiet = r.quietWindows(part, func(w [2]uint64, n, sent, before uint64) {
		t.Errorf("key %d, window %d: %d denied though sent %d, and %d the window before: %v", w[0], w[1], n, sent, before, r.deniedHow[w])
	})
	return quiet, denied
}

// quietWindows calls found for the first five key windows with a denial
// that were sent no more than 1/part of the limit, nor the window before
// them, and returns how many there are.
func (r *keyRun) quietWindows(part uint64, found func(w [2]uint64, denied, sent, before uint64)) (quiet int) {
	limit := r.s.rule.Windows[0].Limit
	for w, n := range r.denied {
		sent, before := r.offered[w], r.offered[[2]uint64{w[0], w[1] - 1}]
		if sent <= limit/part && before <= limit/part {
			if quiet++; quiet <= 5 {
				found(w, n, sent, before)
			}
		}
	}
	return quiet
}

// TestSimSlowStoreBucket is TestSimSlowStore of a token bucket, from the
// minute its shares begin: every store call 50 ms late, 5 000 keys of
// Zipf(1.1) popularity, the busiest far over their rate. No admit finds
// the bucket empty, and no key window sent no more than half the limit,
// nor the one before it, sees a denial. The shares of an epoch hold half
// of it: between a quarter and half a key may need credit, and the
// others' releases, which a store 50 ms late brings in two or three
// round trips. A waiter waited for them only within StoreTimeout + 50 ms
// (lateRoundWait) before: 37 such key windows a run were denied.
func TestSimSlowStoreBucket(t *testing.T) {
	largeSim(t)
	t.Parallel()
	from := warmUp + time.Minute
	r := keySim{rule: bucketRule(100, time.Minute), replicas: 4, keys: 5000, rate: 500, zipf: 1.1,
		duration: from + 70*time.Second, measureFrom: from,
		during: func(r *keyRun) { r.faulty.SetDelay(50 * time.Millisecond) }}.run(t)
	half, _ := r.quietDenials(t, 2)
	quiet := r.quietWindows(4, func([2]uint64, uint64, uint64, uint64) {})
	over, most := r.checkBucket(t)
	t.Logf("%d requests; %d admits over, by %d at most; %d key windows with denials, %d of them sent no more than half the limit (and the window before), %d no more than a quarter; the longest decision %v",
		r.requests, over, most, len(r.denied), half, quiet, r.longest)
}

// TestSimBucketSharesAtEpochEdges: two replicas of a token bucket of 100
// a minute (shares of 25 each an epoch) spend their whole shares a second
// before a minute ends, and again just after the next one begins, from
// their shares; 10 s later one of them asks for 50 more. The bucket then
// holds the 18 units 11 s refilled, and the store grants them, no more:
// its charges of the shares (the hits pushed, the shares of the minute
// before settled as it ended, share_bucket.go) leave it exact here.
func TestSimBucketSharesAtEpochEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := bucketRule(100, time.Minute)
		ls := runReplicas(t, memstore.New(nil), "a", "b")
		key := []byte("edge|" + rule.Fingerprint())
		run := &keyRun{s: keySim{rule: rule}, admits: map[uint64][]int64{}, start: time.Now()}
		local := 0
		ask := func(l *limiter.Limiter, n int) (admitted int) {
			out := make([]limiter.Result, 1)
			for range n {
				if ok, err := l.Decide([]limiter.Request{{Key: key, Rule: rule}}, out); err != nil {
					t.Fatal(err)
				} else if ok {
					admitted++
					if out[0].Mode == limiter.ModeLocal {
						local++
					}
					run.admits[0] = append(run.admits[0], time.Now().UnixNano())
				}
			}
			return admitted
		}
		end := time.Now().Truncate(time.Minute).Add(4 * time.Minute) // the shares are held from the third minute on
		time.Sleep(time.Until(end.Add(-time.Second)))
		before := ask(ls[0], 25) + ask(ls[1], 25)
		time.Sleep(time.Until(end.Add(10 * time.Millisecond)))
		after := ask(ls[0], 25) + ask(ls[1], 25)
		time.Sleep(10 * time.Second)
		more := ask(ls[0], 50)
		t.Logf("admitted %d before the minute's end, %d after, %d of them local; 10 s later, %d of 50 more", before, after, local, more)
		if before+after != 100 || local < 100 {
			t.Errorf("the shares admitted %d, %d of them locally, want 100", before+after, local)
		}
		if over, most := run.checkBucket(t); over > 0 {
			t.Errorf("%d admits found the bucket empty, by %d units at most", over, most)
		}
		if more < 17 {
			t.Errorf("%d of 50 more admitted where the bucket held 18", more)
		}
	})
}

// TestSimBucketBurstAfterIdle: a key of a token bucket of 100 a minute,
// never used, gets 100 requests at once 5 s into a minute on one of 1, 2
// or 4 replicas: all 100 are admitted, the bucket was full. The shares of
// the minute before, which no replica reported, are held as spent as the
// minute began; the replica that asks says it pushed its own, and the
// others' releases, when the key is published contended, say theirs
// (SyncItem.ReleasePrev). Settling them as spent at the key's first sync
// of the minute instead admitted 58–60.
func TestSimBucketBurstAfterIdle(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		synctest.Test(t, func(t *testing.T) {
			rule := bucketRule(100, time.Minute)
			ls := runReplicas(t, memstore.New(nil), []string{"a", "b", "c", "d"}[:n]...)
			key := []byte("burst|" + rule.Fingerprint())
			time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(4*time.Minute + 5*time.Second)))
			out := make([]limiter.Result, 1)
			admitted := 0
			for range 100 {
				if ok, err := ls[0].Decide([]limiter.Request{{Key: key, Rule: rule}}, out); err != nil {
					t.Fatal(err)
				} else if ok {
					admitted++
				}
			}
			if admitted != 100 {
				t.Errorf("%d replicas: %d of a full bucket's 100 admitted", n, admitted)
			}
		})
	}
}
