package envoyapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// llmPolicy mirrors the shipped targets: gpt-4o falls back to
// gpt-4o-mini (same cluster), then claude-sonnet (another cluster).
const llmPolicy = `
targets:
  gpt-4o:
    provider: openai
    api_host: api.openai.com
    cluster: openai
    retry_config: {num_retries: 2, profile: interactive}
    fallback_models: [gpt-4o-mini, claude-sonnet]
  gpt-4o-mini:
    provider: openai
    api_host: api.openai.com
    cluster: openai
    retry_config: {num_retries: 2, profile: interactive}
    fallback_models: [claude-sonnet]
  claude-sonnet:
    provider: anthropic
    cluster: anthropic
    model: claude-sonnet-4-5
    retry_config: {num_retries: 1, profile: standard}
`

// shippedRouter is the router of envoy.yaml's route for target in
// cluster: its retry policy and its cluster specifier, re-selecting the
// cluster of every retry.
func shippedRouter(t *testing.T, target, cluster string) envoytest.RetryPolicy {
	t.Helper()
	r := routeFor(t, routes(t, loadBootstrap(t)), target, cluster)
	if r == nil {
		t.Fatalf("no route for %s", target)
	}
	rp := r.GetRoute().GetRetryPolicy()
	return envoytest.RetryPolicy{NumRetries: int(rp.GetNumRetries().GetValue()),
		RetriableHeader: "x-resil-retry", RetriableValue: "1", ResetHeader: "x-resil-retry-after",
		MaxInterval: rp.GetRateLimitedRetryBackOff().GetMaxInterval().AsDuration(), RefreshClusterOnRetry: rp.GetRefreshClusterOnRetry(),
		Cluster: func(h envoytest.Headers) string {
			return clusterOf(t, r, map[string]string{"x-resil-cluster": h.Value("x-resil-cluster"), "x-resil-target": h.Value("x-resil-target")})
		}}
}

// upstreamIn is the upstream filter of a cluster as shipped: request body
// buffered, the cluster as an attribute, told to write the next
// attempt's cluster.
func (r *extRig) upstreamIn(cluster string) *envoytest.Filter {
	return &envoytest.Filter{Client: r.client, Role: "upstream", Upstream: true, AllowModeOverride: true,
		InitialMetadata: map[string]string{"x-resil-reselect": "true"},
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, MessageTimeout: 5 * time.Second,
		RequestAttributes: map[string]string{"xds.cluster_name": cluster}}
}

// throughEnvoy runs a request through the downstream filter, the shipped
// router with every cluster's upstream filter, and back: it returns the
// attempts and the response the client gets.
func (r *extRig) throughEnvoy(body string, upstream func(n int, cluster string, fwd envoytest.Request) envoytest.Response) ([]envoytest.Attempt, envoytest.Response) {
	r.t.Helper()
	down, err := r.downstream().Open(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	defer down.Cancel()
	fwd, local, err := down.SendRequest(chatRequest(body))
	if err != nil || local != nil {
		r.t.Fatalf("downstream request: %v %v", local, err)
	}
	p := shippedRouter(r.t, fwd.Headers.Value("x-resil-target"), fwd.Headers.Value("x-resil-cluster"))
	as, err := envoytest.RouteClusters(context.Background(), r.upstreamIn, p, fwd, upstream)
	if err != nil {
		r.t.Fatalf("router: %v", err)
	}
	resp, local, err := down.SendResponse(as[len(as)-1].Response)
	if err != nil || local != nil {
		r.t.Fatalf("downstream response: %v %v", local, err)
	}
	if err := down.Finish(); err != nil {
		r.t.Fatal(err)
	}
	return as, resp
}

// modelServer answers 429 with retry-after: 300 for failing models, 200
// for the others, and records which model each attempt asked for.
func modelServer(t *testing.T, failing string, asked *[]string) func(int, string, envoytest.Request) envoytest.Response {
	return func(n int, cluster string, fwd envoytest.Request) envoytest.Response {
		m := modelOf(t, fwd.Body)
		*asked = append(*asked, cluster+"/"+m)
		if fwd.Headers.Value("content-length") != strconv.Itoa(len(fwd.Body)) {
			t.Errorf("attempt %d: content-length %s for %d bytes", n, fwd.Headers.Value("content-length"), len(fwd.Body))
		}
		if m == failing {
			return envoytest.Response{Headers: envoytest.H(":status", "429", "content-type", "application/json", "retry-after", "300")}
		}
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"),
			Body: []byte(`{"usage":{"total_tokens":10}}`)}
	}
}

// TestInRequestFallbackSameCluster: a 429 with retry-after: 300 on gpt-4o
// (longer than an interactive target waits) is served, in the same
// request, by gpt-4o-mini on the same cluster.
func TestInRequestFallbackSameCluster(t *testing.T) {
	r := newExtRigWith(t, llmPolicy)
	var asked []string
	as, resp := r.throughEnvoy(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, modelServer(t, "gpt-4o", &asked))
	if len(as) != 2 || asked[0] != "openai/gpt-4o" || asked[1] != "openai/gpt-4o-mini" {
		t.Fatalf("attempts %v, want openai/gpt-4o then openai/gpt-4o-mini", asked)
	}
	if as[1].Wait != 0 {
		t.Errorf("the fallback waited %v", as[1].Wait)
	}
	wantHeader(t, resp.Headers, ":status", "200")
	wantHeader(t, resp.Headers, "x-resil-fallback-from", "gpt-4o")
}

// TestInRequestFallbackOtherCluster: with gpt-4o-mini unavailable, the
// same 429 moves the request to claude-sonnet on the anthropic cluster:
// Envoy re-selects the retry's cluster from the header the first
// attempt's upstream filter wrote.
func TestInRequestFallbackOtherCluster(t *testing.T) {
	r := newExtRigWith(t, llmPolicy)
	r.openBreaker("gpt-4o-mini")
	var asked []string
	as, resp := r.throughEnvoy(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, modelServer(t, "gpt-4o", &asked))
	if len(as) != 2 || asked[0] != "openai/gpt-4o" || asked[1] != "anthropic/claude-sonnet-4-5" {
		t.Fatalf("attempts %v, want openai/gpt-4o then anthropic/claude-sonnet-4-5", asked)
	}
	wantHeader(t, as[1].Forwarded.Headers, "x-resil-target", "claude-sonnet")
	wantHeader(t, resp.Headers, ":status", "200")
	wantHeader(t, resp.Headers, "x-resil-fallback-from", "gpt-4o")
	wantNoHeader(t, resp.Headers, "x-resil-cluster")
}
