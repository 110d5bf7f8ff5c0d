package resilience

import (
	"math/big"
	"strings"
	"testing"
	"time"
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
			if d < 0 || d > MaxRetryHint {
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
			capped := new(big.Rat).SetInt64(int64(MaxRetryHint))
			if exact.Cmp(capped) >= 0 {
				if d != MaxRetryHint {
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

func FuzzParseRetryHint(f *testing.F) {
	f.Add("retry-after", "20", "")
	f.Add("retry-after", "Fri, 29 Sep 2023 16:26:57 GMT", "")
	f.Add("retry-after-ms", "1500.25", "")
	f.Add("x-ratelimit-reset-tokens", "2m59.56s", "")
	f.Add("ratelimit", `"default";r=0;t=30`, "")
	f.Add("x-ratelimit-reset", "1696004827000", "")
	f.Add("anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:37Z", "")
	f.Add("", "", `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`)
	f.Add("", "", `Please try again in 41.724s.`)
	f.Fuzz(func(t *testing.T, name, value, body string) {
		h := hl(name, value, "x-ratelimit-remaining-tokens", "0", "anthropic-ratelimit-tokens-remaining", "0")
		d, ok := ParseRetryHint(h, []byte(body), testNow)
		if d < 0 || d > MaxRetryHint || (!ok && d != 0) {
			t.Fatalf("ParseRetryHint(%q: %q, %q) = %v, %v", name, value, body, d, ok)
		}
		// A delay-seconds Retry-After is never undershot.
		if strings.EqualFold(name, "retry-after") && allDigits(strings.TrimSpace(value)) {
			n, _ := new(big.Int).SetString(strings.TrimSpace(value), 10)
			want := new(big.Int).Mul(n, big.NewInt(int64(time.Second)))
			if want.Cmp(big.NewInt(int64(MaxRetryHint))) > 0 {
				want = big.NewInt(int64(MaxRetryHint))
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
		if d < 0 || d > MaxRetryHint || (!ok && d != 0) {
			t.Fatalf("parseGoDuration(%q) = %v, %v", s, d, ok)
		}
		if std, err := time.ParseDuration(s); err == nil && ok && std > 0 && std < MaxRetryHint && d < std {
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
		if d < 0 || d > MaxRetryHint || (!ok && d != 0) {
			t.Fatalf("parseRateLimitField(%q) = %v, %v", s, d, ok)
		}
	})
}

func FuzzHeaderSeconds(f *testing.F) {
	for _, d := range []int64{-1, 0, 1, 999999999, 1000000000, 1000000001, int64(MaxRetryHint), 1<<63 - 1} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		s := HeaderSeconds(d)
		secs, ok := new(big.Int).SetString(s, 10)
		if !ok || secs.Sign() <= 0 {
			t.Fatalf("HeaderSeconds(%v) = %q", d, s)
		}
		ns := new(big.Int).Mul(secs, big.NewInt(int64(time.Second)))
		if ns.Cmp(big.NewInt(n)) < 0 || (n > int64(time.Second) && new(big.Int).Sub(ns, big.NewInt(n)).Cmp(big.NewInt(int64(time.Second))) >= 0) {
			t.Fatalf("HeaderSeconds(%v) = %q: not the ceiling", d, s)
		}
	})
}

func FuzzClassify(f *testing.F) {
	f.Add(429, uint8(0), "retry-after", "20", `{"error":{"code":"rate_limit_exceeded","message":"try again in 2s"}}`, false)
	f.Add(503, uint8(0), "x-should-retry", "false", `{"error":{"code":503,"status":"UNAVAILABLE"}}`, false)
	f.Add(200, uint8(0), "", "", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}", true)
	f.Add(0, uint8(3), "", "", "", false)
	f.Fuzz(func(t *testing.T, status int, kind uint8, name, value, body string, committed bool) {
		in := Input{Status: status, Transport: TransportKind(kind), Header: hl(name, value), Body: []byte(body), Committed: committed, Now: testNow}
		v := Classify(in)
		switch {
		case v.Hint < 0 || v.SkipFor < 0 || v.SkipFor > MaxSkip || (!v.HasHint && v.Hint != 0):
			t.Fatalf("bad durations: %+v", v)
		case v.Committed && (v.Retry || v.Failover):
			t.Fatalf("committed but retryable: %+v", v)
		case v.CallerError && v.Failover:
			t.Fatalf("caller error that fails over: %+v", v)
		case !v.Failed() && (v.Retry || v.Failover || v.CountTarget || v.CountProvider || v.SkipFor != 0):
			t.Fatalf("success with effects: %+v", v)
		}
		p, _ := NewPolicy(Standard(), nil)
		step := p.Plan(v, Attempt{Now: testNow})
		if step.Action == ActionRetry && v.HasHint && step.Delay < v.Hint {
			t.Fatalf("retry after %v undershoots hint %v", step.Delay, v.Hint)
		}
	})
}
