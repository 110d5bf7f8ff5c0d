package retryhint

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// windowDims pairs a reset header with the remaining header that says
// whether its dimension is exhausted.
type windowDim struct {
	reset, remaining string
	parse            func(v string, now time.Time) (time.Duration, bool)
}

var windowDims = []windowDim{
	{"x-ratelimit-reset-requests", "x-ratelimit-remaining-requests", parseResetDuration},
	{"x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens", parseResetDuration},
	{"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", parseRFC3339Wait},
	{"anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", parseRFC3339Wait},
	{"anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-input-tokens-remaining", parseRFC3339Wait},
	{"anthropic-ratelimit-output-tokens-reset", "anthropic-ratelimit-output-tokens-remaining", parseRFC3339Wait},
}

// resetDims are the generic X-RateLimit-Reset spellings; their remaining
// field may be absent (Together sends a bare x-ratelimit-reset).
var resetDims = []windowDim{
	{"x-ratelimit-reset", "x-ratelimit-remaining", parseResetValue},
	{"ratelimit-reset", "ratelimit-remaining", parseResetValue},
	{"x-rate-limit-reset", "x-rate-limit-remaining", parseResetValue},
}

func windowHint(h Headers, now time.Time) (time.Duration, bool) {
	var acc hintAcc
	for _, dim := range windowDims {
		if rem, ok := first(h, dim.remaining); ok && rem == "0" {
			if v, ok := first(h, dim.reset); ok {
				acc.add(dim.parse(v, now))
			}
		}
	}
	for _, dim := range resetDims {
		rem, present := first(h, dim.remaining)
		if present && rem != "0" {
			continue
		}
		if v, ok := first(h, dim.reset); ok {
			acc.add(dim.parse(v, now))
		}
	}
	acc.add(parseRateLimitField(values(h, "ratelimit")))
	return acc.d, acc.ok
}

// parseResetDuration reads OpenAI/Groq resets ("6m0s", "20ms"; a bare
// number is seconds).
func parseResetDuration(v string, _ time.Time) (time.Duration, bool) {
	return parseGoDuration(v)
}

func parseRFC3339Wait(v string, now time.Time) (time.Duration, bool) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, false
	}
	return untilTime(t, now), true
}

// Thresholds of the X-RateLimit-Reset heuristic: a number this large is
// an epoch time, not a delta.
const (
	epochMillisFrom  = 1_000_000_000_000
	epochSecondsFrom = 1_000_000_000
)

// parseResetValue reads an X-RateLimit-Reset value: delta seconds, epoch
// seconds (≥ 1e9), epoch milliseconds (≥ 1e12), or a date.
func parseResetValue(v string, now time.Time) (time.Duration, bool) {
	if len(v) > 0 && v[0] == '-' {
		return parseSignedDecimal(v, time.Second)
	}
	intPart, frac, hasDot := strings.Cut(v, ".")
	if !allDigits(intPart) {
		return parseDateWait(v, now)
	}
	if hasDot && !allDigits(frac) {
		return 0, false
	}
	intPart = strings.TrimLeft(intPart, "0")
	if len(intPart) > 18 {
		return Max, true // beyond any epoch time.Time represents
	}
	var x uint64
	for i := 0; i < len(intPart); i++ {
		x = x*10 + uint64(intPart[i]-'0')
	}
	switch {
	case x >= epochMillisFrom:
		return epochWait(x, frac, time.Millisecond, now), true
	case x >= epochSecondsFrom:
		return epochWait(x, frac, time.Second, now), true
	}
	return parseDecimal(v, time.Second)
}

// epochWait is the wait until x units (plus a fraction) after the Unix
// epoch, rounded up, zero for the past, at most Max.
func epochWait(x uint64, frac string, unit time.Duration, now time.Time) time.Duration {
	if x > uint64(math.MaxInt64/unit)-1 {
		return Max
	}
	at := time.Duration(x)*unit + fracDuration(frac, unit)
	return untilTime(time.Unix(0, 0).Add(at), now)
}

func parseDateWait(v string, now time.Time) (time.Duration, bool) {
	if t, err := http.ParseTime(v); err == nil {
		return untilTime(t, now), true
	}
	return parseRFC3339Wait(v, now)
}
