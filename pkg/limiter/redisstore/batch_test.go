package redisstore

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// TestRateCalls: on a single-node client a round's items share script
// calls, at most batchKeys keys each; on a Cluster client every item has
// its own call. Every item lands in exactly one call, in order, with its
// own arguments.
func TestRateCalls(t *testing.T) {
	item := func(key string) limiter.SyncItem {
		return limiter.SyncItem{Key: key, Windows: []limiter.Window{{Limit: 10, Period: 1e9}}, Want: 1, Replicas: 1}
	}
	keys := func(n, distinct int) []limiter.SyncItem {
		var items []limiter.SyncItem
		for i := range n {
			items = append(items, item(fmt.Sprint("k", i%distinct)))
		}
		return items
	}
	single := New(redis.NewClient(&redis.Options{}), "svc")
	cluster := New(redis.NewClusterClient(&redis.ClusterOptions{}), "svc")
	for _, tc := range []struct {
		name  string
		s     *Store
		items []limiter.SyncItem
		calls int
	}{
		{"single node, 70 keys", single, keys(70, 70), 3},       // 32 | 32 | 6
		{"single node, 20 keys twice", single, keys(50, 20), 2}, // k0-k19, k0-k11 | k12-k19, k0-k9
		{"cluster", cluster, keys(50, 20), 50},
	} {
		items := tc.items
		calls, starts := tc.s.rateCalls("r", items)
		if len(calls) != tc.calls || len(starts) != len(calls) {
			t.Fatalf("%s: %d calls, %d starts, want %d", tc.name, len(calls), len(starts), tc.calls)
		}
		next := 0
		for i, c := range calls {
			if starts[i] != next || len(c.keys) > batchKeys {
				t.Errorf("%s: call %d starts at item %d with %d keys, want item %d and at most %d", tc.name, i, starts[i], len(c.keys), next, batchKeys)
			}
			for j, k := range c.keys {
				if k != tc.s.keys.rate(items[next+j].Key) {
					t.Errorf("%s: call %d key %d is %q, not item %q's", tc.name, i, j, k, items[next+j].Key)
				}
			}
			want := rateArgs{args: []any{"r"}}
			for j := range c.keys {
				want.add(&items[next+j])
			}
			if !reflect.DeepEqual(c.args, want.args) {
				t.Errorf("%s: call %d has args %v for %d keys, want %v", tc.name, i, c.args, len(c.keys), want.args)
			}
			next += len(c.keys)
		}
		if next != len(items) {
			t.Errorf("%s: calls cover %d of %d items", tc.name, next, len(items))
		}
	}
}

// TestRateArgsRules: a call gives each rule once, with its first item;
// a later item of the same rule names it by index, one of another rule
// gives its own. Any field of the rule makes it another rule.
func TestRateArgsRules(t *testing.T) {
	base := limiter.SyncItem{Windows: []limiter.Window{{Limit: 10, Period: time.Second}}, Share: 1, Replicas: 4,
		Lease: time.Minute, ShareEpoch: 7, Sharers: 4, SharersNext: 4}
	variants := []func(*limiter.SyncItem){
		func(it *limiter.SyncItem) { it.Algorithm = limiter.SlidingWindow },
		func(it *limiter.SyncItem) { it.Windows = []limiter.Window{{Limit: 11, Period: time.Second}} },
		func(it *limiter.SyncItem) { it.Windows = []limiter.Window{{Limit: 10, Period: time.Minute}} },
		func(it *limiter.SyncItem) {
			it.Windows = append(it.Windows, limiter.Window{Limit: 100, Period: time.Minute})
		},
		func(it *limiter.SyncItem) { it.Share = 0.5 },
		func(it *limiter.SyncItem) { it.Replicas = 3 },
		func(it *limiter.SyncItem) { it.Lease = time.Second },
		func(it *limiter.SyncItem) { it.ShareEpoch = 8 },
		func(it *limiter.SyncItem) { it.Sharers = 3 },
		func(it *limiter.SyncItem) { it.SharersNext = 5 },
	}
	for i, v := range variants {
		other := base
		v(&other)
		same := base
		same.Want, same.Hits = 5, []limiter.Hit{{At: 1, N: 2}} // the key's own fields
		ra := rateArgs{args: []any{"r"}}
		ra.add(&base)
		full := len(ra.args)
		ra.add(&same)
		if ra.args[full] != 1 {
			t.Errorf("variant %d: the same rule's item begins with %v, want index 1", i, ra.args[full])
		}
		at := len(ra.args)
		ra.add(&other)
		if ra.args[at] != 0 || len(ra.rules) != 2 {
			t.Errorf("variant %d: another rule's item begins with %v (%d rules), want 0 and its rule", i, ra.args[at], len(ra.rules))
		}
		again := len(ra.args)
		ra.add(&other)
		if ra.args[again] != 2 {
			t.Errorf("variant %d: the second rule again begins with %v, want index 2", i, ra.args[again])
		}
	}
}

// BenchmarkRateCalls builds the calls of a round of 100 keys of one rule
// with static shares, one hit each, as a replica's sync round does.
func BenchmarkRateCalls(b *testing.B) {
	s := New(redis.NewClient(&redis.Options{}), "svc")
	items := make([]limiter.SyncItem, 100)
	for i := range items {
		items[i] = limiter.SyncItem{Key: fmt.Sprint("user=", i), Windows: []limiter.Window{{Limit: 100, Period: time.Minute}},
			Want: 10, Share: 1, Replicas: 4, Lease: 3 * time.Second, ShareEpoch: 29000000, Sharers: 4, SharersNext: 4,
			Hits: []limiter.Hit{{At: 1764950000000000 + int64(i), N: 1}}}
	}
	b.ReportAllocs()
	for b.Loop() {
		calls, _ := s.rateCalls("replica-0", items)
		if len(calls) != 4 {
			b.Fatal(len(calls))
		}
	}
}
