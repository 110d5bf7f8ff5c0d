package envoyapi_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// oddBody has every trap a re-marshal would spring: odd spacing, escapes,
// key order, big numbers, a nested "model" that is not the top-level one.
const oddBody = "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"caf\\u00e9 \\\"model\\\"\",\"model\":\"nested\"} ],\n" +
	"  \"model\" :\t\"%s\" , \"temperature\":0.70, \"seed\": 12345678901234567890, \"z\":{\"model\":1} }"

func body(model string) string { return strings.Replace(oddBody, "%s", model, 1) }

func TestExtProcServesRequestedTarget(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(body("acme-large")) // primary's model
	x := r.roundTrip(r.downstream(), in, reply(200))
	fwd := x.Forwarded
	wantHeader(t, fwd.Headers, "x-resil-target", "primary")
	wantNoHeader(t, fwd.Headers, "x-resil-fallback-from")
	if !bytes.Equal(fwd.Body, in.Body) {
		t.Errorf("body changed:\n%s\nwant\n%s", fwd.Body, in.Body)
	}
	if !x.RouteCleared {
		t.Error("route cache not cleared although x-resil-target was added")
	}
	wantHeader(t, x.Response.Headers, "x-ratelimit-limit", "3")
	wantHeader(t, x.Response.Headers, "x-ratelimit-remaining", "2")
	wantHeader(t, x.Response.Headers, "x-ratelimit-reset", "60")
	wantHeader(t, x.Response.Headers, "access-control-expose-headers", "x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset")
}

func TestExtProcTargetSources(t *testing.T) {
	r := newExtRig(t)
	cases := []struct {
		name, model, header, want, wantModel string
		cleared                              bool
	}{
		{"body names a target", "tertiary", "", "tertiary", "gamma-small", true},
		{"body names a model", "beta-medium", "", "secondary", "beta-medium", true},
		{"header beats body", "acme-large", "tertiary", "tertiary", "gamma-small", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var extra []string
			if c.header != "" {
				extra = []string{"x-resil-target", c.header}
			}
			x := r.roundTrip(r.downstream(), chatRequest(body(c.model), extra...), reply(200))
			wantHeader(t, x.Forwarded.Headers, "x-resil-target", c.want)
			wantNoHeader(t, x.Forwarded.Headers, "x-resil-fallback-from")
			if want := body(c.wantModel); string(x.Forwarded.Body) != want {
				t.Errorf("body:\n%s\nwant\n%s", x.Forwarded.Body, want)
			}
			wantHeader(t, x.Forwarded.Headers, "content-length", strconv.Itoa(len(x.Forwarded.Body)))
			if x.RouteCleared != c.cleared {
				t.Errorf("route cleared %v, want %v", x.RouteCleared, c.cleared)
			}
		})
	}
}

func TestExtProcUnknownTargetUntouched(t *testing.T) {
	r := newExtRig(t)
	cases := map[string]envoytest.Request{
		"unknown model":         chatRequest(body("nobody")),
		"unknown header":        chatRequest(body("acme-large"), "x-resil-target", "nobody"),
		"not JSON":              chatRequest(`model=acme-large`),
		"JSON array":            chatRequest(`[{"model":"acme-large"}]`),
		"model not a string":    chatRequest(`{"model":7}`),
		"no model":              chatRequest(`{"messages":[]}`),
		"truncated JSON":        chatRequest(`{"model":"acme-large"`),
		"no body, no header":    {Headers: envoytest.H(":method", "GET", ":path", "/v1/models", ":authority", "gw.test")},
		"nested model only":     chatRequest(`{"x":{"model":"acme-large"}}`),
		"empty body and header": {Headers: envoytest.H(":method", "GET", ":path", "/", "x-resil-target", "nobody")},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			x := r.roundTrip(r.downstream(), in, reply(200))
			if !equalHeaders(x.Forwarded.Headers, in.Headers) || !bytes.Equal(x.Forwarded.Body, in.Body) {
				t.Errorf("request changed: %v %q", x.Forwarded.Headers, x.Forwarded.Body)
			}
			if x.RouteCleared {
				t.Error("route cache cleared")
			}
		})
	}
}

func equalHeaders(a, b envoytest.Headers) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExtProcHeaderOnlyRequest(t *testing.T) {
	r := newExtRig(t)
	in := envoytest.Request{Headers: envoytest.H(":method", "GET", ":path", "/v1/x", "x-resil-target", "lone")}
	x := r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "lone")
	r.openBreaker("lone")
	x = r.roundTrip(r.downstream(), in, r.noUpstream)
	if x.Local == nil || x.Local.Status != 503 {
		t.Fatalf("local reply %+v, want 503", x.Local)
	}
}

// wantFallback checks a request for primary served by hop: only the model
// changed, content-length matches, and the fallback is announced.
func wantFallback(t *testing.T, x envoytest.Exchange, in envoytest.Request, hop, model string) {
	t.Helper()
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", hop)
	wantHeader(t, x.Forwarded.Headers, "x-resil-fallback-from", "primary")
	want := strings.Replace(string(in.Body), `"acme-large"`, `"`+model+`"`, 1)
	if string(x.Forwarded.Body) != want {
		t.Errorf("body:\n%s\nwant\n%s", x.Forwarded.Body, want)
	}
	wantHeader(t, x.Forwarded.Headers, "content-length", strconv.Itoa(len(want)))
	if !x.RouteCleared {
		t.Error("route cache not cleared on fallback")
	}
}

func TestExtProcFallbackBreakerOpen(t *testing.T) {
	r := newExtRig(t)
	r.openBreaker("primary")
	in := chatRequest(body("acme-large"), "x-resil-target", "primary")
	x := r.roundTrip(r.downstream(), in, reply(200))
	wantFallback(t, x, in, "secondary", "beta-medium")
	wantHeader(t, x.Response.Headers, "x-ratelimit-limit", "100")

	r.openBreaker("secondary")
	x = r.roundTrip(r.downstream(), in, reply(200))
	wantFallback(t, x, in, "tertiary", "gamma-small")
	wantNoHeader(t, x.Response.Headers, "x-ratelimit-limit")
}

func TestExtProcFallbackRateLimited(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(body("acme-large"))
	for i := range 3 {
		x := r.roundTrip(r.downstream(), in, reply(200))
		wantHeader(t, x.Forwarded.Headers, "x-resil-target", "primary")
		wantHeader(t, x.Response.Headers, "x-ratelimit-remaining", strconv.Itoa(2-i))
	}
	x := r.roundTrip(r.downstream(), in, reply(200))
	wantFallback(t, x, in, "secondary", "beta-medium")
	r.clk.Advance(time.Minute)
	x = r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "primary")
}

func TestExtProcFallbackConcurrencyFull(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(body("acme-large"))
	var held []*envoytest.Stream
	for range 2 { // primary's cap
		s, err := r.downstream().Open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		fwd, _, err := s.SendRequest(in)
		if err != nil {
			t.Fatal(err)
		}
		wantHeader(t, fwd.Headers, "x-resil-target", "primary")
		held = append(held, s)
	}
	if n := r.lim.InUse(envoyapi.SlotKey("primary")); n != 2 {
		t.Fatalf("primary slots in use %d, want 2", n)
	}
	x := r.roundTrip(r.downstream(), in, reply(200))
	wantFallback(t, x, in, "secondary", "beta-medium")
	r.drainEnded()
	for _, s := range held {
		if _, _, err := s.SendResponse(envoytest.Response{Headers: envoytest.H(":status", "200")}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	r.waitEnded(len(held))
	if n := r.lim.InUse(envoyapi.SlotKey("primary")); n != 0 {
		t.Fatalf("primary slots in use %d after the streams ended, want 0", n)
	}
	x = r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "primary")
}

// openAIError is the body of a local reply.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func wantLocal(t *testing.T, x envoytest.Exchange, status int, code string) openAIError {
	t.Helper()
	if x.Local == nil {
		t.Fatalf("no local reply; forwarded %v", x.Forwarded.Headers)
	}
	if x.Local.Status != status {
		t.Errorf("status %d, want %d", x.Local.Status, status)
	}
	wantHeader(t, x.Local.Headers, "content-type", "application/json")
	var e openAIError
	raw := map[string]map[string]any{}
	if err := json.Unmarshal(x.Local.Body, &e); err != nil || json.Unmarshal(x.Local.Body, &raw) != nil {
		t.Fatalf("body %q: %v", x.Local.Body, err)
	}
	if v, ok := raw["error"]["param"]; !ok || v != nil {
		t.Errorf("param = %v (present %v), want null", v, ok)
	}
	if e.Error.Code != code || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("error %+v, want code %s", e.Error, code)
	}
	if strings.ContainsAny(x.Local.Details, " \t") {
		t.Errorf("details %q have spaces", x.Local.Details)
	}
	return e
}

func TestExtProcRateLimitedReply(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"solo"}`)
	r.roundTrip(r.downstream(), in, reply(200))
	r.clk.Advance(15 * time.Second)
	x := r.roundTrip(r.downstream(), in, r.noUpstream)
	wantLocal(t, x, 429, "rate_limit_exceeded")
	h := x.Local.Headers
	wantHeader(t, h, "retry-after", "45")
	wantHeader(t, h, "x-ratelimit-limit", "1")
	wantHeader(t, h, "x-ratelimit-remaining", "0")
	wantHeader(t, h, "x-ratelimit-reset", "45")
	r.clk.Advance(45 * time.Second)
	x = r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "solo")
}

func TestExtProcConcurrencyLimitedReply(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"narrow"}`)
	s, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel()
	if _, _, err := s.SendRequest(in); err != nil {
		t.Fatal(err)
	}
	x := r.roundTrip(r.downstream(), in, r.noUpstream)
	wantLocal(t, x, 429, "concurrency_limit_exceeded")
	wantHeader(t, x.Local.Headers, "retry-after", "1")
	wantNoHeader(t, x.Local.Headers, "x-ratelimit-limit")
}

func TestExtProcMixedLimitsReply(t *testing.T) {
	r := newExtRig(t)
	hold, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Cancel()
	if _, _, err := hold.SendRequest(chatRequest(`{"model":"narrow"}`)); err != nil {
		t.Fatal(err)
	}
	r.roundTrip(r.downstream(), chatRequest(`{"model":"solo"}`), reply(200))
	r.openBreaker("pair")
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"pair"}`), r.noUpstream)
	wantLocal(t, x, 429, "rate_limit_exceeded")
	wantHeader(t, x.Local.Headers, "retry-after", "1") // narrow's concurrency wait is the smallest
	wantHeader(t, x.Local.Headers, "x-ratelimit-limit", "1")
}

func TestExtProcUnavailableReply(t *testing.T) {
	r := newExtRig(t)
	for _, name := range []string{"primary", "secondary", "tertiary"} {
		r.openBreaker(name)
	}
	x := r.roundTrip(r.downstream(), chatRequest(body("acme-large")), r.noUpstream)
	e := wantLocal(t, x, 503, "service_unavailable")
	if e.Error.Type != "server_error" {
		t.Errorf("type %q", e.Error.Type)
	}
	wantHeader(t, x.Local.Headers, "retry-after", "30")
}
