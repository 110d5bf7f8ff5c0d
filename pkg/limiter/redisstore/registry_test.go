package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// TestRegistryForgets: the registry forgets a replica 25 h after its
// lease ended, and the oldest ones past 1024, moving since to the latest
// lease end forgotten, as the reference store does. Redis TIME cannot be
// faked, so the past is written into Redis as the heartbeat script would
// have written it, and replayed into the reference store on its clock.
func TestRegistryForgets(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	hour := int64(time.Hour / time.Microsecond)
	type past struct {
		id              string
		joined, expires int64
	}
	for _, tc := range []struct {
		name    string
		members func(now int64) []past
		since   func(now int64) int64 // at least
		listed  int
	}{
		{"age", func(now int64) []past {
			return []past{
				{"gone", now - 40*hour, now - 26*hour},
				{"kept", now - 30*hour, now - 24*hour},
				{"live", now - 2*hour, now + hour},
			}
		}, func(now int64) int64 { return now - 26*hour }, 3},
		{"count", func(now int64) []past {
			var ps []past
			for i := range 1030 {
				ps = append(ps, past{fmt.Sprint("r", i), now - 2*hour, now - hour + int64(i)*1000})
			}
			return ps
		}, func(now int64) int64 { return now - hour + 6*1000 }, 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := redisstore.New(client, newService())
			clock := limitertest.NewClock(time.Now())
			ref := memstore.New(clock)
			now := time.Now().UnixMicro()
			for _, p := range tc.members(now) {
				clock.Set(time.UnixMicro(p.joined))
				if _, err := ref.Heartbeat(ctx, p.id, time.Duration(p.expires-p.joined)*time.Microsecond); err != nil {
					t.Fatal(err)
				}
				if err := client.ZAdd(ctx, st.RegistryKey(), redis.Z{Score: float64(p.expires), Member: p.id}).Err(); err != nil {
					t.Fatal(err)
				}
				if err := client.HSet(ctx, st.JoinedKey(), "j:"+p.id, p.joined, "v:"+p.id, "3").Err(); err != nil {
					t.Fatal(err)
				}
			}
			got, err := st.Heartbeat(ctx, "me", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			clock.Set(time.UnixMicro(got.Now))
			want, err := ref.Heartbeat(ctx, "me", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if !sameMembership(got, want) {
				t.Fatalf("redis %+v\nreference %+v", summary(got), summary(want))
			}
			if got.Since < tc.since(now) || len(got.Members) != tc.listed {
				t.Errorf("since %d, %d members; want since at least %d, %d members", got.Since, len(got.Members), tc.since(now), tc.listed)
			}
			// The forgotten are gone from both halves of the registry.
			n, err := client.HLen(ctx, st.JoinedKey()).Result()
			if err != nil || n != 2*int64(len(got.Members))+1 { // j: and v: of each, and since
				t.Errorf("joined instants and versions: %d fields, %v; want %d", n, err, 2*len(got.Members)+1)
			}
			// A forgotten replica that comes back joins anew.
			back, err := st.Heartbeat(ctx, tc.members(now)[0].id, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, m := range back.Members {
				found = found || m.Joined == back.Now
			}
			if !found {
				t.Errorf("a forgotten replica back: no member joined at %d in %v", back.Now, summary(back))
			}
		})
	}
}

func summary(m limiter.Membership) string {
	if len(m.Members) > 8 {
		return fmt.Sprintf("{Replicas:%d Now:%d Since:%d Members:%d}", m.Replicas, m.Now, m.Since, len(m.Members))
	}
	return fmt.Sprintf("%+v", m)
}

// TestRegistryOldVersion: a replica of a version that does not count a
// sliding window's static shares heartbeats through a script that sets
// no v: field, and one that counts a token bucket's only when its burst
// is its rate sets "1"; the registry lists both without Member.Ahead, and
// one of this version with it, kept by its earlier incarnation.
func TestRegistryOldVersion(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	st := redisstore.New(client, newService())
	now := time.Now().UnixMicro()
	// The old version's heartbeat, as its script writes it.
	if err := client.ZAdd(ctx, st.RegistryKey(), redis.Z{Score: float64(now + 60_000_000), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, st.JoinedKey(), "j:old", now).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, st.RegistryKey(), redis.Z{Score: float64(now + 60_000_000), Member: "v1"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, st.JoinedKey(), "j:v1", now, "v:v1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, st.RegistryKey(), redis.Z{Score: float64(now + 60_000_000), Member: "v2"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, st.JoinedKey(), "j:v2", now, "v:v2", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Heartbeat(ctx, "new", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // new's lease ends: it joins again
	m, err := st.Heartbeat(ctx, "new", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sliding, declares := map[string][]bool{}, map[string][]bool{}
	for _, x := range m.Members {
		sliding[x.Name] = append(sliding[x.Name], x.Ahead)
		declares[x.Name] = append(declares[x.Name], x.DeclaresAhead)
	}
	if fmt.Sprint(sliding["old"]) != "[false]" || fmt.Sprint(sliding["v1"]) != "[false]" || fmt.Sprint(sliding["v2"]) != "[true]" ||
		fmt.Sprint(sliding["new"]) != "[true true]" {
		t.Fatalf("Ahead by member: %v; want old and v1 false, v2 and new's two incarnations true", sliding)
	}
	if fmt.Sprint(declares["v2"]) != "[false]" || fmt.Sprint(declares["new"]) != "[true true]" {
		t.Fatalf("DeclaresAhead by member: %v; want v2 false, new's two incarnations true", declares)
	}
	if v, err := client.HGet(ctx, st.JoinedKey(), "v:v1").Result(); err != nil || v != "1" {
		t.Errorf("v1's version: %q, %v; want it left as it was", v, err)
	}
	if m.AheadReady(m.Now+int64(30*time.Second/time.Microsecond), int64(time.Minute/time.Microsecond), 3*time.Second) {
		t.Error("AheadReady with the old replica a sharer")
	}
}
