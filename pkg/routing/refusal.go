package routing

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// Refusal describes why no hop of a chain could serve, for the reply a
// client gets instead.
type Refusal struct {
	// Status is 429 when any hop was skipped for a limit (a rate limit, a
	// token budget, a throttling skip, a concurrency cap), 400 when the
	// request is too large for every context window (and no breaker was
	// open), else 503 (every breaker open).
	Status int
	// Type and Code are the OpenAI-style error body's type and code.
	Type, Code string
	// Outcome names the refusal in metrics: rate_limited,
	// concurrency_limited, context_window or unavailable.
	Outcome string
	Message string
	// Wait is the smallest wait any skipped hop reported; zero when none
	// did.
	Wait time.Duration
}

// Refusal describes a walk of root's chain that found no serving hop.
func (c *Choice) Refusal(root *policy.Target) Refusal {
	var rate, conc, window, breaker bool
	typ := ""
	for _, h := range c.Walk.Hops {
		switch h.Reason {
		case SkipContextWindow:
			window = true
		case resilience.SkipBreakerOpen:
			breaker = true
		case resilience.SkipRateLimited, SkipTokenLimited:
			rate = true
			if typ == "" {
				typ = "requests"
				if h.Reason == SkipTokenLimited {
					typ = "tokens"
				}
			}
		case resilience.SkipConcurrencyLimited:
			conc = true
		}
	}
	r := Refusal{Wait: smallestWait(c.Walk.Hops)}
	switch {
	case rate:
		r.Status, r.Type, r.Code, r.Outcome = http.StatusTooManyRequests, typ, "rate_limit_exceeded", "rate_limited"
		r.Message = fmt.Sprintf("Rate limit reached for %s and its fallbacks.", root.Name)
	case conc:
		r.Status, r.Type, r.Code, r.Outcome = http.StatusTooManyRequests, "requests", "concurrency_limit_exceeded", "concurrency_limited"
		r.Message = fmt.Sprintf("Too many concurrent requests for %s and its fallbacks.", root.Name)
	case window && !breaker:
		r.Status, r.Type, r.Code, r.Outcome = http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "context_window"
		r.Message = fmt.Sprintf("The request is larger than the context window of %s and its fallbacks.", root.Name)
	default:
		r.Status, r.Type, r.Code, r.Outcome = http.StatusServiceUnavailable, "server_error", "service_unavailable", "unavailable"
		r.Message = fmt.Sprintf("%s and its fallbacks are unavailable.", root.Name)
	}
	return r
}

// smallestWait is the shortest positive wait of the skipped hops.
func smallestWait(hops []resilience.HopReport) time.Duration {
	wait, found := time.Duration(0), false
	for _, h := range hops {
		if h.Status == resilience.HopSkipped && h.Wait > 0 && (!found || h.Wait < wait) {
			wait, found = h.Wait, true
		}
	}
	return wait
}
