package envoyapi

import (
	"bytes"
	"log/slog"
	"strings"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// transportCheck tells a router's local reply for an upstream that never
// answered (a failed connection, a reset, a timeout) from an upstream's
// own response, as the downstream role sees it. Envoy's router answers
// such a request itself, after its retries: 503 "upstream connect error or
// disconnect/reset before headers. reset reason: …" or 504 "upstream
// request timeout", with the response code details (the
// response.code_details attribute, when the filter asks for it)
// upstream_reset_before_response_started{…}, upstream_per_try_timeout or
// upstream_response_timeout. A response the upstream role saw carries
// x-resil-target and is never one of them.
type transportCheck struct {
	kind     resilience.TransportKind
	maybe    bool // a 503 or 504 without details: the body tells
	recorded bool
}

// begin judges the response headers and the code details.
func (c *transportCheck) begin(details string, hs headerMap, status int) {
	if _, ok := hs.get(hdrTarget); ok || (status != 503 && status != 504) {
		return
	}
	if details != "" {
		c.kind = detailsKind(details)
		return
	}
	ct, _ := hs.get(hdrContentType)
	c.maybe = ct == "" || strings.HasPrefix(ct, "text/plain")
}

// body judges the first body chunk of a response begin found ambiguous,
// and returns the kind once found.
func (c *transportCheck) body(chunk []byte) resilience.TransportKind {
	if !c.maybe {
		return resilience.TransportNone
	}
	c.maybe = false
	switch {
	case bytes.HasPrefix(chunk, []byte("upstream request timeout")):
		c.kind = resilience.TransportTimeout
	case bytes.HasPrefix(chunk, []byte("upstream connect error or disconnect/reset before headers")):
		c.kind = resetReasonKind(string(chunk))
	}
	return c.kind
}

// detailsKind maps Envoy's response code details to a transport kind.
func detailsKind(details string) resilience.TransportKind {
	switch {
	case strings.HasPrefix(details, "upstream_per_try_timeout"), strings.HasPrefix(details, "upstream_response_timeout"),
		strings.HasPrefix(details, "upstream_per_try_idle_timeout"):
		return resilience.TransportTimeout
	case strings.HasPrefix(details, "upstream_reset_before_response_started"):
		return resetReasonKind(details)
	case strings.HasPrefix(details, "upstream_reset_after_response_started"):
		return resilience.TransportReset
	case strings.HasPrefix(details, "no_healthy_upstream"):
		return resilience.TransportConnect
	}
	return resilience.TransportNone
}

// resetReasonKind reads Envoy's reset reason, in the details
// ({connection_failure}, {connection_timeout}, {remote_refused_stream_reset})
// or in the local reply's text (reset reason: connection failure).
func resetReasonKind(s string) resilience.TransportKind {
	s = strings.ReplaceAll(strings.ToLower(s), " ", "_")
	switch {
	case strings.Contains(s, "connection_failure"), strings.Contains(s, "connection_timeout"),
		strings.Contains(s, "overflow"):
		return resilience.TransportConnect
	case strings.Contains(s, "refused_stream"):
		return resilience.TransportRefusedStream
	}
	return resilience.TransportReset
}

// recordTransport feeds the breakers with a transport failure of the hop
// this role chose (the router's reply names no other), once.
func (d *downstream) recordTransport(k resilience.TransportKind) {
	if k == resilience.TransportNone || d.failure.recorded || d.choice.Hop == nil {
		return
	}
	d.failure.recorded = true
	v := resilience.Classify(resilience.Input{Transport: k, Now: d.x.route.Now()})
	d.x.route.Record(d.choice.Hop, v)
	d.x.metrics.verdict(d.ctx, roleDownstream, "transport_failure")
	d.x.log.LogAttrs(d.ctx, slog.LevelDebug, "upstream failed without a response", slog.String("target", d.choice.Hop.Name),
		slog.String("kind", k.String()))
}
