package envoyapi

import (
	"strconv"
	"time"
)

// Header names both servers read and write. Every x-resil-* header is
// internal: the downstream role removes them from responses, and writes
// x-resil-fallback-from again when a fallback served, for the client.
const (
	hdrTarget       = "x-resil-target"
	hdrFallbackFrom = "x-resil-fallback-from"
	hdrRetry        = "x-resil-retry"
	hdrRetryAfter   = "x-resil-retry-after"
	hdrFirstAttempt = "x-resil-first-attempt"
	hdrCluster      = "x-resil-cluster" // the cluster of the next attempt, for Envoy's cluster specifier
	internalPrefix  = "x-resil-"

	hdrLimit     = "x-ratelimit-limit"
	hdrRemaining = "x-ratelimit-remaining"
	hdrReset     = "x-ratelimit-reset"

	hdrRetryAfterStd = "retry-after"
	hdrExpose        = "access-control-expose-headers"
	hdrAttemptCount  = "x-envoy-attempt-count"
	hdrRequestID     = "x-request-id"
	hdrStatus        = ":status"
	hdrContentType   = "content-type"
	hdrContentLen    = "content-length"

	// IETF RateLimit fields (HeadersIETF).
	hdrRateLimit       = "ratelimit"
	hdrRateLimitPolicy = "ratelimit-policy"
)

// draftNames are the draft headers' default names.
var draftNames = [3]string{hdrLimit, hdrRemaining, hdrReset}

// wholeSeconds rounds d up to whole seconds, 0 for d ≤ 0: Envoy and
// clients read integer seconds (duration_until_reset, x-ratelimit-reset),
// and a fraction rounded down would tell a client to come back too early.
func wholeSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// secondsValue is wholeSeconds as a header value.
func secondsValue(d time.Duration) string { return strconv.FormatInt(wholeSeconds(d), 10) }

// retryAfterValue is d as the delay-seconds of retry-after and
// x-resil-retry-after: whole seconds rounded up, at least 1. Envoy's
// reset-header parser takes integers only, and a hint of less than a
// second still asks the client to wait.
func retryAfterValue(d time.Duration) string { return strconv.FormatInt(max(wholeSeconds(d), 1), 10) }
