package envoyapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// refusal describes why no hop of a chain could serve.
type refusal struct {
	status  typev3.StatusCode
	typ     string // the error body's type
	code    string // the error body's code
	outcome string // the metric outcome
	message string
}

// refusalOf classifies a walk without a serving hop: 429 when any hop was
// skipped for a limit (a rate limit, a token budget, a throttling skip,
// a concurrency cap), else 503 (every breaker open).
func refusalOf(root *policy.Target, c *choice) refusal {
	var rate, conc bool
	for _, h := range c.walk.Hops {
		switch h.Reason {
		case resilience.SkipRateLimited:
			rate = true
		case resilience.SkipConcurrencyLimited:
			conc = true
		}
	}
	switch {
	case rate:
		typ := "requests"
		if c.tokens {
			typ = "tokens"
		}
		return refusal{typev3.StatusCode_TooManyRequests, typ, "rate_limit_exceeded", "rate_limited",
			fmt.Sprintf("Rate limit reached for %s and its fallbacks.", root.Name)}
	case conc:
		return refusal{typev3.StatusCode_TooManyRequests, "requests", "concurrency_limit_exceeded", "concurrency_limited",
			fmt.Sprintf("Too many concurrent requests for %s and its fallbacks.", root.Name)}
	}
	return refusal{typev3.StatusCode_ServiceUnavailable, "server_error", "service_unavailable", "unavailable",
		fmt.Sprintf("%s and its fallbacks are unavailable.", root.Name)}
}

// refuse builds the local reply for a chain with no eligible hop: an
// OpenAI-style JSON error, retry-after (the smallest wait of any hop, in
// whole seconds, at least 1) and, when a rate limit refused, its
// x-ratelimit-* headers.
func (x *ExtProc) refuse(root *policy.Target, c *choice) (*extprocv3.ProcessingResponse, string) {
	r := refusalOf(root, c)
	wait, found := time.Duration(0), false
	for _, h := range c.walk.Hops {
		if h.Status == resilience.HopSkipped && h.Wait > 0 && (!found || h.Wait < wait) {
			wait, found = h.Wait, true
		}
	}
	retryAfter := resilience.HeaderSeconds(wait)
	var m mutation
	m.put(hdrContentType, "application/json")
	m.put(hdrRetryAfterStd, retryAfter)
	exposed := []string{hdrRetryAfterStd}
	if c.hasDenied {
		m.put(hdrLimit, strconv.FormatUint(c.denied.Limit, 10))
		m.put(hdrRemaining, strconv.FormatUint(c.denied.Remaining, 10))
		m.put(hdrReset, ceilSeconds(c.denied.Reset))
		exposed = append(exposed, hdrLimit, hdrRemaining, hdrReset)
	}
	m.put(hdrExpose, strings.Join(exposed, ", "))
	msg := r.message + " Retry after " + retryAfter + " s."
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: r.status},
			Headers: m.proto(),
			Body:    errorBody(msg, r.typ, r.code),
			Details: "resil_" + r.outcome,
		},
	}}, r.outcome
}

// clientHeaders rewrites response headers for the client: the hop's rate
// limit (when limited), a standard retry-after in integer seconds from
// whatever hint an error response carries, access-control-expose-headers
// naming what was added (merged with the upstream's list), and no
// internal x-resil-* header.
func (x *ExtProc) clientHeaders(hs headerMap, limited bool, rate limiter.Result) mutation {
	var m mutation
	for _, k := range hs.internal() {
		m.del(k)
	}
	var exposed []string
	if limited {
		m.put(hdrLimit, strconv.FormatUint(rate.Limit, 10))
		m.put(hdrRemaining, strconv.FormatUint(rate.Remaining, 10))
		m.put(hdrReset, ceilSeconds(rate.Reset))
		exposed = append(exposed, hdrLimit, hdrRemaining, hdrReset)
	}
	if st := hs.status(); st >= 400 || st == 0 {
		if hint, ok := resilience.ParseRetryHint(hs, nil, x.deps.Now()); ok {
			m.put(hdrRetryAfterStd, resilience.HeaderSeconds(hint))
			exposed = append(exposed, hdrRetryAfterStd)
		}
	}
	if len(exposed) > 0 {
		m.put(hdrExpose, mergeExpose(hs.Values(hdrExpose), exposed))
	}
	return m
}

// mergeExpose joins the upstream's expose list with ours, keeping the
// upstream's order and dropping duplicates (names compare without case).
func mergeExpose(upstream []string, ours []string) string {
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		name = strings.TrimSpace(name)
		if k := strings.ToLower(name); name != "" && !seen[k] {
			seen[k] = true
			out = append(out, name)
		}
	}
	for _, v := range upstream {
		for _, name := range strings.Split(v, ",") {
			add(name)
		}
	}
	for _, name := range ours {
		add(name)
	}
	return strings.Join(out, ", ")
}

// ceilSeconds renders d in whole seconds, rounded up: a client told to
// come back must not come back early.
func ceilSeconds(d time.Duration) string {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return seconds(s)
}
