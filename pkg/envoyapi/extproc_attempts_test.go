package envoyapi_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// shippedRetry is the retry policy of the shipped routes.
var shippedRetry = envoytest.RetryPolicy{NumRetries: 5, RetriableHeader: "x-resil-retry", RetriableValue: "1",
	ResetHeader: "x-resil-retry-after", MaxInterval: 120 * time.Second}

// upstreamBuffered is the upstream filter as shipped: request body
// BUFFERED, so a retry can move to another model of the cluster.
func (r *extRig) upstreamBuffered(cluster string) *envoytest.Filter {
	f := r.upstream(cluster)
	f.RequestBodyMode = extprocfilterv3.ProcessingMode_BUFFERED
	return f
}

// route runs a request the downstream role routed to target through the
// router's retries in cluster; answers gives attempt n's response.
func (r *extRig) route(cluster string, in envoytest.Request, answers func(n int, fwd envoytest.Request) envoytest.Response) []envoytest.Attempt {
	r.t.Helper()
	as, err := envoytest.Route(context.Background(), r.upstreamBuffered(cluster), shippedRetry, in, answers)
	if err != nil {
		r.t.Fatalf("attempts: %v", err)
	}
	return as
}

// modelOf is the model a forwarded body names.
func modelOf(t *testing.T, b []byte) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(b), `"model":"`)
	m, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("no model in %s", b)
	}
	return m
}

// TestExtProcInteractivePrefersFallback: an interactive target's
// failure moves the next attempt at once to an eligible hop of its chain
// in the same cluster, instead of waiting for the hint.
func TestExtProcInteractivePrefersFallback(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"duo-fast","stream":false}`, "x-resil-target", "fast")
	as := r.route("duo", in, func(n int, fwd envoytest.Request) envoytest.Response {
		if n == 1 {
			return upstreamReply(429, "retry-after", "6")
		}
		return upstreamReply(200)
	})
	if len(as) != 2 {
		t.Fatalf("%d attempts, want 2", len(as))
	}
	if as[1].Wait != 0 || !as[1].Backoff {
		t.Errorf("second attempt waited %v (backoff %v): a move to another hop goes at once", as[1].Wait, as[1].Backoff)
	}
	wantNoHeader(t, as[0].Response.Headers, "x-resil-retry-after")
	fwd := as[1].Forwarded
	wantHeader(t, fwd.Headers, "x-resil-target", "steady")
	wantHeader(t, fwd.Headers, "x-resil-fallback-from", "fast")
	wantHeader(t, fwd.Headers, "x-resil-first-attempt", "2")
	if m := modelOf(t, fwd.Body); m != "duo-steady" {
		t.Errorf("second attempt's model %q, want duo-steady", m)
	}
	wantHeader(t, fwd.Headers, "content-length", strconv.Itoa(len(fwd.Body)))
	wantHeader(t, as[1].Response.Headers, "x-resil-target", "steady")
	if a := r.reg.Status(r.breakerTarget("fast")); a.Allowed {
		t.Error("fast is not skipped after its hint: the next attempt's walk would pick it again")
	}
}

// TestExtProcStandardWaitsForHint: a standard target honours a hint up
// to 120 s by retrying itself after it, the request untouched.
func TestExtProcStandardWaitsForHint(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"duo-steady"}`, "x-resil-target", "steady")
	as := r.route("duo", in, func(n int, _ envoytest.Request) envoytest.Response {
		if n == 1 {
			return upstreamReply(429, "retry-after", "100")
		}
		return upstreamReply(200)
	})
	if len(as) != 2 || as[1].Wait != 100*time.Second || as[1].Backoff {
		t.Fatalf("attempts %+v, want a retry after 100 s", as)
	}
	wantHeader(t, as[1].Forwarded.Headers, "x-resil-target", "steady")
	wantNoHeader(t, as[1].Forwarded.Headers, "x-resil-fallback-from")
	wantNoHeader(t, as[1].Forwarded.Headers, "x-resil-first-attempt")
	if m := modelOf(t, as[1].Forwarded.Body); m != "duo-steady" {
		t.Errorf("model %q", m)
	}
}

// TestExtProcRetriesPerTarget: each hop of the request gets its own
// num_retries: fast (interactive, 1) fails over to steady (standard, 2),
// which is then retried twice itself before the request gives up.
func TestExtProcRetriesPerTarget(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"duo-fast"}`, "x-resil-target", "fast")
	var served []string
	as := r.route("duo", in, func(_ int, fwd envoytest.Request) envoytest.Response {
		served = append(served, fwd.Headers.Value("x-resil-target"))
		if fwd.Headers.Value("x-resil-target") == "fast" { // skipped for 10 min: the walks pass it by
			return upstreamReply(429, "retry-after", "600")
		}
		return upstreamReply(503)
	})
	if got := strings.Join(served, ","); got != "fast,steady,steady,steady" {
		t.Fatalf("attempts served by %s, want fast, then steady with its 2 retries", got)
	}
	last := as[len(as)-1].Response.Headers
	wantNoHeader(t, last, "x-resil-retry")
	if as[2].Backoff != true || as[3].Backoff != true {
		t.Errorf("steady's retries did not use the backoff: %+v", as)
	}
	if n := r.lim.InUse(envoyapi.SlotKey("steady")); n != 0 {
		t.Errorf("steady holds %d slots after its attempts", n)
	}
}

// TestExtProcNoEligibleHopInCluster: when nothing else in the cluster
// can serve, the interactive target waits for its hint like any other.
func TestExtProcNoEligibleHopInCluster(t *testing.T) {
	r := newExtRig(t)
	r.openBreaker("steady")
	in := chatRequest(`{"model":"duo-fast"}`, "x-resil-target", "fast")
	as := r.route("duo", in, func(n int, _ envoytest.Request) envoytest.Response {
		if n == 1 {
			return upstreamReply(429, "retry-after", "6")
		}
		return upstreamReply(200)
	})
	if len(as) != 2 || as[1].Wait != 6*time.Second {
		t.Fatalf("attempts %+v, want a retry of fast after 6 s", as)
	}
	wantHeader(t, as[1].Forwarded.Headers, "x-resil-target", "fast")
}

// TestExtProcClientSeesAttemptFallback: the downstream role tells the
// client which target a retry moved its request from.
func TestExtProcClientSeesAttemptFallback(t *testing.T) {
	r := newExtRig(t)
	up := func(fwd envoytest.Request) envoytest.Response {
		as := r.route("duo", fwd, func(n int, _ envoytest.Request) envoytest.Response {
			if n == 1 { // fast is skipped for the hint: the walk of attempt 2 passes it by
				return upstreamReply(429, "retry-after", "600")
			}
			return upstreamReply(200)
		})
		return as[len(as)-1].Response
	}
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"duo-fast"}`), up)
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "fast")
	wantHeader(t, x.Response.Headers, "x-resil-fallback-from", "fast")
	wantNoHeader(t, x.Response.Headers, "x-resil-target")
	if n := r.lim.InUse(envoyapi.SlotKey("fast")); n != 0 {
		t.Errorf("fast holds %d slots after the request", n)
	}
}

// TestExtProcAttemptContentLength: an attempt whose body is the
// original while an earlier attempt's rewrite left its content-length in
// the shared headers gets a content-length that matches its body.
func TestExtProcAttemptContentLength(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"duo-steady"}`, "x-resil-target", "steady", "x-envoy-attempt-count", "2")
	in.Headers = in.Headers.Set("content-length", "999")
	x := r.roundTrip(r.upstreamBuffered("duo"), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "content-length", strconv.Itoa(len(in.Body)))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "steady")
	if string(x.Forwarded.Body) != string(in.Body) {
		t.Errorf("body changed: %s", x.Forwarded.Body)
	}
}
