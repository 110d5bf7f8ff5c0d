package envoyapi_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
)

// TestRequestBounds: a request beyond the bounds is refused with
// InvalidArgument naming the field, and charges nothing.
func TestRequestBounds(t *testing.T) {
	r := newRig(t, envoyapi.WithRequestBounds(envoyapi.RequestBounds{MaxDescriptors: 3, MaxEntries: 4, MaxValueBytes: 16}))
	many := func(n int, kv ...string) []*rlcommonv3.RateLimitDescriptor {
		var ds []*rlcommonv3.RateLimitDescriptor
		for range n {
			ds = append(ds, desc(kv...))
		}
		return ds
	}
	longOverride := desc("api_key", "o")
	longOverride.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR,
		UnitMultiplier: wrapperspb.UInt32(100)}
	for _, c := range []struct {
		name, want string
		req        *ratelimitv3.RateLimitRequest
	}{
		{"descriptors", "descriptors: 4, above the maximum 3", &ratelimitv3.RateLimitRequest{Domain: "api", Descriptors: many(4, "api_key", "a")}},
		{"entries", "descriptors[1]: more than 4 entries", &ratelimitv3.RateLimitRequest{Domain: "api",
			Descriptors: many(2, "a", "1", "b", "2", "c", "3")}},
		{"value", "descriptors[0].entries[0].value: 17 bytes, above the maximum 16", &ratelimitv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("api_key", strings.Repeat("x", 17))}}},
		{"key", "descriptors[0].entries[1].key: 20 bytes", &ratelimitv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("api_key", "a", strings.Repeat("k", 20), "v")}}},
		{"override", "a window of 876000h0m0s, longer than the longest an override may ask for (8784h0m0s)",
			&ratelimitv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{longOverride}}},
	} {
		_, err := r.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: got %v, want InvalidArgument with %q", c.name, err, c.want)
		}
	}
	if st := r.call("api", 0, desc("api_key", "a")).Statuses[0]; st.Code != ok || st.LimitRemaining != 2 {
		t.Errorf("after the refusals the key has %v: they charged something", st)
	}
	if st := r.call("api", 0, &rlcommonv3.RateLimitDescriptor{Entries: desc("api_key", "o").Entries,
		Limit: &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_YEAR}}).Statuses[0]; st.Code != ok {
		t.Errorf("an override of one year: %v, want OK", st)
	}
}

// rawCodec sends and receives bytes as they are, so a test can send
// what a Go client would refuse to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestInvalidUTF8IsInvalidArgument: a descriptor value that is not valid
// UTF-8 is the caller's mistake: InvalidArgument naming the field, not
// gRPC's Internal.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	r := newRig(t)
	good, err := proto.Marshal(&ratelimitv3.RateLimitRequest{Domain: "api",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("api_key", "caf\u00e9!")}})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("caf\u00e9!"), []byte("caf\xc3\x28!"), 1)
	var out []byte
	err = r.conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &out,
		grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[0].entries[0].value: not valid UTF-8") {
		t.Fatalf("invalid UTF-8 in a value: %v, want InvalidArgument naming the field", err)
	}
}
