package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMaxKeysDeniesNewKeysAtTheBound: with --max-keys 3, the fourth client
// address is answered OVER_LIMIT (its key cannot be held, so it is not
// admitted untracked), the held ones still OK, and the decisions are
// counted in mode "full".
func TestMaxKeysDeniesNewKeysAtTheBound(t *testing.T) {
	s := start(t, "../../config", "--max-keys", "3")
	conn := s.dial(t)
	rls := ratelimitv3.NewRateLimitServiceClient(conn)
	ask := func(addr string) ratelimitv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &ratelimitv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{{
				Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := range 3 {
		if code := ask(fmt.Sprint("198.51.100.", i)); code != ratelimitv3.RateLimitResponse_OK {
			t.Fatalf("key %d of 3: %v", i, code)
		}
	}
	if code := ask("198.51.100.9"); code != ratelimitv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a fourth key with --max-keys 3: %v, want OVER_LIMIT", code)
	}
	if code := ask("198.51.100.1"); code != ratelimitv3.RateLimitResponse_OK {
		t.Fatalf("a held key at the bound: %v, want OK", code)
	}
	if m := get(t, "http://"+s.httpAddr+"/metrics"); !strings.Contains(m, `ratelimit_decisions_total{domain="api",mode="full",outcome="over_limit"} 1`) {
		t.Fatalf("no decision counted in mode full:\n%s", m)
	}
}
