package envoyapi

import (
	"context"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

const fuzzPolicy = `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 3, name: sub}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`

type fuzzPolicies struct{ s *policy.Snapshot }

func (p fuzzPolicies) Current() *policy.Snapshot { return p.s }

// FuzzShouldRateLimit feeds request bytes through the server's decoder and
// ShouldRateLimit: never a panic, a caller's mistake is INVALID_ARGUMENT
// and nothing else, every descriptor gets a status, and the keys held stay
// within the limiter's bound.
func FuzzShouldRateLimit(f *testing.F) {
	snap := policy.Compile(policy.File{Name: "api.yaml", Data: []byte(fuzzPolicy)})
	const maxKeys = 200
	lim := limiter.New(limiter.WithMaxKeys(maxKeys))
	rls := NewRLS(fuzzPolicies{snap}, lim, WithDynamicMetadata(true), WithResponseHeaders(HeadersDraft),
		WithRequestBounds(RequestBounds{MaxValueBytes: 256}))
	codec := rlsCodec{encoding.GetCodecV2("proto")}
	entry := func(kv ...string) *rlcommonv3.RateLimitDescriptor {
		d := &rlcommonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	over := entry("k", "o")
	over.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_YEAR,
		UnitMultiplier: wrapperspb.UInt32(3)}
	hits := entry("quota", "q")
	hits.HitsAddend = wrapperspb.UInt64(7)
	for _, req := range []*ratelimitv3.RateLimitRequest{
		{Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{entry("k", "a", "sub", "b")}},
		{Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{over, hits, entry("shadow", "s")}, HitsAddend: 2},
		{Domain: "other", Descriptors: []*rlcommonv3.RateLimitDescriptor{entry("x", "y")}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(ratelimitv3.RateLimitRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}, req); err != nil {
			return // gRPC answers the undecodable itself
		}
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				t.Fatalf("%v for %v: want INVALID_ARGUMENT", err, req)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		if n := lim.Keys(); n > maxKeys+1 {
			t.Fatalf("%d keys held, above the bound %d", n, maxKeys)
		}
	})
}
