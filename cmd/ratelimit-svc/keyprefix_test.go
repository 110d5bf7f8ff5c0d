package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

// TestRedisKeyPrefixFromUpstreamEnv: envoyproxy/ratelimit's
// CACHE_KEY_PREFIX puts a prefix before every Redis key the service
// writes, for ACL key patterns on a shared Redis.
func TestRedisKeyPrefixFromUpstreamEnv(t *testing.T) {
	rd := redistest.Start(t)
	dir := t.TempDir()
	policy := "domain: shared\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000}}]\n"
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startEnv(t, dir, map[string]string{"CACHE_KEY_PREFIX": "tenant7:"}, "--redis-url", "redis://"+rd.Addr, "--replica-id", "a")
	rls := ratelimitv3.NewRateLimitServiceClient(s.dial(t))
	admin := redis.NewClient(&redis.Options{Addr: rd.Addr})
	defer admin.Close()
	req := &ratelimitv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := rls.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		keys, err := admin.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			for _, k := range keys {
				if !strings.HasPrefix(k, "tenant7:") {
					t.Errorf("Redis key %q lacks the prefix tenant7:", k)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the service wrote no Redis key")
		}
		time.Sleep(20 * time.Millisecond) // the heartbeat and the key's sync run in the background
	}
}
