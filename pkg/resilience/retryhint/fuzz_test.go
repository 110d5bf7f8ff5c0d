package retryhint

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/internal/vectors"
)

// exactDecimal is s·unit in nanoseconds as an exact rational, when s is a
// plain decimal.
func exactDecimal(s string, unit time.Duration) (*big.Rat, bool) {
	if !allDigits(strings.Replace(s, ".", "", 1)) || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, false
	}
	return r.Mul(r, new(big.Rat).SetInt64(int64(unit))), true
}

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "1.5", "41.724", "0.0000000001", "99999999999999999999999", "1.", ".5", "-3", "1e3", "nan"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, unit := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second} {
			d, ok := parseDecimal(s, unit)
			if d < 0 || d > Max {
				t.Fatalf("parseDecimal(%q) = %v out of range", s, d)
			}
			exact, valid := exactDecimal(s, unit)
			if ok != valid {
				t.Fatalf("parseDecimal(%q) ok = %v, want %v", s, ok, valid)
			}
			if !ok {
				continue
			}
			got := new(big.Rat).SetInt64(int64(d))
			capped := new(big.Rat).SetInt64(int64(Max))
			if exact.Cmp(capped) >= 0 {
				if d != Max {
					t.Fatalf("parseDecimal(%q) = %v, want the cap", s, d)
				}
				continue
			}
			diff := new(big.Rat).Sub(got, exact)
			if diff.Sign() < 0 || diff.Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("parseDecimal(%q, %v) = %v, exact %s ns: undershoot or >1ns over", s, unit, d, exact.FloatString(3))
			}
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add("retry-after", "20", "")
	f.Add("retry-after", "Fri, 29 Sep 2023 16:26:57 GMT", "")
	f.Add("retry-after-ms", "1500.25", "")
	f.Add("x-ratelimit-reset-tokens", "2m59.56s", "")
	f.Add("ratelimit", `"default";r=0;t=30`, "")
	f.Add("x-ratelimit-reset", "1696004827000", "")
	f.Add("anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:37Z", "")
	f.Add("", "", "26s")
	f.Add("", "", `Please try again in 41.724s.`)
	f.Fuzz(func(t *testing.T, name, value, body string) {
		h := vectors.H(name, value, "x-ratelimit-remaining-tokens", "0", "anthropic-ratelimit-tokens-remaining", "0")
		d, ok := Parse(h, Body{RetryDelays: []string{body}, Text: body}, vectors.Now)
		if d < 0 || d > Max || (!ok && d != 0) {
			t.Fatalf("Parse(%q: %q, %q) = %v, %v", name, value, body, d, ok)
		}
		// A delay-seconds Retry-After is never undershot.
		if strings.EqualFold(name, "retry-after") && allDigits(strings.TrimSpace(value)) {
			n, _ := new(big.Int).SetString(strings.TrimSpace(value), 10)
			want := new(big.Int).Mul(n, big.NewInt(int64(time.Second)))
			if want.Cmp(big.NewInt(int64(Max))) > 0 {
				want = big.NewInt(int64(Max))
			}
			if !ok || big.NewInt(int64(d)).Cmp(want) < 0 {
				t.Fatalf("Retry-After %q gave %v, %v: undershoot", value, d, ok)
			}
		}
	})
}

func FuzzParseGoDuration(f *testing.F) {
	for _, s := range []string{"6m0s", "20ms", "2m59.56s", "1h2m3.5s", "-1s", "7", "1d", "µs", "9999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseGoDuration(s)
		if d < 0 || d > Max || (!ok && d != 0) {
			t.Fatalf("parseGoDuration(%q) = %v, %v", s, d, ok)
		}
		if std, err := time.ParseDuration(s); err == nil && ok && std > 0 && std < Max && d < std {
			t.Fatalf("parseGoDuration(%q) = %v undershoots time.ParseDuration %v", s, d, std)
		}
	})
}

func FuzzRateLimitField(f *testing.F) {
	for _, s := range []string{`"default";r=0;t=30`, `default;r=abc`, `"a";r=0;t=1, "b";r=0;t=9`, `:aGVsbG8=:;r=0;t=5`, `?1;r=0;t=2`, `"x`, `a;;`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseRateLimitField([]string{s})
		if d < 0 || d > Max || (!ok && d != 0) {
			t.Fatalf("parseRateLimitField(%q) = %v, %v", s, d, ok)
		}
	})
}
