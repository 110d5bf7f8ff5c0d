package redisstore

import (
	"fmt"
	"testing"

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
	argsPerItem := len(appendRateArgs(nil, &keys(1, 1)[0]))
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
			if len(c.args) != 1+argsPerItem*len(c.keys) || c.args[0] != "r" {
				t.Errorf("%s: call %d has %d args for %d keys", tc.name, i, len(c.args), len(c.keys))
			}
			next += len(c.keys)
		}
		if next != len(items) {
			t.Errorf("%s: calls cover %d of %d items", tc.name, next, len(items))
		}
	}
}
