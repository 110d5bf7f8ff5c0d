package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		give  string
		check func(*testing.T, redisOptions)
	}{
		{"redis://localhost:6379/2", func(t *testing.T, o redisOptions) {
			s := single(t, o)
			equal(t, "addr", s.Addr, "localhost:6379")
			equal(t, "db", s.DB, 2)
			equal(t, "tls", s.TLSConfig == nil, true)
			equal(t, "read timeout", s.ReadTimeout, redisIOTimeout)
			equal(t, "dial timeout", s.DialTimeout, redisDialTimeout)
		}},
		{"  rediss://u:p%40ss@cache.example:6380  ", func(t *testing.T, o redisOptions) {
			s := single(t, o)
			equal(t, "user", s.Username, "u")
			equal(t, "password", s.Password, "p@ss")
			equal(t, "tls", s.TLSConfig != nil, true)
		}},
		{"redis://h:1?read_timeout=5s&max_retries=4", func(t *testing.T, o redisOptions) {
			s := single(t, o)
			equal(t, "read timeout from the URL", s.ReadTimeout, 5*time.Second)
			equal(t, "retries, always off", s.MaxRetries, -1)
		}},
		{"redis-sentinel://:secret@s1:26379,s2:26380/my%20master?db=3&sentinel_password=sp", func(t *testing.T, o redisOptions) {
			if o.failover == nil || o.single != nil || o.cluster != nil {
				t.Fatalf("not a Sentinel client: %+v", o)
			}
			f := o.failover
			equal(t, "master", f.MasterName, "my master")
			equal(t, "sentinels", strings.Join(f.SentinelAddrs, ","), "s1:26379,s2:26380")
			equal(t, "password", f.Password, "secret")
			equal(t, "sentinel password", f.SentinelPassword, "sp")
			equal(t, "db", f.DB, 3)
			equal(t, "retries", f.MaxRetries, -1)
			equal(t, "context deadlines", f.ContextTimeoutEnabled, true)
		}},
		{"redis-sentinel://[::1]:26379/m", func(t *testing.T, o redisOptions) {
			equal(t, "sentinels", strings.Join(o.failover.SentinelAddrs, ","), "[::1]:26379")
		}},
		{"redis-0:7000,redis-1:7000, redis-2:7000", func(t *testing.T, o redisOptions) {
			c := cluster(t, o)
			equal(t, "seeds", strings.Join(c.Addrs, ","), "redis-0:7000,redis-1:7000,redis-2:7000")
			equal(t, "retries", c.MaxRetries, -1)
			equal(t, "context deadlines", c.ContextTimeoutEnabled, true)
			equal(t, "tls", c.TLSConfig == nil, true)
		}},
		{"rediss://u:pw@a:7000,rediss://u:pw@b:7001", func(t *testing.T, o redisOptions) {
			c := cluster(t, o)
			equal(t, "seeds", strings.Join(c.Addrs, ","), "a:7000,b:7001")
			equal(t, "user", c.Username, "u")
			equal(t, "password", c.Password, "pw")
			equal(t, "tls", c.TLSConfig != nil, true)
		}},
		{"redis://a:7000,b:7001", func(t *testing.T, o redisOptions) {
			equal(t, "seeds", strings.Join(cluster(t, o).Addrs, ","), "a:7000,b:7001")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			o, err := parseRedisURL(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestParseRedisURLErrors(t *testing.T) {
	tests := []struct{ give, want string }{
		{"", "empty"},
		{"   ", "empty"},
		{"http://h:1", "scheme"},
		{"localhost:6379", "ambiguous"},
		{"redis://h:1?bogus=1", "bogus"},
		{"redis://:hunter2@h:port", "redis URL"},
		{"a:1,,b:2", "seed 2 is empty"},
		{"a:1,b", "address"},
		{"a:1,b:x", "bad port"},
		{"a:1,b:70000", "bad port"},
		{"a:1,:2", "no host"},
		{"redis://a:1/1,redis://b:2/1", "database 0"},
		{"redis://u:p@a:1,redis://b:2", "same scheme"},
		{"redis://a:1,rediss://b:2", "same scheme"},
		{"redis://a:1?dial_timeout=1s,b:2", "options"},
		{"http://a:1,b:2", "seed 1"},
		{"redis-sentinel://", "master name"},
		{"redis-sentinel://h:1", "master name"},
		{"redis-sentinel://h:1/", "master name"},
		{"redis-sentinel://h:1/m/x", "'/'"},
		{"redis-sentinel://h:1,/m", "address"},
		{"redis-sentinel://h/m", "address"},
		{"redis-sentinel://h:1/m?db=x", "db"},
		{"redis-sentinel://h:1/m?db=-1", "db"},
		{"redis-sentinel://h:1/m?foo=1", "unknown option"},
		{"redis-sentinel://user:pw@h:1/m", "user name"},
		{"redis-sentinel://:%zz@h:1/m", "percent-encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := parseRedisURL(tt.give)
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestNewRedisClient connects to a real node, Cluster and Sentinel.
func TestNewRedisClient(t *testing.T) {
	node := redistest.Start(t)
	clu := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t, node, "primary")
	tests := []struct {
		name string
		give string
		want func(redis.UniversalClient) bool
	}{
		{"node", "redis://" + node.Addr, isType[*redis.Client]},
		{"cluster", strings.Join(clu.Addrs, ","), isType[*redis.ClusterClient]},
		{"sentinel", "redis-sentinel://" + sentinel.Addr + "/primary", isType[*redis.Client]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newRedisClient(tt.give, redisTLS{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !tt.want(c) {
				t.Errorf("client of type %T", c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Set(ctx, "k-"+tt.name, "v", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := node.Client(t).Get(ctx, "k-"+tt.name).Result(); tt.name != "cluster" && (err != nil || v != "v") {
				t.Errorf("value on the node: %q, %v", v, err)
			}
		})
	}
}

func isType[T redis.UniversalClient](c redis.UniversalClient) bool {
	_, ok := c.(T)
	return ok
}

func single(t *testing.T, o redisOptions) *redis.Options {
	t.Helper()
	if o.single == nil || o.failover != nil || o.cluster != nil {
		t.Fatalf("not a single-node client: %+v", o)
	}
	equal(t, "retries", o.single.MaxRetries, -1)
	equal(t, "context deadlines", o.single.ContextTimeoutEnabled, true)
	return o.single
}

func cluster(t *testing.T, o redisOptions) *redis.ClusterOptions {
	t.Helper()
	if o.cluster == nil || o.single != nil || o.failover != nil {
		t.Fatalf("not a cluster client: %+v", o)
	}
	return o.cluster
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
