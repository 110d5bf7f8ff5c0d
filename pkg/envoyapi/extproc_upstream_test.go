package envoyapi_test

import (
	"strconv"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// attempt runs one upstream attempt: the request as the router sends it
// (x-resil-target when set, x-envoy-attempt-count), then resp.
func (r *extRig) attempt(f *envoytest.Filter, target string, n int, resp envoytest.Response) envoytest.Response {
	r.t.Helper()
	req := chatRequest(`{"model":"x"}`, "x-envoy-attempt-count", strconv.Itoa(n))
	if target != "" {
		req.Headers = req.Headers.Add("x-resil-target", target)
	}
	x := r.roundTrip(f, req, func(fwd envoytest.Request) envoytest.Response {
		if !equalHeaders(fwd.Headers, req.Headers) || string(fwd.Body) != string(req.Body) {
			r.t.Errorf("upstream role changed the request: %v", fwd.Headers)
		}
		return resp
	})
	return x.Response
}

func upstreamReply(code int, kv ...string) envoytest.Response {
	return reply(code, kv...)(envoytest.Request{})
}

func TestExtProcUpstreamRetryHeaders(t *testing.T) {
	r := newExtRig(t)
	f := r.upstream("acme")
	cases := []struct {
		name       string
		target     string
		attempt    int
		resp       envoytest.Response
		retry      bool
		retryAfter string
	}{
		{"429 retry-after", "primary", 1, upstreamReply(429, "retry-after", "2"), true, "2"},
		{"429 retry-after-ms rounds up", "primary", 1, upstreamReply(429, "retry-after-ms", "1200"), true, "2"},
		{"503 without hint", "primary", 1, upstreamReply(503), true, ""},
		{"second attempt within num_retries", "primary", 2, upstreamReply(503), true, ""},
		{"past num_retries", "primary", 3, upstreamReply(503, "retry-after", "1"), false, "1"},
		{"interactive, one retry", "secondary", 1, upstreamReply(500), true, ""},
		{"interactive, past num_retries", "secondary", 2, upstreamReply(500), false, ""},
		{"hint longer than the profile waits", "tertiary", 1, upstreamReply(429, "retry-after", "600"), false, "600"},
		{"caller error", "primary", 1, upstreamReply(400), false, ""},
		{"success", "primary", 1, upstreamReply(200, "retry-after", "5"), false, ""},
		{"provider's own x-resil headers dropped", "primary", 1, upstreamReply(200, "x-resil-retry", "1", "x-resil-retry-after", "9"), false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := r.attempt(f, c.target, c.attempt, c.resp).Headers
			if c.retry {
				wantHeader(t, h, "x-resil-retry", "1")
			} else {
				wantNoHeader(t, h, "x-resil-retry")
			}
			if c.retryAfter != "" {
				wantHeader(t, h, "x-resil-retry-after", c.retryAfter)
			} else {
				wantNoHeader(t, h, "x-resil-retry-after")
			}
			wantHeader(t, h, ":status", c.resp.Headers.Value(":status"))
		})
	}
}

func TestExtProcUpstreamRecordsBreakers(t *testing.T) {
	r := newExtRig(t)
	f := r.upstream("gamma") // tertiary's cluster; no x-resil-target
	tertiary := r.breakerTarget("tertiary")
	for i := range 4 {
		r.attempt(f, "", 1, upstreamReply(503))
		if a := r.reg.Status(tertiary); !a.Allowed {
			t.Fatalf("breaker open after %d failures", i+1)
		}
	}
	r.attempt(f, "", 1, upstreamReply(200)) // a success does not reset the count
	r.attempt(f, "", 1, upstreamReply(502))
	a := r.reg.Status(tertiary)
	if a.Allowed || a.Reason != resilience.SkipBreakerOpen {
		t.Fatalf("after 5 failures: %+v, want breaker open", a)
	}
	// The downstream role now skips it.
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"tertiary"}`), r.noUpstream)
	wantLocal(t, x, 503, "service_unavailable")
}

func TestExtProcUpstreamHintSkipsTarget(t *testing.T) {
	r := newExtRig(t)
	r.attempt(r.upstream("acme"), "primary", 1, upstreamReply(429, "retry-after", "600"))
	a := r.reg.Status(r.breakerTarget("primary"))
	if a.Allowed || a.Reason != resilience.SkipRateLimited {
		t.Fatalf("after a 600 s hint: %+v, want skipped", a)
	}
	x := r.roundTrip(r.downstream(), chatRequest(body("acme-large")), reply(200))
	wantFallback(t, x, chatRequest(body("acme-large")), "secondary", "beta-medium")
}

const quotaBody = `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`

func TestExtProcUpstreamClassifiesBody(t *testing.T) {
	r := newExtRig(t)
	resp := envoytest.Response{Headers: envoytest.H(":status", "429", "content-type", "application/json"), Body: []byte(quotaBody)}

	// With the body: a quota, not worth a retry; the target is skipped.
	out := r.attempt(r.upstream("acme"), "primary", 1, resp)
	wantNoHeader(t, out.Headers, "x-resil-retry")
	if string(out.Body) != quotaBody {
		t.Errorf("body changed: %s", out.Body)
	}
	if a := r.reg.Status(r.breakerTarget("primary")); a.Allowed {
		t.Errorf("quota did not skip the target: %+v", a)
	}

	// Without mode override the headers alone decide: a plain 429.
	f := r.upstream("beta")
	f.AllowModeOverride = false
	r.drainEnded()
	out = r.attempt(f, "secondary", 1, resp)
	wantHeader(t, out.Headers, "x-resil-retry", "1")
	r.waitEnded(1)
	if a := r.reg.Status(r.breakerTarget("secondary")); !a.Allowed {
		t.Errorf("a 429 without hint skipped the target: %+v", a)
	}
}

func TestExtProcUpstreamUnknownTarget(t *testing.T) {
	r := newExtRig(t)
	out := r.attempt(r.upstream("elsewhere"), "", 1, upstreamReply(503, "x-resil-retry", "1"))
	wantNoHeader(t, out.Headers, "x-resil-retry")
	wantNoHeader(t, out.Headers, "x-resil-retry-after")
}
