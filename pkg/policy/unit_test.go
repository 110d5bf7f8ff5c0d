package policy

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

func TestUnits(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name  string
		unit  Unit
		proto int32
		per   time.Duration
	}{
		{"second", Second, 1, time.Second},
		{"MINUTE", Minute, 2, time.Minute},
		{"Hour", Hour, 3, time.Hour},
		{"day", Day, 4, day},
		{"month", Month, 5, 30 * day},
		{"year", Year, 6, 365 * day},
		{"WEEK", Week, 7, 7 * day},
	}
	for _, tc := range tests {
		u, err := ParseUnit(tc.name)
		if err != nil || u != tc.unit || int32(u) != tc.proto || UnitPeriod(u) != tc.per {
			t.Errorf("ParseUnit(%q) = %v, %v; period %v", tc.name, u, err, UnitPeriod(u))
		}
	}
	for _, bad := range []string{"", "unknown", "seconds", "fortnight"} {
		if _, err := ParseUnit(bad); err == nil {
			t.Errorf("ParseUnit(%q) accepted", bad)
		}
	}
	if UnitPeriod(UnitUnknown) != 0 || UnitPeriod(Unit(99)) != 0 {
		t.Error("unknown units must have no period")
	}
}

func TestRuleFromOverride(t *testing.T) {
	r, err := RuleFromOverride(10, Minute, 0, nil)
	if err != nil || r.Algorithm != limiter.FixedWindow || r.Windows[0] != (limiter.Window{Limit: 10, Period: time.Minute}) {
		t.Fatalf("no base: %+v, %v", r, err)
	}
	base := mustCompile(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 50, always_charge: true, sync_interval: 20ms}
`).Match("d", e("k", "v"))
	r, err = RuleFromOverride(100, Hour, 2, base)
	if err != nil || r.Algorithm != limiter.TokenBucket || !r.AlwaysCharge || r.Tuning.SyncInterval != 20*time.Millisecond ||
		r.Windows[0] != (limiter.Window{Limit: 100, Period: 2 * time.Hour}) {
		t.Fatalf("with base: %+v, %v", r, err)
	}
	if r.Fingerprint() == base.Fingerprint {
		t.Error("an override must not share the base's counters")
	}
	if r, err := RuleFromOverride(0, Second, 1, base); err != nil || r.Algorithm != limiter.FixedWindow {
		t.Errorf("zero override: %+v, %v", r, err)
	}
	if _, err := RuleFromOverride(1, UnitUnknown, 1, nil); err == nil {
		t.Error("unknown unit accepted")
	}
	if _, err := RuleFromOverride(1, Year, 1000, nil); err == nil {
		t.Error("huge multiplier accepted")
	}
	unl := mustCompile(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true}}]").Match("d", e("k", "v"))
	if r, err := RuleFromOverride(3, Second, 1, unl); err != nil || r.Algorithm != limiter.FixedWindow {
		t.Errorf("unlimited base: %+v, %v", r, err)
	}
}

func TestProblemString(t *testing.T) {
	p := Problem{File: "a.yaml", Path: "descriptors[2].rate_limit.unit", Message: "bad", Severity: Error}
	if p.String() != "a.yaml:descriptors[2].rate_limit.unit: bad" {
		t.Error(p.String())
	}
	p.Path = ""
	if p.String() != "a.yaml: bad" || Warning.String() != "warning" || Error.String() != "error" {
		t.Error(p.String())
	}
	if !HasErrors([]Problem{{Severity: Warning}, p}) || HasErrors([]Problem{{Severity: Warning}}) {
		t.Error("HasErrors")
	}
}
