package envoyapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

func TestExtProcRetryAfterFromHints(t *testing.T) {
	r := newExtRig(t)
	now := r.clk.Now().UTC()
	cases := []struct {
		name string
		kv   []string
		want string // "" = no retry-after
	}{
		{"retry-after seconds", []string{"retry-after", "7"}, "7"},
		{"retry-after fraction", []string{"retry-after", "2.5"}, "3"},
		{"retry-after IMF-fixdate", []string{"retry-after", now.Add(30 * time.Second).Format(http.TimeFormat)}, "30"},
		{"retry-after RFC 850", []string{"retry-after", now.Add(90 * time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT")}, "90"},
		{"retry-after asctime", []string{"retry-after", now.Add(2 * time.Minute).Format(time.ANSIC)}, "120"},
		{"retry-after past date", []string{"retry-after", now.Add(-time.Minute).Format(http.TimeFormat)}, "1"},
		{"retry-after-ms", []string{"retry-after-ms", "1500"}, "2"},
		{"x-ms-retry-after-ms", []string{"x-ms-retry-after-ms", "250"}, "1"},
		{"openai reset duration", []string{"x-ratelimit-reset-requests", "6m0s", "x-ratelimit-remaining-requests", "0"}, "360"},
		{"openai reset, budget left", []string{"x-ratelimit-reset-requests", "6m0s", "x-ratelimit-remaining-requests", "5"}, ""},
		{"anthropic reset", []string{"anthropic-ratelimit-requests-reset", now.Add(20 * time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-requests-remaining", "0"}, "20"},
		{"IETF RateLimit", []string{"ratelimit", `"default";r=0;t=30`}, "30"},
		{"x-ratelimit-reset delta", []string{"x-ratelimit-reset", "12", "x-ratelimit-remaining", "0"}, "12"},
		{"x-ratelimit-reset epoch", []string{"x-ratelimit-reset", strconv.FormatInt(now.Add(40*time.Second).Unix(), 10)}, "40"},
		{"largest direct hint wins", []string{"retry-after", "3", "retry-after-ms", "4500"}, "5"},
		{"no hint", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := r.roundTrip(r.downstream(), chatRequest(`{"model":"lone"}`), reply(429, c.kv...))
			h := x.Response.Headers
			if c.want == "" {
				if v := h.Values("retry-after"); len(v) > 0 && c.kv == nil {
					t.Errorf("retry-after %q, want none", v)
				}
				wantNoHeader(t, h, "access-control-expose-headers")
				return
			}
			if v := h.Values("retry-after"); len(v) != 1 || v[0] != c.want {
				t.Errorf("retry-after %q, want [%s]", v, c.want)
			}
			wantHeader(t, h, "access-control-expose-headers", "retry-after")
		})
	}
}

func TestExtProcResponseHeaders(t *testing.T) {
	r := newExtRig(t)
	up := reply(429, "retry-after", "3", "access-control-expose-headers", "X-Request-Id, Retry-After",
		"access-control-expose-headers", "x-trace", "x-resil-retry", "1", "x-resil-retry-after", "3",
		"x-resil-target", "primary", "x-envoy-upstream-service-time", "12", "x-request-id", "abc")
	x := r.roundTrip(r.downstream(), chatRequest(body("acme-large")), up)
	h := x.Response.Headers
	wantHeader(t, h, "access-control-expose-headers",
		"X-Request-Id, Retry-After, x-trace, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset")
	if n := len(h.Values("access-control-expose-headers")); n != 1 {
		t.Errorf("%d expose headers, want 1", n)
	}
	for _, k := range []string{"x-resil-retry", "x-resil-retry-after", "x-resil-target"} {
		wantNoHeader(t, h, k)
	}
	wantHeader(t, h, "x-envoy-upstream-service-time", "12")
	wantHeader(t, h, "x-request-id", "abc")
	wantHeader(t, h, "retry-after", "3")
	wantHeader(t, h, "x-ratelimit-limit", "3")
	if x.Stats.RejectedMutations != 0 || x.Stats.ValueOnly != 0 || x.Stats.ClearRouteCacheIgnored != 0 {
		t.Errorf("stats %+v", x.Stats)
	}

	// A request that is not ours still loses the internal headers.
	x = r.roundTrip(r.downstream(), chatRequest(`{"model":"nobody"}`), reply(200, "x-resil-retry", "1"))
	wantNoHeader(t, x.Response.Headers, "x-resil-retry")
	wantNoHeader(t, x.Response.Headers, "access-control-expose-headers")
}

func TestExtProcChargesTokens(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"beta-medium","messages":[]}`)
	usage := `{"id":"x","usage":{"prompt_tokens":700,"completion_tokens":500,"total_tokens":1200}}`
	up := func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"), Body: []byte(usage)}
	}
	x := r.roundTrip(r.downstream(), in, up)
	if string(x.Response.Body) != usage {
		t.Errorf("response body changed: %s", x.Response.Body)
	}
	if x.Stats.Messages != 4 {
		t.Errorf("%d messages, want 4 (the response body was asked for)", x.Stats.Messages)
	}
	// 1200 of 1000 tokens were spent: secondary refuses until the window ends.
	x = r.roundTrip(r.downstream(), in, r.noUpstream)
	e := wantLocal(t, x, 429, "rate_limit_exceeded")
	if e.Error.Type != "tokens" {
		t.Errorf("type %q, want tokens", e.Error.Type)
	}
	wantHeader(t, x.Local.Headers, "retry-after", "60")
	r.clk.Advance(time.Minute)
	x = r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "secondary")
}

// TestExtProcTokensFromAWholeBody: without the mode override a JSON
// response streams through; its usage is charged only when one chunk
// holds the whole body, never read from a piece of it.
func TestExtProcTokensFromAWholeBody(t *testing.T) {
	r := newExtRig(t)
	f := r.downstream()
	f.AllowModeOverride, f.ChunkSize = false, 8
	in := chatRequest(`{"model":"beta-medium"}`)
	usage := `{"usage":{"total_tokens":5000}}`
	up := func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"),
			Body: []byte(usage)}
	}
	x := r.roundTrip(f, in, up)
	if string(x.Response.Body) != usage || x.Stats.Messages != 3+4 {
		t.Errorf("body %q in %d messages, want it unchanged in 4 chunks", x.Response.Body, x.Stats.Messages)
	}
	x = r.roundTrip(f, in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "secondary")

	f.ChunkSize = 0 // one chunk: the whole body
	r.roundTrip(f, in, up)
	x = r.roundTrip(f, in, r.noUpstream)
	wantLocal(t, x, 429, "rate_limit_exceeded")
}

// TestExtProcFallbackFromReachesClient: the client learns that a fallback
// served through x-resil-fallback-from, the one internal header it sees,
// and the expose list names it; nobody else can make it up.
func TestExtProcFallbackFromReachesClient(t *testing.T) {
	r := newExtRig(t)
	r.openBreaker("primary")
	up := reply(200, "access-control-expose-headers", "x-request-id", "x-resil-fallback-from", "spoofed",
		"x-resil-target", "secondary")
	x := r.roundTrip(r.downstream(), chatRequest(body("acme-large")), up)
	h := x.Response.Headers
	if v := h.Values("x-resil-fallback-from"); len(v) != 1 || v[0] != "primary" {
		t.Errorf("x-resil-fallback-from %q, want [primary]", v)
	}
	wantNoHeader(t, h, "x-resil-target")
	wantHeader(t, h, "access-control-expose-headers",
		"x-request-id, x-resil-fallback-from, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset")

	// Served by the requested target: nothing to announce.
	x = r.roundTrip(r.downstream(), chatRequest(body("gamma-small")), reply(200))
	wantNoHeader(t, x.Response.Headers, "x-resil-fallback-from")
	wantNoHeader(t, x.Response.Headers, "access-control-expose-headers")

	// Not ours: an upstream's own x-resil-fallback-from never reaches the client.
	x = r.roundTrip(r.downstream(), chatRequest(`{"model":"nobody"}`), reply(200, "x-resil-fallback-from", "primary"))
	wantNoHeader(t, x.Response.Headers, "x-resil-fallback-from")
}
