package envoyapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// dropinPolicy is written as Envoy Gateway and AI Gateway configure
// envoyproxy/ratelimit, plus a token bucket and an always_charge rule.
const dropinPolicy = `
domain: ai
descriptors:
  - key: backend
    value: a
    quota_mode: true
    metadata: {route: {pool: a, weight: 2}}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: backend
    value: b
    quota_mode: true
    metadata: {route: {pool: b}, spill: true}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    metadata: {tier: free}
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 2}
  - key: debt
    rate_limit: {unit: minute, requests_per_unit: 5, always_charge: true}
`

// newDropinRig serves dropinPolicy over loopback gRPC.
func newDropinRig(t *testing.T, load policy.LoadOptions, opts ...envoyapi.Option) *rig {
	t.Helper()
	return newPolicyRig(t, dropinPolicy, load, opts...)
}

func newPolicyRig(t *testing.T, yaml string, load policy.LoadOptions, opts ...envoyapi.Option) *rig {
	t.Helper()
	snap := policy.CompileWith(load, policy.File{Name: "p.yaml", Data: []byte(yaml)})
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("policy: %v", snap.Problems())
	}
	clk := limitertest.NewClock(t0)
	rls := envoyapi.NewRLS(staticPolicies{snap}, limiter.New(limiter.WithClock(clk)), opts...)
	conn := envoytest.Loopback(t, func(s *grpc.Server) { envoyapi.RegisterRLS(s, rls) })
	return &rig{t: t, clk: clk, client: ratelimitv3.NewRateLimitServiceClient(conn), rls: rls}
}

// raw calls ShouldRateLimit without the rig's "overall iff any" check.
func (r *rig) raw(ds ...*rlcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
	r.t.Helper()
	return r.rawIn("ai", ds...)
}

func (r *rig) rawIn(domain string, ds ...*rlcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
	r.t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(), &ratelimitv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		r.t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func hits(d *rlcommonv3.RateLimitDescriptor, n uint64) *rlcommonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// left checks, without consuming, how many units a descriptor has left.
func (r *rig) left(kv ...string) uint32 {
	r.t.Helper()
	return r.raw(hits(desc(kv...), 0)).Statuses[0].LimitRemaining
}

// refund gives n units back to a descriptor.
func (r *rig) refund(n uint64, kv ...string) {
	r.t.Helper()
	d := hits(desc(kv...), n)
	d.IsNegativeHits = true
	r.raw(d)
}

func expect(t *testing.T, resp *ratelimitv3.RateLimitResponse, overall ratelimitv3.RateLimitResponse_Code, sts ...ratelimitv3.RateLimitResponse_Code) {
	t.Helper()
	got := codes1(resp)
	if resp.OverallCode != overall || len(got) != len(sts) {
		t.Fatalf("overall %v statuses %v, want %v %v", resp.OverallCode, got, overall, sts)
	}
	for i := range sts {
		if got[i] != sts[i] {
			t.Fatalf("statuses %v, want %v", got, sts)
		}
	}
}

func TestQuotaModeDeniesOnlyWhenEveryQuotaDescriptorIsOver(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{})
	a, b := func() *rlcommonv3.RateLimitDescriptor { return desc("backend", "a") }, func() *rlcommonv3.RateLimitDescriptor { return desc("backend", "b") }
	expect(t, r.raw(a(), b()), ok, ok, ok)
	// b's quota is spent: its status says so, the request passes on a.
	expect(t, r.raw(a(), b()), ok, ok, over)
	if n := r.left("backend", "a"); n != 0 {
		t.Fatalf("the admitted request charges a: %d left", n)
	}
	// Every quota descriptor over: denied.
	expect(t, r.raw(a(), b()), over, over, over)
	r.clk.Advance(time.Minute)
	// A descriptor not in quota mode that is over denies alone.
	for range 3 {
		r.raw(desc("user", "u"))
	}
	expect(t, r.raw(a(), desc("user", "u")), over, ok, over)
	if n := r.left("backend", "a"); n != 2 {
		t.Fatalf("a denied request charged a: %d left", n)
	}
}

func TestQuotaDenialChargesNothing(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{})
	r.raw(desc("backend", "b"))
	// b is the only quota descriptor and it is over: the request is
	// denied although user passed, and user keeps its 3.
	expect(t, r.raw(desc("backend", "b"), desc("user", "v")), over, over, ok)
	if n := r.left("user", "v"); n != 3 {
		t.Fatalf("a denied request charged user: %d left", n)
	}
}

func TestGlobalShadowModeAnswersOKKeepingStatuses(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{ShadowMode: true})
	for range 3 {
		expect(t, r.raw(desc("user", "s")), ok, ok)
	}
	expect(t, r.raw(desc("user", "s"), desc("tokens", "s")), ok, over, ok)
	if n := r.left("tokens", "s"); n != 99 {
		t.Fatalf("shadow mode admits, so tokens is charged: %d left", n)
	}
}

func TestHitsAddendZeroChecksWithoutCharging(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{})
	for range 3 {
		expect(t, r.raw(hits(desc("tokens", "c"), 0), desc("user", "c")), ok, ok, ok)
	}
	if n := r.left("tokens", "c"); n != 100 {
		t.Fatalf("checks consumed: %d left", n)
	}
	if n := r.left("user", "c"); n != 0 {
		t.Fatalf("the charges beside the checks: %d left", n)
	}
	// Spent exactly: a check is OVER_LIMIT (not even one unit is left).
	expect(t, r.raw(hits(desc("user", "c"), 0)), over, over)
}

// TestChargingModes: what a request that goes over charges, per mode.
func TestChargingModes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		charging envoyapi.Charging
		// tokensLeft after 3 admitted requests and a 4th denied by user;
		// userOverAfterRefund: user's 4th hit was recorded.
		tokensLeft          uint32
		userOverAfterRefund bool
	}{
		{"ours", envoyapi.ChargeAdmitted, 97, false},
		{"envoyproxy", envoyapi.ChargingFor(false), 96, true},
		{"envoyproxy-stop-increment", envoyapi.ChargingFor(true), 97, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newDropinRig(t, policy.LoadOptions{}, envoyapi.WithCharging(tc.charging))
			for range 3 {
				expect(t, r.raw(desc("user", "m"), desc("tokens", "m")), ok, ok, ok)
			}
			expect(t, r.raw(desc("user", "m"), desc("tokens", "m")), over, over, ok)
			if n := r.left("tokens", "m"); n != tc.tokensLeft {
				t.Errorf("tokens: %d left, want %d", n, tc.tokensLeft)
			}
			r.refund(1, "user", "m")
			if got := r.raw(hits(desc("user", "m"), 0)).OverallCode == over; got != tc.userOverAfterRefund {
				t.Errorf("after a refund of 1, user over = %v, want %v (the over-limit hit recorded)", got, tc.userOverAfterRefund)
			}
		})
	}
}

func TestStopIncrementChargesOnlyTheQuotaThatWentOver(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{}, envoyapi.WithCharging(envoyapi.ChargingFor(true)))
	r.raw(desc("backend", "b"))
	// Admitted on a, but b went over: envoyproxy/ratelimit then charges
	// b alone.
	expect(t, r.raw(desc("backend", "a"), desc("backend", "b")), ok, ok, over)
	if n := r.left("backend", "a"); n != 2 {
		t.Fatalf("a was charged: %d left", n)
	}
}

func TestTokenBucketOverLimitRecordsNothingInAnyMode(t *testing.T) {
	for _, c := range []envoyapi.Charging{envoyapi.ChargeAdmitted, envoyapi.ChargeAll, envoyapi.ChargeOverLimit} {
		r := newDropinRig(t, policy.LoadOptions{}, envoyapi.WithCharging(c))
		for range 2 {
			r.raw(desc("tb", "x"))
		}
		for range 20 { // a client that keeps sending
			expect(t, r.raw(desc("tb", "x")), over, over)
		}
		r.clk.Advance(time.Second) // one token at 60 a minute
		if resp := r.raw(desc("tb", "x")); resp.OverallCode != ok {
			t.Fatalf("charging %d: locked out after a refill: %v", c, resp.Statuses[0])
		}
	}
}

// TestUsageReportIsAlwaysRecorded: the stream-end call Envoy makes for
// apply_on_stream_done, every descriptor with its own hits_addend.
func TestUsageReportIsAlwaysRecorded(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{})
	expect(t, r.raw(hits(desc("tokens", "u"), 80)), ok, ok)
	// 50 more goes over: the answer says so, the tokens are counted.
	expect(t, r.raw(hits(desc("tokens", "u"), 50), hits(desc("user", "u"), 1)), over, over, ok)
	r.refund(20, "tokens", "u")
	if resp := r.raw(hits(desc("tokens", "u"), 0)); resp.OverallCode != over {
		t.Fatalf("130 counted, 20 refunded: still over, got %v", resp.Statuses[0])
	}
	if n := r.left("user", "u"); n != 2 {
		t.Fatalf("the report's other descriptor: %d left", n)
	}
	// A request-time call (a descriptor without its own hits_addend) is
	// not a report: denied, it charges nothing.
	expect(t, r.raw(hits(desc("tokens", "v"), 150), desc("user", "v")), over, over, ok)
	if n := r.left("user", "v"); n != 3 {
		t.Fatalf("a denied request charged: %d left", n)
	}
}

func TestAlwaysChargeAfterADenialIsRecorded(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{})
	for range 3 {
		r.raw(desc("user", "d"))
	}
	expect(t, r.raw(desc("user", "d"), hits(desc("debt", "d"), 2), desc("tokens", "d")), over, over, ok, ok)
	if n := r.left("debt", "d"); n != 3 {
		t.Fatalf("always_charge after the denial: %d left, want 3", n)
	}
	if n := r.left("tokens", "d"); n != 100 {
		t.Fatalf("tokens charged by a denied request: %d left", n)
	}
}

func TestDynamicMetadataOfPassedDescriptors(t *testing.T) {
	r := newDropinRig(t, policy.LoadOptions{}, envoyapi.WithDynamicMetadata(true))
	r.raw(desc("backend", "b"))
	b := hits(desc("backend", "b"), 1)
	resp := r.raw(desc("backend", "a"), b, desc("user", "w"), desc("nothing", "x"))
	expect(t, resp, ok, ok, over, ok, ok)
	got, err := protojson.Marshal(resp.DynamicMetadata)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"descriptors":[{"entries":["backend=a"]},{"entries":["backend=b"],"hitsAddend":1},` +
		`{"entries":["user=w"]},{"entries":["nothing=x"]}],"domain":"ai",` +
		`"metadata":{"route":{"pool":"a","weight":2},"tier":"free"},"quotaModeViolations":[1]}`
	if compact(string(got)) != want {
		t.Fatalf("dynamic metadata\n got %s\nwant %s", compact(string(got)), want)
	}
	// Merged in order: the first passed descriptor's value stays, nested
	// mappings merge.
	r.clk.Advance(time.Minute)
	resp = r.raw(desc("backend", "a"), desc("backend", "b"))
	route := resp.DynamicMetadata.Fields["metadata"].GetStructValue()
	if compact(mustJSON(t, route)) != `{"route":{"pool":"a","weight":2},"spill":true}` {
		t.Fatalf("merged metadata %s", mustJSON(t, route))
	}
	if r := newDropinRig(t, policy.LoadOptions{}); r.raw(desc("backend", "a")).DynamicMetadata != nil {
		t.Fatal("dynamic metadata is off by default")
	}
}

func mustJSON(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compact removes the spaces protojson may put between tokens.
func compact(s string) string { return strings.Join(strings.Fields(s), "") }

// gatewayPolicy is shaped as AI Gateway's quota policies: per model
// (backend_name, model_name_override), a tenant bucket and a default one.
const gatewayPolicy = `
domain: gw
descriptors:
  - key: backend_name
    descriptors:
      - key: model_name_override
        descriptors:
          - key: tenant
            quota_mode: true
            rate_limit: {unit: minute, requests_per_unit: 1}
          - key: bucket
            value: default
            quota_mode: true
            metadata: {pool: default}
            rate_limit: {unit: minute, requests_per_unit: 5}
`

func TestQuotaGroupsPerModel(t *testing.T) {
	r := newPolicyRig(t, gatewayPolicy, policy.LoadOptions{}, envoyapi.WithDynamicMetadata(true))
	model := func(backend, m string) []*rlcommonv3.RateLimitDescriptor {
		return []*rlcommonv3.RateLimitDescriptor{
			desc("backend_name", backend, "model_name_override", m, "tenant", "t1"),
			desc("backend_name", backend, "model_name_override", m, "bucket", "default"),
		}
	}
	expect(t, r.rawIn("gw", model("a", "m1")...), ok, ok, ok)
	// a's tenant bucket is spent: model a is over although its default
	// bucket passed; the request still passes on model b.
	resp := r.rawIn("gw", append(model("a", "m1"), model("b", "m2")...)...)
	expect(t, resp, ok, over, ok, ok, ok)
	if got := compact(mustJSON(t, resp.DynamicMetadata.Fields["passedBackends"].GetListValue())); got != `[{"backend_name":"b","model_name_override":"m2"}]` {
		t.Fatalf("passedBackends %s", got)
	}
	// Model a alone: its only group is over, so the request is denied.
	expect(t, r.rawIn("gw", model("a", "m1")...), over, over, ok)
}
