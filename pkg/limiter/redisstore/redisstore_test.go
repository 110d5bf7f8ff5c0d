package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// services hands every store of a test binary its own service name.
var services atomic.Int64

func newService() string { return fmt.Sprint("svc-", services.Add(1)) }

func TestStoreSuite(t *testing.T) {
	client := redistest.Start(t).Client(t)
	limitertest.StoreSuite(t, func(*testing.T) limiter.Store {
		return redisstore.New(client, newService())
	})
}

// trickyKeys differ only in bytes special to key layouts and hash tags.
var trickyKeys = []string{
	"", "a", "{a}", "a{b}", "{a}b", "a}b{", "}{", "{}", "{{}}", "a|b", "a:b", `a\:b`, "a\\", "\x00", "\x00\xff", "api|k={x}|v=1",
}

func TestKeyLayout(t *testing.T) {
	tag := regexp.MustCompile(`^\{[0-9a-f]{16}\}:[rcnjf]:`)
	seen := map[string]string{}
	add := func(redisKey, what string) {
		t.Helper()
		if !tag.MatchString(redisKey) {
			t.Errorf("%s: Redis key %q does not start with a hash tag", what, redisKey)
		}
		if prev, ok := seen[redisKey]; ok {
			t.Errorf("%s and %s share the Redis key %q", prev, what, redisKey)
		}
		seen[redisKey] = what
	}
	for _, svc := range []string{"svc", "svc:a", "svc\\", "{svc}", ""} {
		s := redisstore.New(nil, svc)
		add(s.RegistryKey(), fmt.Sprintf("registry of %q", svc))
		add(s.JoinedKey(), fmt.Sprintf("joined instants of %q", svc))
		add(s.FeedKey(), fmt.Sprintf("contention feed of %q", svc))
		for _, k := range []string{s.JoinedKey(), s.FeedKey()} {
			if k[:18] != s.RegistryKey()[:18] {
				t.Errorf("service key %q is not in the registry's slot %q", k, s.RegistryKey())
			}
		}
		for _, k := range append(trickyKeys, "a:b:c", "b:c") {
			rk, sk := s.RateKey(k), s.SlotsKey(k)
			add(rk, fmt.Sprintf("rate key %q of %q", k, svc))
			add(sk, fmt.Sprintf("slots key %q of %q", k, svc))
			if rk[:18] != sk[:18] {
				t.Errorf("rate and slots keys of %q differ in tag: %q, %q", k, rk, sk)
			}
			if !strings.HasSuffix(rk, ":"+k) {
				t.Errorf("rate key %q does not end with the key %q", rk, k)
			}
		}
	}
	// Service "a" with key "b:c" and service "a:b" with key "c" differ.
	if redisstore.New(nil, "a").RateKey("b:c") == redisstore.New(nil, "a:b").RateKey("c") {
		t.Error("service and key boundary is ambiguous")
	}
	p := redisstore.New(nil, "svc", redisstore.WithKeyPrefix("rl:"))
	if k := p.RateKey("k"); !strings.HasPrefix(k, "rl:{") {
		t.Errorf("prefixed key %q", k)
	}
	defer func() {
		if recover() == nil {
			t.Error("a prefix with a brace did not panic")
		}
	}()
	redisstore.New(nil, "svc", redisstore.WithKeyPrefix("rl{x}:"))
}

// TestCluster runs the suite on a three-master Redis Cluster and checks
// that a key's state stays in the slot of its hash tag, while keys spread
// over the masters.
func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()

	t.Run("Suite", func(t *testing.T) {
		limitertest.StoreSuite(t, func(*testing.T) limiter.Store {
			return redisstore.New(client, newService())
		})
	})

	t.Run("Slots", func(t *testing.T) {
		st := redisstore.New(client, newService())
		keys := trickyKeys
		for i := range 40 {
			keys = append(keys, fmt.Sprintf("api|user=%d", i))
		}
		items := make([]limiter.SyncItem, len(keys))
		slots := make([]limiter.SlotItem, len(keys))
		for i, k := range keys {
			items[i] = limiter.SyncItem{Key: k, Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 1, Lease: time.Minute}
			slots[i] = limiter.SlotItem{Key: k, Max: 3, Held: 1, Lease: time.Minute}
		}
		if err := st.Sync(ctx, "a", items, make([]limiter.SyncResult, len(items))); err != nil {
			t.Fatal(err)
		}
		if err := st.SyncSlots(ctx, "a", slots, make([]limiter.SlotResult, len(slots))); err != nil {
			t.Fatal(err)
		}
		used := map[int64]bool{}
		for _, k := range keys {
			rk, sk := st.RateKey(k), st.SlotsKey(k)
			want := keySlot(t, client, rk[:strings.Index(rk, "}")+1])
			for _, redisKey := range []string{rk, sk} {
				if got := keySlot(t, client, redisKey); got != want {
					t.Errorf("%q: slot %d, its tag's %d", redisKey, got, want)
				}
				if n, err := client.Exists(ctx, redisKey).Result(); err != nil || n != 1 {
					t.Errorf("%q: exists %d, %v", redisKey, n, err)
				}
			}
			used[want] = true
		}
		masters := atomic.Int64{}
		err := client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if n, err := c.DBSize(ctx).Result(); err != nil || n > 0 {
				masters.Add(1)
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(used) < len(keys)/2 || masters.Load() < 3 {
			t.Errorf("%d keys in %d slots on %d masters: not spread", len(keys), len(used), masters.Load())
		}
	})

	t.Run("NoScript", func(t *testing.T) {
		st := redisstore.New(client, newService())
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		syncAll(t, st)
	})

	t.Run("Functions", func(t *testing.T) {
		// The rate function is loaded on every master, and again on
		// every master after FUNCTION FLUSH.
		st := redisstore.New(client, newService())
		name, _, _ := redisstore.RateFunction()
		for round := range 2 {
			err := client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() })
			if err != nil {
				t.Fatal(err)
			}
			syncAll(t, st)
			err = client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
				if err == nil && (len(libs) != 1 || len(libs[0].Functions) != 1 || libs[0].Functions[0].Name != name) {
					err = fmt.Errorf("master %s: libraries %+v, want the one of %s", c.Options().Addr, libs, name)
				}
				return err
			})
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if !st.UsesFunctions() {
			t.Fatal("a Redis 7 cluster: the rate script did not run as a function")
		}
	})
}

// TestSentinel runs the suite through a Sentinel failover client, as a
// universal client: the store talks to the master it names.
func TestSentinel(t *testing.T) {
	node := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, node, "primary")
	var client redis.UniversalClient = redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "primary", SentinelAddrs: []string{sentinel.Addr}, MaxRetries: -1,
	})
	t.Cleanup(func() { client.Close() })
	limitertest.StoreSuite(t, func(*testing.T) limiter.Store {
		return redisstore.New(client, newService())
	})
}

func keySlot(t *testing.T, c *redis.ClusterClient, key string) int64 {
	t.Helper()
	n, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// syncAll runs every script once.
func syncAll(t *testing.T, st *redisstore.Store) {
	t.Helper()
	ctx := context.Background()
	items := []limiter.SyncItem{
		{Key: "a", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 3, Lease: time.Minute},
		{Key: "b", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 4, Lease: time.Minute},
	}
	out := make([]limiter.SyncResult, 2)
	if err := st.Sync(ctx, "r", items, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Credit != 3 || out[1].Credit != 4 {
		t.Errorf("credits %d, %d; want 3, 4", out[0].Credit, out[1].Credit)
	}
	sout := make([]limiter.SlotResult, 1)
	if err := st.SyncSlots(ctx, "r", []limiter.SlotItem{{Key: "a", Max: 2, Want: 5, Lease: time.Minute}}, sout); err != nil {
		t.Fatal(err)
	}
	if sout[0].Granted != 2 {
		t.Errorf("granted %d, want 2", sout[0].Granted)
	}
	if m, err := st.Heartbeat(ctx, "r", time.Minute); err != nil || m.Replicas != 1 {
		t.Fatalf("heartbeat: %+v, %v", m, err)
	}
}

// TestNoScript: every script is reloaded after SCRIPT FLUSH (the rate
// script's too, run with EVALSHA as before Redis 7.0).
func TestNoScript(t *testing.T) {
	client := redistest.Start(t).Client(t)
	loads := &loadCounter{}
	client.AddHook(loads)
	st := redisstore.NoFunctions(redisstore.New(client, newService()))
	syncAll(t, st)
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	before := loads.n.Load()
	syncAll(t, st)
	if got := loads.n.Load() - before; got != 3 {
		t.Errorf("%d scripts loaded after SCRIPT FLUSH, want 3", got)
	}
}

// TestExpiry: every key of a rate or concurrency key carries an expiry no
// later than when the reference store would forget it; the registry, which
// like the reference's remembers since, stays.
func TestExpiry(t *testing.T) {
	client := redistest.Start(t).Client(t)
	st := redisstore.New(client, newService())
	syncAll(t, st)
	ctx := context.Background()
	for _, k := range []string{st.RateKey("a"), st.SlotsKey("a")} {
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > time.Hour+time.Second {
			t.Errorf("%q: PTTL %v, want in (0, 1h]", k, ttl)
		}
	}
	for _, k := range []string{st.RegistryKey(), st.JoinedKey()} {
		if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Errorf("%q: PTTL %v, %v; want a key without expiry", k, ttl, err)
		}
	}
	// A key whose every reservation is released still expires with its
	// windows.
	if err := st.Release(ctx, "r", []string{"a"}, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := client.Exists(ctx, st.SlotsKey("a")).Result(); n != 0 {
		t.Errorf("slots key without slots still exists")
	}
}

func TestErrors(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	st := redisstore.New(client, newService())
	ctx := context.Background()
	items := []limiter.SyncItem{{Key: "k", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 1, Lease: time.Second}}
	out := make([]limiter.SyncResult, 1)

	t.Run("BadItem", func(t *testing.T) {
		for _, it := range []limiter.SyncItem{
			{Key: "k"},
			{Key: "k", Windows: []limiter.Window{{Limit: 1, Period: time.Nanosecond}}},
			{Key: "k", Algorithm: limiter.TokenBucket, Windows: []limiter.Window{{Period: time.Second}}},
		} {
			err := st.Sync(ctx, "a", []limiter.SyncItem{it}, out)
			if err == nil || errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Errorf("%+v: %v, want a plain error", it, err)
			}
		}
	})

	t.Run("WrongType", func(t *testing.T) {
		if err := client.Set(ctx, st.RateKey("k"), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer client.Del(ctx, st.RateKey("k"))
		err := st.Sync(ctx, "a", items, out)
		if err == nil || errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Errorf("sync of a key of another type: %v, want a plain error", err)
		}
	})

	t.Run("Deadline", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer c.Close()
		slow := redisstore.New(c, newService())
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Do(ctx, "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		err := slow.Sync(short, "a", items, out)
		if !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Errorf("sync past its deadline: %v, want ErrStoreUnavailable", err)
		}
		time.Sleep(300 * time.Millisecond)
	})

	t.Run("Canceled", func(t *testing.T) {
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		err := st.Sync(canceled, "a", items, out)
		if err == nil || errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Errorf("sync with a canceled context: %v, want a plain error", err)
		}
	})

	t.Run("Down", func(t *testing.T) {
		srv.Stop()
		checks := map[string]error{
			"sync":       st.Sync(ctx, "a", items, out),
			"sync slots": st.SyncSlots(ctx, "a", []limiter.SlotItem{{Key: "k", Max: 1}}, make([]limiter.SlotResult, 1)),
			"release":    st.Release(ctx, "a", []string{"k"}, nil),
			"leave":      st.Leave(ctx, "a"),
		}
		_, checks["heartbeat"] = st.Heartbeat(ctx, "a", time.Second)
		for op, err := range checks {
			if !errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Errorf("%s with Redis down: %v, want ErrStoreUnavailable", op, err)
			}
		}
	})
}
