package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// TestRateFunction: rate.lua makes a library of one function, named by
// a hash of its code, which a server loads; loading it again (another
// replica of the same version) is no error.
func TestRateFunction(t *testing.T) {
	name, lib, err := redisstore.RateFunction()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "rls_rate_") || !strings.HasPrefix(lib, "#!lua name=rls_lib_rate_") {
		t.Fatalf("function %q, library %.40q: want rls_rate_<hash> in rls_lib_rate_<hash>", name, lib)
	}
	client := redistest.Start(t).Client(t)
	st := redisstore.New(client, "svc")
	syncAll(t, st)
	if !st.UsesFunctions() {
		t.Fatal("a Redis 7 server: the rate script did not run as a function")
	}
	libs, err := client.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
	if err != nil || len(libs) != 1 || len(libs[0].Functions) != 1 || libs[0].Functions[0].Name != name {
		t.Fatalf("libraries %+v, %v: want the one of %s", libs, err, name)
	}
	syncAll(t, redisstore.New(client, "svc2")) // a second store finds it loaded
}

// TestRateFunctionReloaded: functions flushed (or a server restarted
// empty) are loaded again by the next round, whose calls all apply.
func TestRateFunctionReloaded(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	st := redisstore.New(client, "svc")
	items := []limiter.SyncItem{{Key: "a", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 2, Lease: time.Minute}}
	out := make([]limiter.SyncResult, 1)
	for i := range 3 {
		if err := client.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := st.Sync(ctx, "r", items, out); err != nil {
			t.Fatalf("sync %d after FUNCTION FLUSH: %v", i, err)
		}
		if out[0].Credit != 2 {
			t.Fatalf("sync %d: credit %d, want 2 (the reservation kept)", i, out[0].Credit)
		}
	}
	if !st.UsesFunctions() {
		t.Fatal("a flush made the store give up functions")
	}
}

// TestRateFunctionRefused: a server that will not run functions for the
// store, as before Redis 7.0 (no FCALL or FUNCTION) or with an ACL that
// denies them, gets the rate script with EVALSHA, and every call of the
// refused round applies once.
func TestRateFunctionRefused(t *testing.T) {
	t.Run("no such commands", func(t *testing.T) {
		srv := redistest.Start(t, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")
		refused(t, srv.Client(t))
	})
	t.Run("ACL", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client(t)
		if err := admin.Do(context.Background(), "ACL", "SETUSER", "rls", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "rls", Password: "pw", MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		refused(t, c)
	})
}

func refused(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	st := redisstore.New(c, "svc")
	items := []limiter.SyncItem{
		{Key: "a", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Hits: []limiter.Hit{{At: 1, N: 1}}, Lease: time.Minute},
		{Key: "b", Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Hits: []limiter.Hit{{At: 1, N: 2}}, Lease: time.Minute},
	}
	for i := range items {
		items[i].Hits[0].At = time.Now().UnixMicro()
	}
	out := make([]limiter.SyncResult, 2)
	if err := st.Sync(ctx, "r", items, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Windows[0].Cur != 1 || out[1].Windows[0].Cur != 2 {
		t.Fatalf("windows %+v, %+v: want the hits charged once", out[0].Windows, out[1].Windows)
	}
	if st.UsesFunctions() {
		t.Fatal("still calling functions after the server refused them")
	}
	syncAll(t, st)
}

// TestRateFunctionRing: on a Ring, whose keys live on several servers,
// the rate function is loaded on every shard.
func TestRateFunctionRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, MaxRetries: -1})
	t.Cleanup(func() { ring.Close() })
	st := redisstore.New(ring, "svc")
	ctx := context.Background()
	items := make([]limiter.SyncItem, 20)
	for i := range items {
		items[i] = limiter.SyncItem{Key: fmt.Sprint("k", i), Windows: []limiter.Window{{Limit: 10, Period: time.Hour}}, Want: 2, Lease: time.Minute}
	}
	out := make([]limiter.SyncResult, len(items))
	if err := st.Sync(ctx, "r", items, out); err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if r.Credit != 2 {
			t.Fatalf("item %d: credit %d, want 2", i, r.Credit)
		}
	}
	name, _, _ := redisstore.RateFunction()
	for _, srv := range []*redistest.Server{a, b} {
		libs, err := srv.Client(t).FunctionList(ctx, redis.FunctionListQuery{}).Result()
		if err != nil || len(libs) != 1 || libs[0].Functions[0].Name != name {
			t.Fatalf("shard %s: libraries %+v, %v: want the one of %s", srv.Addr, libs, err, name)
		}
	}
	if !st.UsesFunctions() {
		t.Fatal("a Ring of Redis 7 servers: the rate script did not run as a function")
	}
}
