package retryhint

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Body is what an upstream's error body says about waiting, as the
// caller found it there. The zero Body says nothing.
type Body struct {
	// RetryDelays are google.rpc.RetryInfo retryDelay values, protobuf
	// Durations in their JSON form ("26s", "0.5s"): direct hints.
	RetryDelays []string
	// Text is the error message (or the body itself when it is not JSON),
	// searched last for waits such as "try again in 41.724s". Only its
	// first MiB is searched.
	Text string
}

// Parse finds the longest wait an upstream asked for before the next
// attempt, from its response headers (h may be nil) and what its error
// body says (b). now is the time the response arrived; it turns absolute
// times into waits. ok is false when the response carries no valid hint.
//
// Sources, in three tiers; a later tier is read only when the earlier ones
// hold no valid hint, and within a tier the largest value wins, so the
// result never undershoots what the server meant:
//
//  1. direct hints: retry-after-ms, x-ms-retry-after-ms and
//     x-amz-retry-after (milliseconds), grpc-retry-pushback-ms, Retry-After
//     as delay-seconds (a fraction is accepted) or an HTTP-date in any of
//     the three RFC 9110 forms, and b.RetryDelays;
//  2. window hints for exhausted dimensions: x-ratelimit-reset-requests or
//     -tokens (Go durations such as "6m0s") when the matching
//     x-ratelimit-remaining-* is 0; anthropic-ratelimit-*-reset (RFC 3339)
//     when the matching -remaining is 0; the IETF RateLimit field's t for
//     items with r=0; X-RateLimit-Reset as delta seconds, epoch seconds or
//     epoch milliseconds when X-RateLimit-Remaining is 0 or absent;
//  3. b.Text: "try again in 41.724s", "retry after 37 seconds".
//
// A malformed value is ignored. A time in the past and a negative number
// are a wait of zero (ok is true). A value that overflows, or is longer
// than [Max], is Max. "inf" and "nan" are malformed.
func Parse(h Headers, b Body, now time.Time) (time.Duration, bool) {
	if d, ok := directHint(h, b.RetryDelays, now); ok {
		return d, true
	}
	if d, ok := windowHint(h, now); ok {
		return d, true
	}
	return textHint(b.Text)
}

// hintAcc keeps the largest valid hint seen.
type hintAcc struct {
	d  time.Duration
	ok bool
}

func (a *hintAcc) add(d time.Duration, ok bool) {
	if ok && (!a.ok || d > a.d) {
		a.d, a.ok = d, true
	}
}

// msHeaders carry a wait in milliseconds.
var msHeaders = []string{"retry-after-ms", "x-ms-retry-after-ms", "x-amz-retry-after"}

func directHint(h Headers, retryDelays []string, now time.Time) (time.Duration, bool) {
	var acc hintAcc
	for _, name := range msHeaders {
		for _, v := range values(h, name) {
			acc.add(parseSignedDecimal(strings.TrimSpace(v), time.Millisecond))
		}
	}
	for _, v := range values(h, "grpc-retry-pushback-ms") {
		d, ok := parsePushback(v)
		acc.add(d, ok)
	}
	for _, v := range values(h, "retry-after") {
		acc.add(parseRetryAfter(v, now))
	}
	for _, v := range retryDelays {
		acc.add(parseProtoDuration(v))
	}
	return acc.d, acc.ok
}

// parseRetryAfter reads RFC 9110 Retry-After: delay-seconds (leniently
// with a fraction) or an HTTP-date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if d, ok := parseSignedDecimal(v, time.Second); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return untilTime(t, now), true
}

// parsePushback reads gRPC's grpc-retry-pushback-ms. Only a non-negative
// 32-bit integer is a hint; anything else means "do not retry" (see
// [Forbids]).
func parsePushback(v string) (time.Duration, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// Forbids reports whether the response forbids a retry of the same
// call: a grpc-retry-pushback-ms field that is negative or not a number,
// which gRFC A6 says must not be retried.
func Forbids(h Headers) bool {
	for _, v := range values(h, "grpc-retry-pushback-ms") {
		if _, ok := parsePushback(v); !ok {
			return true
		}
	}
	return false
}

// parseProtoDuration reads a protobuf Duration in its JSON form: decimal
// seconds with an "s" suffix.
func parseProtoDuration(v string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(v), "s")
	if !ok {
		return 0, false
	}
	return parseSignedDecimal(num, time.Second)
}

// textHintRE finds a wait written in an error message.
var textHintRE = regexp.MustCompile(`(?i)(?:try again|retry) (?:in|after) ` +
	`((?:\d+(?:\.\d+)?(?:ms|s|m|h))+\b|\d+(?:\.\d+)?\s*(?:milliseconds?|seconds?|secs?|minutes?|mins?|hours?)\b)`)

// textUnits maps the word units of a message hint.
var textUnits = []struct {
	prefix string
	unit   time.Duration
}{
	{"milli", time.Millisecond}, {"sec", time.Second}, {"min", time.Minute}, {"hour", time.Hour},
}

// maxText bounds how much of a Body's Text is searched.
const maxText = 1 << 20

func textHint(text string) (time.Duration, bool) {
	if len(text) > maxText {
		text = text[:maxText]
	}
	var acc hintAcc
	for _, m := range textHintRE.FindAllStringSubmatch(text, 8) {
		acc.add(parseTextWait(m[1]))
	}
	return acc.d, acc.ok
}

func parseTextWait(s string) (time.Duration, bool) {
	if d, ok := parseGoDuration(s); ok {
		return d, true
	}
	i := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if i <= 0 {
		return 0, false
	}
	num, word := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	for _, u := range textUnits {
		if strings.HasPrefix(word, u.prefix) {
			return parseDecimal(num, u.unit)
		}
	}
	return 0, false
}
