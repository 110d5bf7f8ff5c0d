package envoyapi

import (
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/retryhint"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// refuse builds the local reply for a chain with no eligible hop: an
// OpenAI-style JSON error, retry-after (the smallest wait of any hop, in
// whole seconds, at least 1) and, when a limit refused, its
// x-ratelimit-* headers. It returns the refusal's metric outcome too.
func refuse(root *policy.Target, c *routing.Choice) (*extprocv3.ProcessingResponse, string) {
	r := c.Refusal(root)
	retryAfter := retryAfterValue(r.Wait)
	var m mutation
	m.put(hdrContentType, "application/json")
	m.put(hdrRetryAfterStd, retryAfter)
	exposed := []string{hdrRetryAfterStd}
	if c.HasDenied {
		exposed = putRateLimit(&m, exposed, c.Denied)
	}
	m.put(hdrExpose, strings.Join(exposed, ", "))
	msg := r.Message + " Retry after " + retryAfter + " s."
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: m.proto(),
			Body:    errorBody(msg, r.Type, r.Code),
			Details: "resil_" + r.Outcome,
		},
	}}, r.Outcome
}

// putRateLimit writes a limit decision as x-ratelimit-limit, -remaining
// and -reset (plain integers) and adds their names to exposed.
func putRateLimit(m *mutation, exposed []string, r limiter.Result) []string {
	m.put(hdrLimit, strconv.FormatUint(r.Limit, 10))
	m.put(hdrRemaining, strconv.FormatUint(r.Remaining, 10))
	m.put(hdrReset, secondsValue(r.Reset))
	return append(exposed, hdrLimit, hdrRemaining, hdrReset)
}

// clientHeaders rewrites response headers for the client: no internal
// x-resil-* header but x-resil-fallback-from naming fallbackFrom when a
// fallback served, the hop's rate limit (when limited), a standard
// retry-after in integer seconds from whatever hint an error response
// carries, and access-control-expose-headers naming what was added
// (merged with the upstream's list).
func (x *ExtProc) clientHeaders(hs headerMap, limited bool, rate limiter.Result, fallbackFrom string) mutation {
	var m mutation
	for _, k := range hs.internal() {
		m.del(k)
	}
	var exposed []string
	if fallbackFrom != "" {
		m.put(hdrFallbackFrom, fallbackFrom)
		exposed = append(exposed, hdrFallbackFrom)
	}
	if limited {
		exposed = putRateLimit(&m, exposed, rate)
	}
	if st := hs.status(); st >= 400 || st == 0 {
		if hint, ok := retryhint.Parse(hs, retryhint.Body{}, x.route.Now()); ok {
			m.put(hdrRetryAfterStd, retryAfterValue(hint))
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
