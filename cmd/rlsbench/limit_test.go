package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// addN counts n requests of key in second sec with outcome o.
func addN(l *localTally, sec int64, key int, o outcome, n int) {
	for range n {
		l.add(sec, sec, 0, key, o)
	}
}

// wantLimit fails t unless the limit check of a, its workers done and
// its result taken, reports want.
func wantLimit(t *testing.T, a *accuracy, want limitReport) {
	t.Helper()
	if got := a.limit(); got == nil || *got != want {
		t.Errorf("limit\n got %+v\nwant %+v", got, want)
	}
}

func TestLimitPerSecond(t *testing.T) {
	a := newAccuracy(100, 2)
	a.checkLimit(2, 1)
	w0, w1 := a.local(0), a.local(1)

	// Key 1: 3 admitted in second 100 over both workers: over the limit.
	addN(w0, 100, 1, admitted, 2)
	addN(w1, 100, 1, admitted, 1)
	// Key 2: sent 2, one denied after 200 ms (a waiter): denied under
	// the limit.
	w0.add(100, 100, 0, 2, admitted)
	w1.add(100, 100, 200*time.Millisecond, 2, denied)
	// Key 3: sent 3, 2 admitted and 1 denied: right.
	addN(w0, 100, 3, admitted, 2)
	w0.add(100, 100, 0, 3, denied)
	// Key 4: a failed call is no denial.
	w1.add(100, 100, 0, 4, failed)
	// Second 101: key 1 admitted 2 (right), key 2 denied twice of 2 sent.
	addN(w0, 101, 1, admitted, 2)
	addN(w1, 101, 2, denied, 2)
	// Second 102: key 2 admitted 3 of 3, and 1 over again.
	addN(w0, 102, 2, admitted, 3)
	w0.done()
	w1.done()
	a.result()

	want := limitReport{
		Limit: 2, WindowSeconds: 1, Keys: 4, KeyWindows: 7,
		KeysOfferedOverLimit: 3, // keys 1, 3 in second 100; key 2 in 102
		KeysOverLimit:        2, KeyWindowsOverLimit: 2, AdmittedOverLimit: 2,
		KeysDeniedUnderLimit: 1, KeyWindowsDeniedUnderLimit: 2, DeniedUnderLimit: 3,
		// Every answer came in the second it was sent in: all is sure.
		KeysSurelyOver: 2, KeyWindowsSurelyOver: 2, SurelyAdmittedOver: 2,
		KeysSurelyDeniedUnder: 1, KeyWindowsSurelyDeniedUnder: 2, SurelyDeniedUnder: 3,
		SurelyDeniedUnderByLatency: [3]uint64{2, 0, 1},
		SurelyOverKeyIndex:         1, SurelyOverWindow: 100, SurelyOverAdmitted: 3,
		MaxAdmitted: 3, MaxKeyIndex: 1, MaxWindowUnix: 100,
	}
	wantLimit(t, a, want)
}

func TestLimitPerMinute(t *testing.T) {
	a := newAccuracy(118, 1)
	a.checkLimit(3, 60)
	w := a.local(0)

	// Key 1: 2 admitted at 118 and 119 (window 60), 2 at 120 and 2 at
	// 121 (window 120): 4 in the second window, over the limit of 3.
	addN(w, 118, 1, admitted, 1)
	addN(w, 119, 1, admitted, 1)
	// Key 5: sent 4 in window 60, one denied: right, it was sent over 3.
	addN(w, 118, 5, admitted, 2)
	addN(w, 119, 5, admitted, 1)
	w.add(119, 119, 0, 5, denied)
	// Key 6: sent 3 in window 60, all admitted.
	addN(w, 119, 6, admitted, 3)

	addN(w, 120, 1, admitted, 2)
	if _, open := a.check.open[60]; open {
		t.Error("window 60 still open after every worker moved past it")
	}
	addN(w, 121, 1, admitted, 2)
	// Key 6: denied once in window 120, sent 1 there.
	w.add(150, 150, 0, 6, denied)
	w.done()
	a.result()

	want := limitReport{
		Limit: 3, WindowSeconds: 60, Keys: 3, KeyWindows: 5,
		KeysOfferedOverLimit: 2, // key 5 in window 60, key 1 in window 120
		KeysOverLimit:        1, KeyWindowsOverLimit: 1, AdmittedOverLimit: 1,
		KeysDeniedUnderLimit: 1, KeyWindowsDeniedUnderLimit: 1, DeniedUnderLimit: 1,
		KeysSurelyOver: 1, KeyWindowsSurelyOver: 1, SurelyAdmittedOver: 1,
		KeysSurelyDeniedUnder: 1, KeyWindowsSurelyDeniedUnder: 1, SurelyDeniedUnder: 1,
		SurelyDeniedUnderByLatency: [3]uint64{1, 0, 0},
		SurelyOverKeyIndex:         1, SurelyOverWindow: 120, SurelyOverAdmitted: 4,
		MaxAdmitted: 4, MaxKeyIndex: 1, MaxWindowUnix: 120,
	}
	wantLimit(t, a, want)
}

// Answers that come in a later window than their send may have been
// decided in either: by send time they look wrong, surely they are not.
func TestLimitLateAnswers(t *testing.T) {
	a := newAccuracy(100, 1)
	a.checkLimit(2, 1)
	w := a.local(0)

	// Key 1: 2 admitted in second 100, and 1 sent in 100 admitted in 101
	// (decided in 101, say): by send time 3 in 100, surely only 2.
	addN(w, 100, 1, admitted, 2)
	w.add(100, 101, 0, 1, admitted)
	// Key 2: 1 sent in 100 answered in 102, 2 sent in 101 and one of
	// them denied: window 101 may have seen 3, so the denial is not
	// surely wrong. Key 3: 1 sent and denied in 102, and 1 more sent in
	// 101 answered in 102: window 102 saw at most 2, surely wrong.
	w.add(100, 102, 0, 2, admitted)
	addN(w, 101, 2, admitted, 1)
	w.add(101, 101, 0, 2, denied)
	w.add(101, 102, 0, 3, admitted)
	// Key 4: 3 admitted in 101, all answered in it: surely over.
	addN(w, 101, 4, admitted, 3)
	w.add(102, 102, 0, 3, denied)
	w.done()
	a.result()

	want := limitReport{
		Limit: 2, WindowSeconds: 1, Keys: 4, KeyWindows: 6,
		KeysOfferedOverLimit: 2, // key 1 in 100, key 4 in 101
		KeysOverLimit:        2, KeyWindowsOverLimit: 2, AdmittedOverLimit: 2,
		KeysDeniedUnderLimit: 2, KeyWindowsDeniedUnderLimit: 2, DeniedUnderLimit: 2,
		KeysSurelyOver: 1, KeyWindowsSurelyOver: 1, SurelyAdmittedOver: 1,
		KeysSurelyDeniedUnder: 1, KeyWindowsSurelyDeniedUnder: 1, SurelyDeniedUnder: 1,
		SurelyDeniedUnderByLatency: [3]uint64{1, 0, 0},
		SurelyOverKeyIndex:         4, SurelyOverWindow: 101, SurelyOverAdmitted: 3,
		MaxAdmitted: 3, MaxKeyIndex: 1, MaxWindowUnix: 100,
	}
	wantLimit(t, a, want)
	rows := a.result()
	if len(rows) != 3 || rows[2].Keys != 1 || rows[2].Offered != 1 {
		t.Errorf("rows %+v: second 102 should count key 3 alone, sent once there", rows)
	}
}

func TestLimitMaxTies(t *testing.T) {
	a := newAccuracy(10, 1)
	a.checkLimit(5, 1)
	w := a.local(0)
	addN(w, 10, 8, admitted, 2)
	addN(w, 11, 3, admitted, 2)
	addN(w, 11, 1, admitted, 2)
	addN(w, 10, 4, admitted, 2)
	w.done()
	a.result()
	if got := a.limit(); got.MaxAdmitted != 2 || got.MaxKeyIndex != 4 || got.MaxWindowUnix != 10 {
		t.Errorf("max %d for key %d in window %d, want 2 for key 4 in 10 (earliest window, then lowest key)",
			got.MaxAdmitted, got.MaxKeyIndex, got.MaxWindowUnix)
	}
}

func TestNoLimitCheck(t *testing.T) {
	addr, _ := startRLS(t, allowAll)
	rep := benchJSON(t, "-addr", addr, "-n", "10")
	if rep.Accuracy.Limit != nil {
		t.Errorf("limit %+v without -limit, want none", rep.Accuracy.Limit)
	}
}

// denyKey0 refuses every request of api_key=0 and admits the rest.
func denyKey0(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	if descKey(req) == "api_key=0" {
		return answer(req, ratelimitv3.RateLimitResponse_OVER_LIMIT), nil
	}
	return allowAll(req)
}

// The runs below send each of two keys 10 times over two addresses. A
// run may straddle a minute boundary, so each expectation holds however
// the 10 requests of a key split over two windows.
func TestLimitRunDeniedUnder(t *testing.T) {
	addrA, _ := startRLS(t, denyKey0)
	addrB, _ := startRLS(t, denyKey0)
	rep := benchJSON(t, "-addr", addrA+","+addrB, "-n", "20", "-c", "4", "-keys", "2", "-limit", "10", "-per", "minute")
	l := rep.Accuracy.Limit
	if l == nil {
		t.Fatal("no limit report")
	}
	if l.Limit != 10 || l.WindowSeconds != 60 || l.Keys != 2 {
		t.Errorf("limit %d window %d keys %d, want 10, 60, 2", l.Limit, l.WindowSeconds, l.Keys)
	}
	// Key 0 was sent at most 10 in any window and denied every time.
	if l.KeysDeniedUnderLimit != 1 || l.DeniedUnderLimit != 10 || l.KeysOverLimit != 0 || l.KeysOfferedOverLimit != 0 {
		t.Errorf("denied under: %d keys, %d answers; over: %d keys; offered over: %d keys; want 1, 10, 0, 0",
			l.KeysDeniedUnderLimit, l.DeniedUnderLimit, l.KeysOverLimit, l.KeysOfferedOverLimit)
	}
}

func TestLimitRunOver(t *testing.T) {
	addr, _ := startRLS(t, denyKey0)
	out, err := bench(t, t.Context(), "-addr", addr, "-n", "20", "-c", "4", "-keys", "2", "-limit", "4", "-per", "minute", "-json")
	if err != nil {
		t.Fatal(err)
	}
	l := decodeReport(t, out).Accuracy.Limit
	// Key 1, admitted 10 times, has more than 4 in some window.
	if l == nil || l.KeysOverLimit != 1 || l.MaxKey != "api_key=1" || l.MaxAdmitted < 5 || l.AdmittedOverLimit < 1 {
		t.Fatalf("limit %+v, want key api_key=1 over 4", l)
	}

	// The text report says the same.
	out, err = bench(t, t.Context(), "-addr", addr, "-n", "20", "-c", "4", "-keys", "2", "-limit", "4", "-per", "minute")
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		"limit: 4 per key per minute",
		"max admitted for one key in one window: ",
		"(api_key=1, window from unix ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}
	if got := textCount(text, "keys over limit"); got != "1" {
		t.Errorf("text report's keys over limit: %q, want 1:\n%s", got, text)
	}
	if got := textCount(text, "keys with traffic"); got != "2" {
		t.Errorf("text report's keys with traffic: %q, want 2:\n%s", got, text)
	}
}

// textCount returns the first word after label on the text report's
// line that starts with it.
func textCount(text, label string) string {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

func TestLimitJSONSchema(t *testing.T) {
	addr, _ := startRLS(t, allowAll)
	out, err := bench(t, t.Context(), "-addr", addr, "-n", "4", "-limit", "1", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	wantKeys(t, "accuracy.limit", doc["accuracy"].(map[string]any)["limit"], "limit", "window_seconds", "keys",
		"key_windows", "keys_offered_over_limit", "keys_over_limit", "key_windows_over_limit", "admitted_over_limit",
		"keys_denied_under_limit", "key_windows_denied_under_limit", "denied_under_limit",
		"keys_surely_over", "key_windows_surely_over", "surely_admitted_over",
		"keys_surely_denied_under", "key_windows_surely_denied_under", "surely_denied_under", "surely_denied_under_by_latency",
		"surely_over_key_index", "surely_over_window_unix", "surely_over_admitted",
		"max_admitted", "max_key", "max_key_index", "max_window_unix")
}
