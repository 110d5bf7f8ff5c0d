package envoyapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// t0 is a day boundary, so every window starts there.
var t0 = time.Unix(1_700_006_400, 0)

const testPolicy = `
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_key}
  - key: api_key
    value: vip
    rate_limit: {unlimited: true}
  - key: tenant
    value: "team-*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value: "u*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow_mode: true
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, burst: 2, algorithm: token_bucket}
  - key: generic_key
    value: llm
    descriptors:
      - key: model
        rate_limit: {unit: hour, requests_per_unit: 100, name: model_hourly}
      - key: model
        value: gpt-4o
        rate_limit:
          unit: hour
          requests_per_unit: 5
          name: gpt4o_hourly
          replaces: [{name: global_hourly}]
  - key: global
    rate_limit: {unit: hour, requests_per_unit: 1, name: global_hourly}
  - key: foo
    value: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`

type staticPolicies struct{ s *policy.Snapshot }

func (p staticPolicies) Current() *policy.Snapshot { return p.s }

type rig struct {
	t      *testing.T
	clk    *limitertest.Clock
	client ratelimitv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	rls    *envoyapi.RLS
}

// newRig serves the test policy over a real loopback gRPC connection.
func newRig(t *testing.T, opts ...envoyapi.Option) *rig {
	t.Helper()
	snap := policy.Compile(policy.File{Name: "api.yaml", Data: []byte(testPolicy)})
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("test policy: %v", snap.Problems())
	}
	clk := limitertest.NewClock(t0)
	rls := envoyapi.NewRLS(staticPolicies{snap}, limiter.New(limiter.WithClock(clk)), opts...)
	conn := envoytest.Loopback(t, func(s *grpc.Server) { envoyapi.RegisterRLS(s, rls) }, envoyapi.ServerCodec())
	return &rig{t: t, clk: clk, client: ratelimitv3.NewRateLimitServiceClient(conn), conn: conn, rls: rls}
}

func desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (r *rig) call(domain string, hits uint32, ds ...*rlcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
	r.t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(),
		&ratelimitv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		r.t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(ds) {
		r.t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	over := false
	for _, st := range resp.Statuses {
		over = over || st.Code == ratelimitv3.RateLimitResponse_OVER_LIMIT
		if st.Code == ratelimitv3.RateLimitResponse_UNKNOWN {
			r.t.Fatal("a status is UNKNOWN")
		}
	}
	if want := map[bool]ratelimitv3.RateLimitResponse_Code{false: ratelimitv3.RateLimitResponse_OK, true: ratelimitv3.RateLimitResponse_OVER_LIMIT}[over]; resp.OverallCode != want {
		r.t.Fatalf("overall %v with statuses %v", resp.OverallCode, resp.Statuses)
	}
	return resp
}

const (
	ok   = ratelimitv3.RateLimitResponse_OK
	over = ratelimitv3.RateLimitResponse_OVER_LIMIT
)

func codes1(resp *ratelimitv3.RateLimitResponse) []ratelimitv3.RateLimitResponse_Code {
	var cs []ratelimitv3.RateLimitResponse_Code
	for _, s := range resp.Statuses {
		cs = append(cs, s.Code)
	}
	return cs
}

func TestRejectsEmptyDomainAndDescriptors(t *testing.T) {
	r := newRig(t)
	for name, req := range map[string]*ratelimitv3.RateLimitRequest{
		"empty domain":     {Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("a", "b")}},
		"no descriptors":   {Domain: "api"},
		"an empty entries": {Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{{}}},
	} {
		_, err := r.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, err)
		}
	}
}

func TestUnknownDomainAndUnmatchedAreOKWithoutLimit(t *testing.T) {
	r := newRig(t)
	for _, resp := range []*ratelimitv3.RateLimitResponse{
		r.call("nope", 0, desc("api_key", "k")),
		r.call("api", 0, desc("unknown", "x")),
		r.call("api", 0, desc("api_key", "k", "deeper", "x")), // request deeper than config
	} {
		st := resp.Statuses[0]
		if st.Code != ok || st.CurrentLimit != nil {
			t.Errorf("got %v", st)
		}
	}
}

func TestLimitStatusesAndExactReset(t *testing.T) {
	r := newRig(t)
	r.clk.Advance(20*time.Second + 300*time.Millisecond)
	for i := range 3 {
		st := r.call("api", 0, desc("api_key", "k")).Statuses[0]
		if st.Code != ok || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v", i, st)
		}
		cl := st.CurrentLimit
		if cl.RequestsPerUnit != 3 || cl.Unit != ratelimitv3.RateLimitResponse_RateLimit_MINUTE || cl.Name != "per_key" {
			t.Fatalf("current_limit %v", cl)
		}
		if st.DurationUntilReset.AsDuration() != 40*time.Second { // 39.7 s rounded up
			t.Fatalf("reset %v", st.DurationUntilReset.AsDuration())
		}
	}
	st := r.call("api", 0, desc("api_key", "k")).Statuses[0]
	if st.Code != over || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 40*time.Second {
		t.Fatalf("4th call %v", st)
	}
	r.clk.Advance(39700 * time.Millisecond) // exactly the window end
	if st := r.call("api", 0, desc("api_key", "k")).Statuses[0]; st.Code != ok {
		t.Fatalf("at the reset instant: %v", st)
	}
}

func TestDeniedRequestChargesNoDescriptor(t *testing.T) {
	r := newRig(t)
	r.call("api", 0, desc("user", "u1"))
	resp := r.call("api", 0, desc("api_key", "a"), desc("user", "u1"), desc("api_key", "b"))
	if got := codes1(resp); got[0] != ok || got[1] != over || got[2] != ok {
		t.Fatalf("codes %v", got)
	}
	// Neither api_key was charged: each still has 3.
	for _, k := range []string{"a", "b"} {
		if st := r.call("api", 0, desc("api_key", k)).Statuses[0]; st.LimitRemaining != 2 {
			t.Fatalf("api_key %s was charged by a denied request: %v", k, st)
		}
	}
}

func TestHitsAddendForms(t *testing.T) {
	r := newRig(t)
	if st := r.call("api", 2, desc("api_key", "h")).Statuses[0]; st.LimitRemaining != 1 {
		t.Fatalf("request-level 2: %v", st)
	}
	check := desc("api_key", "h")
	check.HitsAddend = wrapperspb.UInt64(0)
	if st := r.call("api", 5, check).Statuses[0]; st.Code != ok || st.LimitRemaining != 1 {
		t.Fatalf("per-descriptor 0 overrides the request's 5 and consumes nothing: %v", st)
	}
	r.call("api", 0, desc("api_key", "h"))
	if st := r.call("api", 0, check).Statuses[0]; st.Code != over {
		t.Fatalf("check with nothing left: %v", st)
	}
	refund := desc("api_key", "h")
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(2), true
	if st := r.call("api", 0, refund).Statuses[0]; st.Code != ok || st.LimitRemaining != 2 {
		t.Fatalf("refund of 2: %v", st)
	}
	big := desc("api_key", "h")
	big.HitsAddend = wrapperspb.UInt64(4)
	if st := r.call("api", 0, big).Statuses[0]; st.Code != over {
		t.Fatalf("4 hits on a limit of 3: %v", st)
	}
}

func TestLimitOverride(t *testing.T) {
	r := newRig(t)
	for _, domain := range []string{"api", "unknown-domain"} {
		d := desc("api_key", "o")
		d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
		st := r.call(domain, 0, d).Statuses[0]
		if st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.CurrentLimit.Unit != ratelimitv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("%s: first: %v", domain, st)
		}
		if st := r.call(domain, 0, d).Statuses[0]; st.Code != over {
			t.Fatalf("%s: the override must replace the limit of 3: %v", domain, st)
		}
	}
}

func TestShadowModeAnswersOK(t *testing.T) {
	r := newRig(t)
	for i := range 3 {
		st := r.call("api", 0, desc("path", "/x")).Statuses[0]
		if st.Code != ok || st.CurrentLimit == nil {
			t.Fatalf("call %d: %v", i, st)
		}
	}
}

func TestUnlimitedReportsMaxRemaining(t *testing.T) {
	r := newRig(t)
	for range 10 {
		st := r.call("api", 0, desc("api_key", "vip")).Statuses[0]
		if st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
			t.Fatalf("%v", st)
		}
	}
}

func TestReplacesDropsReplacedLimit(t *testing.T) {
	r := newRig(t)
	for i := range 3 {
		resp := r.call("api", 0, desc("generic_key", "llm", "model", "gpt-4o"), desc("global", "g"))
		if resp.OverallCode != ok || resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("call %d: global_hourly must be replaced: %v", i, resp.Statuses)
		}
	}
	if st := r.call("api", 0, desc("global", "g")).Statuses[0]; st.Code != ok {
		t.Fatalf("alone, global_hourly applies and was never charged: %v", st)
	}
	if st := r.call("api", 0, desc("generic_key", "llm", "model", "other")).Statuses[0]; st.CurrentLimit.GetName() != "model_hourly" {
		t.Fatalf("exact value beats key-only: %v", st)
	}
}

func TestWildcardCountsPerValueUnlessShared(t *testing.T) {
	r := newRig(t)
	if a, b := r.call("api", 0, desc("user", "u1")), r.call("api", 0, desc("user", "u2")); a.OverallCode != ok || b.OverallCode != ok {
		t.Fatal("each value of a wildcard has its own counter")
	}
	r.call("api", 0, desc("tenant", "team-a"))
	r.call("api", 0, desc("tenant", "team-b"))
	if st := r.call("api", 0, desc("tenant", "team-c")).Statuses[0]; st.Code != over {
		t.Fatalf("share_threshold: matching values share one counter: %v", st)
	}
}

func TestTokenBucketResetIsTimeUntilFull(t *testing.T) {
	r := newRig(t)
	st := r.call("api", 0, desc("bucket", "b")).Statuses[0]
	if st.Code != ok || st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("%v", st) // 100 ms until full, reported as a whole second
	}
	r.call("api", 0, desc("bucket", "b"))
	st = r.call("api", 0, desc("bucket", "b")).Statuses[0]
	if st.Code != over || st.DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("%v", st)
	}
}

func TestResponseHeaders(t *testing.T) {
	r := newRig(t, envoyapi.WithResponseHeaders(envoyapi.HeadersDraft))
	resp := r.call("api", 0, desc("api_key", "k"), desc("user", "u9"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		if h.RawValue != nil {
			t.Fatal("RLS headers must use Value")
		}
		got[h.Key] = h.Value
	}
	if got["x-ratelimit-limit"] != "1" || got["x-ratelimit-remaining"] != "0" || got["x-ratelimit-reset"] != "1" {
		t.Fatalf("headers %v", got)
	}
	// Named as envoyproxy/ratelimit's LIMIT_*_HEADER variables name them.
	r = newRig(t, envoyapi.WithResponseHeaders(envoyapi.HeadersDraft),
		envoyapi.WithHeaderNames("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"))
	resp = r.call("api", 0, desc("api_key", "k"))
	clear(got)
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if len(got) != 3 || got["RateLimit-Limit"] != "3" || got["RateLimit-Remaining"] != "2" || got["RateLimit-Reset"] != "60" {
		t.Fatalf("named headers %v", got)
	}
	r = newRig(t, envoyapi.WithResponseHeaders(envoyapi.HeadersIETF))
	resp = r.call("api", 0, desc("api_key", "k"))
	var all []string
	for _, h := range resp.ResponseHeadersToAdd {
		all = append(all, h.Key+": "+h.Value)
	}
	if s := strings.Join(all, "\n"); s != "ratelimit-policy: \"per_key\";q=3;w=60\nratelimit: \"per_key\";r=2;t=60" {
		t.Fatalf("ietf headers:\n%s", s)
	}
}

func TestZeroRequestsPerUnitBans(t *testing.T) {
	r := newRig(t)
	st := r.call("api", 0, desc("foo", "banned")).Statuses[0]
	if st.Code != over || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() < time.Second {
		t.Fatalf("%v", st)
	}
}

func TestShadowDenialsAreLogged(t *testing.T) {
	var buf syncBuffer
	r := newRig(t, envoyapi.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	for range 3 {
		r.call("api", 0, desc("path", "/x"))
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(buf.String(), "\n", 2)[0]), &line); err != nil {
		t.Fatalf("no log line for a shadow denial: %q", buf.String())
	}
	if line["msg"] != "over limit" || line["shadow"] != true || line["domain"] != "api" || !strings.Contains(line["key"].(string), "path=/x") {
		t.Fatalf("log line %v", line)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 2 shadow denials:\n%s", n, buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
