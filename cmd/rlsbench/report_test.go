package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestJSONSchema pins the field names scripts rely on.
func TestJSONSchema(t *testing.T) {
	addr, _ := startRLS(t, func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		if descKey(req) == "api_key=1" {
			return nil, status.Error(codes.Unavailable, "down")
		}
		return allowAll(req)
	})
	out, err := bench(t, t.Context(), "-addr", addr, "-n", "20", "-c", "2", "-keys", "2", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	wantKeys(t, "report", doc, "config", "started", "duration_seconds", "interrupted", "requests",
		"throughput_rps", "ok", "over_limit", "errors", "errors_by_code", "malformed", "latency_us",
		"per_address", "accuracy", "cpu")
	wantKeys(t, "config", doc["config"], "addrs", "conns_per_addr", "domain", "descriptor", "keys", "zipf", "seed", "hits",
		"concurrency", "duration_seconds", "count", "rate", "timeout_seconds")
	wantKeys(t, "latency_us", doc["latency_us"], "count", "min", "mean", "p50", "p90", "p99", "max")
	wantKeys(t, "accuracy", doc["accuracy"], "offered", "admitted", "max_key_admitted_per_second",
		"max_key", "max_key_index", "max_key_unix", "seconds")
	seconds := doc["accuracy"].(map[string]any)["seconds"].([]any)
	if len(seconds) == 0 {
		t.Fatal("accuracy.seconds is empty")
	}
	wantKeys(t, "accuracy.seconds[0]", seconds[0], "unix", "offset", "offered", "admitted", "over_limit", "keys",
		"max_key_admitted", "max_key")
	wantKeys(t, "per_address[0]", doc["per_address"].([]any)[0], "addr", "requests", "ok", "over_limit", "errors")
	wantKeys(t, "cpu[0]", doc["cpu"].([]any)[0], "pid", "label", "cpu_seconds", "cpu_seconds_per_100k_requests")
	if got := doc["errors_by_code"].(map[string]any)["Unavailable"]; got != 10.0 {
		t.Errorf("errors_by_code.Unavailable = %v, want 10", got)
	}
}

func wantKeys(t *testing.T, name string, v any, keys ...string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", name, v)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q", name, k)
		}
	}
	if len(m) != len(keys) {
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		t.Errorf("%s has keys %v, want exactly %v", name, got, keys)
	}
}

func TestTextReport(t *testing.T) {
	addrA, _ := startRLS(t, admitFirstPerKey(1))
	addrB, _ := startRLS(t, func(*ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "slow")
	})
	out, err := bench(t, t.Context(), "-addr", addrA+","+addrB, "-n", "8", "-c", "1", "-keys", "2")
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		"requests  8 in ",
		"ok 2  over_limit 2  errors 4",
		"DeadlineExceeded 4",
		"latency   p50 ",
		addrA, addrB,
		"accuracy: admitted (OK) / offered, per Unix second of send: 2 / 8 in all",
		"max admitted for one key in one second: 1 (api_key=0, unix ",
		"rlsbench (pid ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}
}

func TestTextElidesLongRuns(t *testing.T) {
	rep := &report{ErrorsByCode: map[string]uint64{}}
	for i := range 100 {
		rep.Accuracy.Seconds = append(rep.Accuracy.Seconds, secondRow{Unix: 1000 + int64(i), Offset: int64(i), Offered: 1})
	}
	var b strings.Builder
	if err := writeText(&b, rep); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"+14 ", "70 seconds not shown", "+85 ", "+99 "} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	for _, hidden := range []string{"+15 ", "+84 "} {
		if strings.Contains(text, hidden) {
			t.Errorf("text shows %q, which should be elided:\n%s", hidden, text)
		}
	}
}

func TestFmtDur(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{750 * time.Nanosecond, "750ns"},
		{81500 * time.Nanosecond, "81.5µs"},
		{1420 * time.Microsecond, "1.42ms"},
		{3001 * time.Millisecond, "3.001s"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.give); got != tt.want {
			t.Errorf("fmtDur(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestProgressLine(t *testing.T) {
	prev := progressSnap{elapsed: time.Second, ok: 900, over: 100}
	cur := progressSnap{elapsed: 2 * time.Second, ok: 2500, over: 400, errs: 100}
	want := "rlsbench: 2s  requests 3000  2000 req/s  ok 2500  over_limit 400  errors 100"
	if got := progressLine(cur, prev); got != want {
		t.Errorf("progressLine = %q, want %q", got, want)
	}
}
