package envoyapi_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// benchPolicy is scripts/bench-rls.sh's policy: a limit that admits
// everything, so every call is a full decision.
const benchPolicy = `
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// benchRequests are the calls of bench-rls.sh: one descriptor k={k} over
// n keys.
func benchRequests(n int) []*ratelimitv3.RateLimitRequest {
	reqs := make([]*ratelimitv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &ratelimitv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: strconv.Itoa(i)}}},
		}}
	}
	return reqs
}

func benchRLS(b *testing.B, opts ...envoyapi.Option) *envoyapi.RLS {
	b.Helper()
	snap := policy.Compile(policy.File{Name: "bench.yaml", Data: []byte(benchPolicy)})
	if policy.HasErrors(snap.Problems()) {
		b.Fatalf("bench policy: %v", snap.Problems())
	}
	return envoyapi.NewRLS(staticPolicies{snap}, limiter.New(), opts...)
}

// BenchmarkShouldRateLimit is the handler alone: what a decision costs
// beyond the gRPC server, and what it allocates.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, keys := range []int{1, 10000} {
		for _, hm := range []envoyapi.HeaderMode{envoyapi.HeadersOff, envoyapi.HeadersDraft} {
			name := "keys=" + strconv.Itoa(keys)
			if hm == envoyapi.HeadersDraft {
				name += "/headers=draft"
			}
			b.Run(name, func(b *testing.B) {
				rls, reqs := benchRLS(b, envoyapi.WithResponseHeaders(hm)), benchRequests(keys)
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					resp, err := rls.ShouldRateLimit(ctx, reqs[i%len(reqs)])
					if err != nil || resp.OverallCode != ratelimitv3.RateLimitResponse_OK {
						b.Fatalf("ShouldRateLimit: %v, %v", resp, err)
					}
					i++
				}
			})
		}
	}
}

// noopRLS answers OK without looking, as rlsbench serve-noop does: the
// floor of a ShouldRateLimit call over gRPC.
type noopRLS struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	answer *ratelimitv3.RateLimitResponse
}

func (s *noopRLS) ShouldRateLimit(context.Context, *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	return s.answer, nil
}

// BenchmarkShouldRateLimitLoopback drives the RLS and the no-op floor
// over a real loopback gRPC connection with 1 and 16 callers, the server
// set up as ratelimit-svc sets it up; allocations are client's and
// server's.
func BenchmarkShouldRateLimitLoopback(b *testing.B) {
	noop := &noopRLS{answer: &ratelimitv3.RateLimitResponse{
		OverallCode: ratelimitv3.RateLimitResponse_OK,
		Statuses:    []*ratelimitv3.RateLimitResponse_DescriptorStatus{{Code: ratelimitv3.RateLimitResponse_OK}},
	}}
	for _, keys := range []int{1, 10000} {
		for _, c := range []int{1, 16} {
			for _, target := range []string{"noop", "rls"} {
				name := "keys=" + strconv.Itoa(keys) + "/c=" + strconv.Itoa(c) + "/" + target
				b.Run(name, func(b *testing.B) {
					var srv ratelimitv3.RateLimitServiceServer = noop
					if target == "rls" {
						srv = benchRLS(b)
					}
					benchLoopback(b, srv, benchRequests(keys), c)
				})
			}
		}
	}
}

func benchLoopback(b *testing.B, srv ratelimitv3.RateLimitServiceServer, reqs []*ratelimitv3.RateLimitRequest, c int) {
	conn := envoytest.Loopback(b, func(s *grpc.Server) {
		ratelimitv3.RegisterRateLimitServiceServer(s, srv)
	}, grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	client := ratelimitv3.NewRateLimitServiceClient(conn)
	call := func(i uint64) bool {
		_, err := client.ShouldRateLimit(context.Background(), reqs[i%uint64(len(reqs))])
		if err != nil {
			b.Error(err)
		}
		return err == nil
	}
	b.ReportAllocs()
	if c == 1 {
		for i := uint64(0); b.Loop() && call(i); i++ {
		}
		return
	}
	var next atomic.Uint64
	b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() && call(next.Add(1)) {
		}
	})
}
