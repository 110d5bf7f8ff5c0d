package retryhint

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/internal/vectors"
)

// TestVectorsHints runs rows 1–48 of the provider-failure vectors: the
// hint each response carries. resilience runs the same rows for the
// verdict and the step.
func TestVectorsHints(t *testing.T) {
	for _, v := range vectors.Hints {
		t.Run("row"+v.ID, func(t *testing.T) {
			got, ok := Parse(v.Header, Body{RetryDelays: v.Delays, Text: v.Text}, vectors.Now)
			if got != v.Wait || ok != v.HasWait {
				t.Fatalf("Parse = %v, %v; want %v, %v", got, ok, v.Wait, v.HasWait)
			}
		})
	}
}

func TestParseForms(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		body Body
		want time.Duration
		ok   bool
	}{
		{"none", nil, Body{}, 0, false},
		{"ms float", vectors.H("retry-after-ms", "1500.5"), Body{}, 1500500 * time.Microsecond, true},
		{"ms negative is zero", vectors.H("retry-after-ms", "-3"), Body{}, 0, true},
		{"ms exponent is malformed", vectors.H("retry-after-ms", "1e3"), Body{}, 0, false},
		{"amz", vectors.H("x-amz-retry-after", "250"), Body{}, 250 * time.Millisecond, true},
		{"sub-ns rounds up", vectors.H("Retry-After", "0.0000000001"), Body{}, time.Nanosecond, true},
		{"overflow ms", vectors.H("retry-after-ms", "123456789012345678901234567890"), Body{}, Max, true},
		{"longer than cap", vectors.H("Retry-After", "100000"), Body{}, Max, true},
		{"rfc850 past", vectors.H("Retry-After", "Friday, 29-Sep-23 16:26:00 GMT"), Body{}, 0, true},
		{"zone other than GMT", vectors.H("Retry-After", "Fri, 29 Sep 2023 16:26:57 +0200"), Body{}, 0, false},
		{"remaining not zero", vectors.H("x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "1s"), Body{}, 0, false},
		{"both dims exhausted takes max", vectors.H("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m30s"), Body{}, 90 * time.Second, true},
		{"bad go duration", vectors.H("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1d"), Body{}, 0, false},
		{"bare reset seconds", vectors.H("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "7"), Body{}, 7 * time.Second, true},
		{"X-RateLimit-Reset ignored when remaining", vectors.H("X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "30"), Body{}, 0, false},
		{"X-RateLimit-Reset date", vectors.H("X-RateLimit-Reset", "Fri, 29 Sep 2023 16:27:07 GMT"), Body{}, 30 * time.Second, true},
		{"X-RateLimit-Reset rfc3339", vectors.H("X-RateLimit-Reset", "2023-09-29T16:27:07Z"), Body{}, 30 * time.Second, true},
		{"X-RateLimit-Reset epoch fraction rounds up", vectors.H("X-RateLimit-Reset", "1696004827.5"), Body{}, 30500 * time.Millisecond, true},
		{"X-RateLimit-Reset far epoch", vectors.H("X-RateLimit-Reset", "99999999999999999999"), Body{}, Max, true},
		{"RateLimit two items", vectors.H("RateLimit", `"a";r=0;t=10, "b";r=0;t=40, "c";r=5;t=90`), Body{}, 40 * time.Second, true},
		{"RateLimit split fields", vectors.H("RateLimit", `"a";r=0;t=10`, "RateLimit", `"b";r=0;t=20`), Body{}, 20 * time.Second, true},
		{"RateLimit r not zero", vectors.H("RateLimit", `"a";r=1;t=10`), Body{}, 0, false},
		{"RateLimit trailing comma", vectors.H("RateLimit", `"a";r=0;t=10,`), Body{}, 0, false},
		{"RateLimit decimal t", vectors.H("RateLimit", `"a";r=0;t=1.5`), Body{}, 0, false},
		{"direct beats window", vectors.H("Retry-After", "1", "RateLimit", `"a";r=0;t=30`), Body{}, time.Second, true},
		{"body text ms", nil, Body{Text: "Please try again in 20ms."}, 20 * time.Millisecond, true},
		{"body text compound", nil, Body{Text: "Please try again in 1m12.5s."}, 72500 * time.Millisecond, true},
		{"body text minutes", nil, Body{Text: "slow down; retry after 2 minutes"}, 2 * time.Minute, true},
		{"window beats body text", vectors.H("X-RateLimit-Reset", "5"), Body{Text: "try again in 50s"}, 5 * time.Second, true},
		{"retryDelay malformed", nil, Body{RetryDelays: []string{"26"}}, 0, false},
		{"retryDelay nanos", nil, Body{RetryDelays: []string{"1.000340012s"}}, 1000340012, true},
		{"retryDelay largest wins", nil, Body{RetryDelays: []string{"2s", "0.5s"}}, 2 * time.Second, true},
		{"retryDelay beats body text", nil, Body{RetryDelays: []string{"3s"}, Text: "try again in 9s"}, 3 * time.Second, true},
		{"pushback", vectors.H("grpc-retry-pushback-ms", "1500"), Body{}, 1500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse(tt.h, tt.body, vectors.Now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Parse = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestForbids(t *testing.T) {
	tests := []struct {
		h    http.Header
		want bool
	}{
		{nil, false},
		{vectors.H("grpc-retry-pushback-ms", "1500"), false},
		{vectors.H("grpc-retry-pushback-ms", "-1"), true},
		{vectors.H("grpc-retry-pushback-ms", "soon"), true},
		{vectors.H("grpc-retry-pushback-ms", "10", "grpc-retry-pushback-ms", "x"), true},
		{vectors.H("retry-after", "-1"), false},
	}
	for _, tt := range tests {
		if got := Forbids(tt.h); got != tt.want {
			t.Errorf("Forbids(%v) = %v, want %v", tt.h, got, tt.want)
		}
	}
}
