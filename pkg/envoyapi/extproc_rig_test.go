package envoyapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

const targetsPolicy = `
targets:
  primary:
    provider: acme
    api_host: api.acme.test
    cluster: acme
    model: acme-large
    rate_limits: {algorithm: fixed_window, requests_per_minute: 3}
    max_concurrent: 2
    retry_config: {num_retries: 2, profile: standard}
    fallback_models: [secondary, tertiary]
  secondary:
    provider: beta
    cluster: beta
    model: beta-medium
    rate_limits: {algorithm: fixed_window, requests_per_minute: 100}
    token_limits: {tokens_per_minute: 1000}
    retry_config: {num_retries: 1, profile: interactive}
  tertiary:
    provider: gamma
    cluster: gamma
    model: gamma-small
  solo:
    cluster: solo
    rate_limits: {algorithm: fixed_window, requests_per_minute: 1}
  narrow:
    cluster: narrow
    max_concurrent: 1
  pair:
    cluster: pair
    fallback_models: [solo, narrow]
  wide:
    cluster: wide
    max_concurrent: 5000
  lone:
    cluster: lone
  fast:
    cluster: duo
    model: duo-fast
    max_concurrent: 3
    retry_config: {num_retries: 1, profile: interactive}
    fallback_models: [steady, tertiary]
  steady:
    cluster: duo
    model: duo-steady
    rate_limits: {algorithm: fixed_window, requests_per_minute: 100}
    max_concurrent: 3
    retry_config: {num_retries: 2, profile: standard}
`

// extRig serves the ext_proc server over a real loopback gRPC connection,
// with a fake clock for the limiter and the retry hints, a real breaker
// registry and a signal per finished server stream.
type extRig struct {
	t      *testing.T
	snap   *policy.Snapshot
	clk    *limitertest.Clock
	lim    *limiter.Limiter
	reg    *resilience.Registry
	client extprocv3.ExternalProcessorClient
	ended  chan struct{}
}

func newExtRig(t *testing.T, opts ...envoyapi.Option) *extRig {
	t.Helper()
	return newExtRigWith(t, targetsPolicy, opts...)
}

// newExtRigWith is newExtRig over the targets of policyText.
func newExtRigWith(t *testing.T, policyText string, opts ...envoyapi.Option) *extRig {
	t.Helper()
	snap := policy.Compile(policy.File{Name: "targets.yaml", Data: []byte(policyText)})
	if policy.HasErrors(snap.Problems()) || len(snap.Targets()) == 0 {
		t.Fatalf("test policy: %v", snap.Problems())
	}
	r := &extRig{t: t, snap: snap, clk: limitertest.NewClock(t0), reg: resilience.NewRegistry(),
		ended: make(chan struct{}, 4096)}
	r.lim = limiter.New(limiter.WithClock(r.clk))
	x := envoyapi.NewExtProc(staticPolicies{snap},
		envoyapi.ExtProcDeps{Limits: r.lim, Slots: r.lim, Breakers: r.reg, Now: r.clk.Now}, opts...)
	conn := envoytest.Loopback(t, func(s *grpc.Server) { envoyapi.RegisterExtProc(s, x) },
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			defer func() { r.ended <- struct{}{} }()
			return h(srv, ss)
		}))
	r.client = extprocv3.NewExternalProcessorClient(conn)
	return r
}

// downstream is the filter before the router, as shipped: request body
// BUFFERED, response headers SEND, response body STREAMED, mode override
// allowed.
func (r *extRig) downstream() *envoytest.Filter {
	return &envoytest.Filter{Client: r.client, Role: "downstream",
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
		AllowModeOverride: true, MessageTimeout: 5 * time.Second, ReceivingNamespaces: []string{"envoy.filters.http.ext_proc"}}
}

// upstream is the filter in a cluster's upstream chain: headers only,
// the cluster name as an attribute, mode override allowed.
func (r *extRig) upstream(cluster string) *envoytest.Filter {
	return &envoytest.Filter{Client: r.client, Role: "upstream", Upstream: true, AllowModeOverride: true,
		RequestAttributes: map[string]string{"xds.cluster_name": cluster}, MessageTimeout: 5 * time.Second}
}

// waitEnded waits until n more server streams have returned.
func (r *extRig) waitEnded(n int) {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-r.ended:
		case <-deadline:
			r.t.Fatalf("server streams did not end")
		}
	}
}

// drainEnded forgets the streams that have ended so far.
func (r *extRig) drainEnded() {
	for {
		select {
		case <-r.ended:
		default:
			return
		}
	}
}

func (r *extRig) breakerTarget(name string) resilience.Target {
	t := r.snap.Target(name)
	return resilience.Target{Name: t.Name, Provider: t.Provider, APIHost: t.APIHost}
}

// openBreaker counts enough failures against a target to open its breaker.
func (r *extRig) openBreaker(name string) {
	for range 5 {
		r.reg.Record(r.breakerTarget(name), resilience.Verdict{Class: resilience.ClassServer, CountTarget: true})
	}
	if a := r.reg.Status(r.breakerTarget(name)); a.Allowed {
		r.t.Fatalf("breaker of %s did not open", name)
	}
}

// roundTrip runs one exchange and fails the test on any protocol error.
func (r *extRig) roundTrip(f *envoytest.Filter, req envoytest.Request, up func(envoytest.Request) envoytest.Response) envoytest.Exchange {
	r.t.Helper()
	x, err := f.RoundTrip(context.Background(), req, up)
	if err != nil {
		r.t.Fatalf("exchange: %v", err)
	}
	return x
}

func chatRequest(body string, extra ...string) envoytest.Request {
	h := envoytest.H(":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw.test",
		":scheme", "http", "content-type", "application/json", "content-length", strconv.Itoa(len(body)))
	h = append(h, envoytest.H(extra...)...)
	return envoytest.Request{Headers: h, Body: []byte(body)}
}

// reply answers every forwarded request with status and headers.
func reply(status int, kv ...string) func(envoytest.Request) envoytest.Response {
	return func(envoytest.Request) envoytest.Response {
		h := envoytest.H(":status", strconv.Itoa(status), "content-type", "application/json")
		return envoytest.Response{Headers: append(h, envoytest.H(kv...)...)}
	}
}

// noUpstream fails the test if the request reaches an upstream.
func (r *extRig) noUpstream(req envoytest.Request) envoytest.Response {
	r.t.Errorf("request reached an upstream: %v", req.Headers)
	return envoytest.Response{Headers: envoytest.H(":status", "500")}
}

func wantHeader(t *testing.T, h envoytest.Headers, key, want string) {
	t.Helper()
	if got, ok := h.Get(key); !ok || got != want {
		t.Errorf("%s = %q (present %v), want %q", key, got, ok, want)
	}
}

func wantNoHeader(t *testing.T, h envoytest.Headers, key string) {
	t.Helper()
	if got, ok := h.Get(key); ok {
		t.Errorf("%s = %q, want absent", key, got)
	}
}
