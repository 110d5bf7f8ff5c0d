package resilience

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/retryhint"
)

// MaxSkip is the longest a target is skipped after one response: the
// skip for quota exhaustion, and the cap on a skip taken from a hint
// (a hint itself may be as long as [retryhint.Max]).
const MaxSkip = time.Hour

// ConcurrencyWait is the wait before retrying a target that refused a
// request for lack of a concurrency slot, when it sent no hint.
const ConcurrencyWait = 250 * time.Millisecond

// Class names a kind of failure, for metrics and for callers that route
// on it (for example context_length, which fails over only to a hop with a
// larger context window). The zero value, ClassNone, is a success.
type Class string

// The failure classes.
const (
	ClassNone          Class = ""
	ClassRate          Class = "rate"
	ClassQuota         Class = "quota"
	ClassConcurrency   Class = "concurrency"
	ClassOverload      Class = "overload"
	ClassServer        Class = "server"
	ClassTimeout       Class = "timeout"
	ClassAuth          Class = "auth"
	ClassConfig        Class = "config"
	ClassContextLength Class = "context_length"
	ClassContentPolicy Class = "content_policy"
	ClassClient        Class = "client"
	ClassTransport     Class = "transport"
)

// TransportKind says how an attempt failed when there was no HTTP
// response. The zero value, TransportNone, means a response arrived.
type TransportKind uint8

// The transport failure kinds.
const (
	TransportNone          TransportKind = iota
	TransportTimeout                     // no response within the (per-try) timeout
	TransportConnect                     // connection refused or connect timeout
	TransportDNS                         // the name did not resolve
	TransportTLS                         // handshake or certificate failure
	TransportRefusedStream               // HTTP/2 REFUSED_STREAM: not processed
	TransportReset                       // reset or EOF after the request was sent
	TransportCanceled                    // the downstream caller went away
	TransportOther                       // any other failure without a response
)

var transportNames = [...]string{"none", "timeout", "connect", "dns", "tls", "refused_stream", "reset", "canceled", "other"}

// String returns the kind's name.
func (k TransportKind) String() string {
	if int(k) < len(transportNames) {
		return transportNames[k]
	}
	return "transport(" + strconv.Itoa(int(k)) + ")"
}

// Input is one upstream attempt's outcome, as far as it is known.
type Input struct {
	Status    int               // HTTP status; 0 when no response arrived
	Transport TransportKind     // why there is no response, if there is none
	Header    retryhint.Headers // response headers (and trailers); may be nil
	Body      []byte            // the error body (JSON or an SSE error event), if buffered
	Committed bool              // response bytes were already forwarded downstream
	Now       time.Time         // when the response arrived; turns dates into waits
}

// Verdict is what an attempt's outcome means for the request, the target
// and the target's provider. Classify fills it; the zero value is a
// success.
type Verdict struct {
	Class Class
	// Retry: the same target may be tried again, after a delay.
	Retry bool
	// Failover: the next hop of the fallback chain may be tried.
	Failover bool
	// CountTarget and CountProvider: the failure counts against the
	// target's and the provider's breaker.
	CountTarget, CountProvider bool
	// CallerError: the request itself is at fault; return the upstream's
	// error to the caller, try nothing else.
	CallerError bool
	// Committed: bytes already went downstream; nothing can be retried.
	Committed bool
	// Hint is the wait the upstream asked for (HasHint), or the class's
	// fixed wait (ConcurrencyWait). Never negative.
	Hint    time.Duration
	HasHint bool
	// SkipFor is how long to skip the target from now on: the hint of a
	// throttling response, capped at MaxSkip, or MaxSkip for a quota.
	SkipFor time.Duration
}

// Failed reports whether the verdict is a failure of any class.
func (v Verdict) Failed() bool { return v.Class != ClassNone }

// Classify turns an attempt's outcome into a verdict. The first source
// that says something decides the class: committed bytes, then the
// transport kind, then the body's error type, code and message, then the
// status code; an x-should-retry header then overrides the retry decision.
// Provider patterns live in tables (see rules.go).
func Classify(in Input) Verdict {
	var b bodyInfo
	if len(in.Body) > 0 {
		b = parseBody(in.Body)
	}
	if code, ok := first(in.Header, "x-amzn-errortype"); ok {
		name, _, _ := strings.Cut(code, ":")
		b.codes = append(b.codes, strings.ToLower(name))
		b.errorObj = true // an AWS error, also as an event-stream frame
	}
	eff, ok := transportEffect(in.Transport)
	if !ok {
		eff = responseEffect(in, &b)
	}
	if eff.class == ClassNone {
		return Verdict{}
	}
	v := eff.verdict()
	if in.Transport == TransportNone {
		applyServerSays(&v, in.Header)
		applyHint(&v, eff, in.Header, &b, in.Now)
	}
	if in.Committed {
		v.Retry, v.Failover, v.CallerError, v.Committed = false, false, false, true
	}
	return v
}

// responseEffect classifies a response: headers and body first, the
// status code last. A body is read as an error only when the status is an
// error or the body says it is one (an SSE error event after a 200).
func responseEffect(in Input, b *bodyInfo) effect {
	status := in.Status
	if status == 0 {
		return effTransport
	}
	if status < 400 && !b.isError() {
		return effect{}
	}
	if headerConcurrency(in.Header) {
		return effConcurrency
	}
	if eff, ok := bodyEffect(b, status); ok {
		return eff
	}
	if b.status != 0 {
		status = b.status
	}
	return statusEffect(status)
}

// applyServerSays applies x-should-retry and gRPC pushback, which override
// the class's retry decision.
func applyServerSays(v *Verdict, h retryhint.Headers) {
	if s, ok := first(h, "x-should-retry"); ok {
		switch strings.ToLower(s) {
		case "true":
			v.Retry, v.CallerError = true, false
		case "false":
			v.Retry = false
		}
	}
	if retryhint.Forbids(h) {
		v.Retry = false
	}
}

// applyHint records the upstream's hint and the skip it implies. A rate
// failure with a hint skips its target instead of counting against it.
func applyHint(v *Verdict, eff effect, h retryhint.Headers, b *bodyInfo, now time.Time) {
	if d, ok := retryhint.Parse(h, retryhint.Body{RetryDelays: b.retryDelays, Text: b.text}, now); ok {
		v.Hint, v.HasHint = d, true
		if eff.class == ClassRate {
			v.CountTarget = false
		}
		if eff.class != ClassConcurrency {
			v.SkipFor = max(v.SkipFor, min(d, MaxSkip))
		}
	} else if eff.wait > 0 {
		v.Hint, v.HasHint = eff.wait, true
	}
}

// headerConcurrency reports current-concurrent-requests ≥
// maximum-concurrent-requests (with or without an x- prefix).
func headerConcurrency(h retryhint.Headers) bool {
	for _, prefix := range []string{"", "x-"} {
		cur, ok1 := first(h, prefix+"current-concurrent-requests")
		limit, ok2 := first(h, prefix+"maximum-concurrent-requests")
		if !ok1 || !ok2 {
			continue
		}
		c, err1 := strconv.ParseUint(cur, 10, 64)
		m, err2 := strconv.ParseUint(limit, 10, 64)
		if err1 == nil && err2 == nil && c >= m {
			return true
		}
	}
	return false
}

// first returns the first value of the header field name, trimmed of
// optional white space, and whether the field was present.
func first(h retryhint.Headers, name string) (string, bool) {
	if h == nil {
		return "", false
	}
	if vs := h.Values(name); len(vs) > 0 {
		return strings.TrimSpace(vs[0]), true
	}
	return "", false
}
