package resilience

import (
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/retryhint"
)

func FuzzClassify(f *testing.F) {
	f.Add(429, uint8(0), "retry-after", "20", `{"error":{"code":"rate_limit_exceeded","message":"try again in 2s"}}`, false)
	f.Add(503, uint8(0), "x-should-retry", "false", `{"error":{"code":503,"status":"UNAVAILABLE"}}`, false)
	f.Add(200, uint8(0), "", "", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}", true)
	f.Add(0, uint8(3), "", "", "", false)
	f.Fuzz(func(t *testing.T, status int, kind uint8, name, value, body string, committed bool) {
		in := Input{Status: status, Transport: TransportKind(kind), Header: hl(name, value), Body: []byte(body), Committed: committed, Now: testNow}
		v := Classify(in)
		switch {
		case v.Hint < 0 || v.Hint > retryhint.Max || v.SkipFor < 0 || v.SkipFor > MaxSkip || (!v.HasHint && v.Hint != 0):
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
