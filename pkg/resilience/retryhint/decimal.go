package retryhint

import (
	"math/bits"
	"strings"
	"time"
)

// Max is the longest hint Parse reports. A hint that is longer, or whose
// number overflows, is reported as Max: "too long". Callers that wait or
// skip cap far below it (resilience skips a target for at most an hour),
// so the cap never shortens a wait.
const Max = 24 * time.Hour

// pow10 holds 10^0 … 10^19.
var pow10 = func() [20]uint64 {
	var p [20]uint64
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// parseDecimal reads "digits[.digits]" (no sign, no exponent, no spaces)
// as a number of units. The result is exact and rounded up to the next
// nanosecond, so it never undershoots. Values above Max saturate
// to Max. ok is false when s is not such a number.
func parseDecimal(s string, unit time.Duration) (d time.Duration, ok bool) {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(intPart) || (hasDot && !allDigits(frac)) {
		return 0, false
	}
	limit := uint64(Max / unit)
	var n uint64
	for i := 0; i < len(intPart); i++ {
		n = n*10 + uint64(intPart[i]-'0')
		if n > limit {
			return Max, true
		}
	}
	total := time.Duration(n) * unit
	total += fracDuration(frac, unit)
	return min(total, Max), true
}

// fracDuration converts the digits after a decimal point into a duration
// of unit, rounding any remainder up to one nanosecond.
func fracDuration(frac string, unit time.Duration) time.Duration {
	const maxDigits = 18
	roundUp := false
	if len(frac) > maxDigits {
		for i := maxDigits; i < len(frac); i++ {
			if frac[i] != '0' {
				roundUp = true
				break
			}
		}
		frac = frac[:maxDigits]
	}
	var f uint64
	for i := 0; i < len(frac); i++ {
		f = f*10 + uint64(frac[i]-'0')
	}
	hi, lo := bits.Mul64(f, uint64(unit))
	quo, rem := bits.Div64(hi, lo, pow10[len(frac)])
	if rem != 0 || roundUp {
		quo++
	}
	return time.Duration(quo)
}

// allDigits reports whether s is a non-empty run of ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseSignedDecimal is parseDecimal that also accepts a leading '-': a
// negative number is a wait of zero.
func parseSignedDecimal(s string, unit time.Duration) (time.Duration, bool) {
	if len(s) > 0 && s[0] == '-' {
		if _, ok := parseDecimal(s[1:], unit); ok {
			return 0, true
		}
		return 0, false
	}
	return parseDecimal(s, unit)
}

// untilTime is the wait from now until t: zero for the past, at most
// Max.
func untilTime(t, now time.Time) time.Duration {
	d := t.Sub(now)
	if d < 0 {
		return 0
	}
	return min(d, Max)
}

// goDurationUnits are the units time.ParseDuration knows.
var goDurationUnits = []struct {
	name string
	unit time.Duration
}{
	{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond},
	{"μs", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second},
	{"m", time.Minute}, {"h", time.Hour},
}

// parseGoDuration reads a Go duration string such as "6m0s", "20ms" or
// "2m59.56s", exactly and saturating at Max. A bare number is
// seconds; a leading '-' makes the wait zero.
func parseGoDuration(s string) (time.Duration, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if d, ok := parseDecimal(s, time.Second); ok {
		return zeroIf(neg, d), true
	}
	if s == "" {
		return 0, false
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && (s[i] == '.' || (s[i] >= '0' && s[i] <= '9')) {
			i++
		}
		num, rest := s[:i], s[i:]
		j := 0
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') && rest[j] != '.' {
			j++
		}
		unit, ok := goUnit(rest[:j])
		if !ok {
			return 0, false
		}
		d, ok := parseDecimal(num, unit)
		if !ok {
			return 0, false
		}
		total = min(total+d, Max)
		s = rest[j:]
	}
	return zeroIf(neg, total), true
}

func goUnit(name string) (time.Duration, bool) {
	for _, u := range goDurationUnits {
		if u.name == name {
			return u.unit, true
		}
	}
	return 0, false
}

func zeroIf(cond bool, d time.Duration) time.Duration {
	if cond {
		return 0
	}
	return d
}
