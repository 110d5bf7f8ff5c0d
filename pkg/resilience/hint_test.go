package resilience

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryHintForms(t *testing.T) {
	tests := []struct {
		name string
		h    HeaderList
		body string
		want time.Duration
		ok   bool
	}{
		{"none", nil, "", 0, false},
		{"ms float", hl("retry-after-ms", "1500.5"), "", 1500500 * time.Microsecond, true},
		{"ms negative is zero", hl("retry-after-ms", "-3"), "", 0, true},
		{"ms exponent is malformed", hl("retry-after-ms", "1e3"), "", 0, false},
		{"amz", hl("x-amz-retry-after", "250"), "", 250 * time.Millisecond, true},
		{"sub-ns rounds up", hl("Retry-After", "0.0000000001"), "", time.Nanosecond, true},
		{"overflow ms", hl("retry-after-ms", "123456789012345678901234567890"), "", MaxRetryHint, true},
		{"longer than cap", hl("Retry-After", "100000"), "", MaxRetryHint, true},
		{"rfc850 past", hl("Retry-After", "Friday, 29-Sep-23 16:26:00 GMT"), "", 0, true},
		{"zone other than GMT", hl("Retry-After", "Fri, 29 Sep 2023 16:26:57 +0200"), "", 0, false},
		{"remaining not zero", hl("x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "1s"), "", 0, false},
		{"both dims exhausted takes max", hl("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m30s"), "", 90 * time.Second, true},
		{"bad go duration", hl("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1d"), "", 0, false},
		{"bare reset seconds", hl("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "7"), "", 7 * time.Second, true},
		{"X-RateLimit-Reset ignored when remaining", hl("X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "30"), "", 0, false},
		{"X-RateLimit-Reset date", hl("X-RateLimit-Reset", "Fri, 29 Sep 2023 16:27:07 GMT"), "", 30 * time.Second, true},
		{"X-RateLimit-Reset rfc3339", hl("X-RateLimit-Reset", "2023-09-29T16:27:07Z"), "", 30 * time.Second, true},
		{"X-RateLimit-Reset epoch fraction rounds up", hl("X-RateLimit-Reset", "1696004827.5"), "", 30500 * time.Millisecond, true},
		{"X-RateLimit-Reset far epoch", hl("X-RateLimit-Reset", "99999999999999999999"), "", MaxRetryHint, true},
		{"RateLimit two items", hl("RateLimit", `"a";r=0;t=10, "b";r=0;t=40, "c";r=5;t=90`), "", 40 * time.Second, true},
		{"RateLimit split fields", hl("RateLimit", `"a";r=0;t=10`, "RateLimit", `"b";r=0;t=20`), "", 20 * time.Second, true},
		{"RateLimit r not zero", hl("RateLimit", `"a";r=1;t=10`), "", 0, false},
		{"RateLimit trailing comma", hl("RateLimit", `"a";r=0;t=10,`), "", 0, false},
		{"RateLimit decimal t", hl("RateLimit", `"a";r=0;t=1.5`), "", 0, false},
		{"direct beats window", hl("Retry-After", "1", "RateLimit", `"a";r=0;t=30`), "", time.Second, true},
		{"body text ms", nil, `{"error":{"message":"Please try again in 20ms."}}`, 20 * time.Millisecond, true},
		{"body text compound", nil, `{"error":{"message":"Please try again in 1m12.5s."}}`, 72500 * time.Millisecond, true},
		{"body text minutes", nil, `slow down; retry after 2 minutes`, 2 * time.Minute, true},
		{"window beats body text", hl("X-RateLimit-Reset", "5"), `{"error":{"message":"try again in 50s"}}`, 5 * time.Second, true},
		{"retryDelay malformed", nil, `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26"}]}}`, 0, false},
		{"retryDelay nanos", nil, `[{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.000340012s"}]}}]`, 1000340012, true},
		{"pushback", hl("grpc-retry-pushback-ms", "1500"), "", 1500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryHint(tt.h, []byte(tt.body), testNow)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("ParseRetryHint = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestHeaderAdapters(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "7")
	if d, ok := ParseRetryHint(h, nil, testNow); !ok || d != 7*time.Second {
		t.Fatalf("http.Header: %v %v", d, ok)
	}
	f := HeaderFunc(func(name string) []string {
		if name == "retry-after" {
			return []string{"9"}
		}
		return nil
	})
	if d, ok := ParseRetryHint(f, nil, testNow); !ok || d != 9*time.Second {
		t.Fatalf("HeaderFunc: %v %v", d, ok)
	}
	if got := hl("A", "1", "a", "2", "b", "3").Values("A"); len(got) != 2 || got[1] != "2" {
		t.Fatalf("HeaderList.Values = %v", got)
	}
}

func TestHeaderSeconds(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{-time.Second, "1"}, {0, "1"}, {time.Nanosecond, "1"}, {time.Second, "1"},
		{time.Second + time.Nanosecond, "2"}, {1500 * time.Millisecond, "2"}, {41724 * time.Millisecond, "42"},
		{120 * time.Second, "120"}, {MaxRetryHint, "86400"},
	}
	for _, tt := range tests {
		if got := HeaderSeconds(tt.give); got != tt.want {
			t.Errorf("HeaderSeconds(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestClassifyConcurrencyHeaders(t *testing.T) {
	v := Classify(Input{Status: 429, Header: hl("current-concurrent-requests", "10", "maximum-concurrent-requests", "10"), Now: testNow})
	if v.Class != ClassConcurrency || v.Hint != ConcurrencyWait || v.CountTarget || v.SkipFor != 0 {
		t.Fatalf("verdict = %+v, want concurrency with the 250 ms wait", v)
	}
	v = Classify(Input{Status: 429, Header: hl("current-concurrent-requests", "3", "maximum-concurrent-requests", "10"), Now: testNow})
	if v.Class != ClassRate {
		t.Fatalf("below the maximum: %+v, want rate", v)
	}
}

func TestClassifySuccessAndNonErrorBodies(t *testing.T) {
	for _, in := range []Input{
		{Status: 200, Body: []byte(`{"choices":[{"message":{"content":"the server is overloaded with rate limit requests"}}]}`)},
		{Status: 204},
		{Status: 304, Body: []byte("not json")},
	} {
		if v := Classify(in); v.Failed() {
			t.Errorf("Classify(%d, %q) = %+v, want success", in.Status, in.Body, v)
		}
	}
	if v := Classify(Input{}); v.Class != ClassTransport {
		t.Errorf("zero input = %+v, want a transport failure", v)
	}
}

func TestClassifyShouldRetryTrueOverridesCallerError(t *testing.T) {
	v := Classify(Input{Status: 400, Header: hl("x-should-retry", "true"), Now: testNow})
	if !v.Retry || v.CallerError {
		t.Fatalf("verdict = %+v, want retry allowed", v)
	}
}
