package main

import (
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

// TestCounterServer: the per-request counter on a real redis-server
// admits a descriptor's limit in a window and denies the rest, counts each
// descriptor of a call apart, and starts the next window from zero; its
// keys expire with their window.
func TestCounterServer(t *testing.T) {
	c := redistest.Start(t).Client(t)
	now := time.Unix(1_700_000_000, 0)
	gs := grpc.NewServer()
	ratelimitv3.RegisterRateLimitServiceServer(gs, &counterServer{c: c, limit: 2, period: time.Minute, now: func() time.Time { return now }})
	cc, err := grpc.NewClient(serveLoopback(t, gs), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := ratelimitv3.NewRateLimitServiceClient(cc)
	desc := func(v string) *rlcommonv3.RateLimitDescriptor {
		return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: v}}}
	}
	ask := func(vs ...string) []ratelimitv3.RateLimitResponse_Code {
		t.Helper()
		req := &ratelimitv3.RateLimitRequest{Domain: "d"}
		for _, v := range vs {
			req.Descriptors = append(req.Descriptors, desc(v))
		}
		resp, err := client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		var codes []ratelimitv3.RateLimitResponse_Code
		for _, s := range resp.GetStatuses() {
			codes = append(codes, s.GetCode())
		}
		return append(codes, resp.GetOverallCode())
	}
	ok, over := ratelimitv3.RateLimitResponse_OK, ratelimitv3.RateLimitResponse_OVER_LIMIT
	for i, want := range [][]ratelimitv3.RateLimitResponse_Code{{ok, ok}, {ok, ok}, {over, over}} {
		if got := ask("a"); got[0] != want[0] || got[1] != want[1] {
			t.Errorf("call %d of a: %v, want %v", i, got, want)
		}
	}
	if got := ask("a", "b"); got[0] != over || got[1] != ok || got[2] != over {
		t.Errorf("a and b: %v, want a over, b OK, overall over", got)
	}
	if ttl := c.TTL(t.Context(), "d_user_a_1699999980").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("a's key expires in %v, want within its minute", ttl)
	}
	now = now.Add(time.Minute)
	if got := ask("a"); got[0] != ok {
		t.Errorf("a in the next minute: %v, want OK", got)
	}
}
