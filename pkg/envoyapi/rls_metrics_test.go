package envoyapi_test

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

const metricsPolicy = `
domain: m
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value: "api-*"
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func TestPerLimitMetricsAreBounded(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	r := newPolicyRig(t, metricsPolicy, policy.LoadOptions{},
		envoyapi.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))), envoyapi.WithMetricLimits(5))
	for range 3 {
		r.rawIn("m", desc("plain", "x"))
	}
	r.rawIn("m", hits(desc("detailed", "a"), 2))
	r.rawIn("m", desc("detailed", "b"))
	r.rawIn("m", desc("route", "api-1", "user", "u1"))
	r.rawIn("m", desc("shadow", "s"))
	r.rawIn("m", hits(desc("detailed", "c"), 0)) // a check counts nothing
	r.rawIn("m", desc("detailed", "d"))          // the sixth distinct label
	r.rawIn("m", desc("route", "api-2", "user", "u1"))
	got := counts(t, rd, "ratelimit_limit_hits", "domain", "limit", "outcome")
	want := map[string]int64{
		"/m/m.plain/within_limit": 2, "/m/m.plain/over_limit": 1,
		"/m/m.detailed_a/within_limit": 2, "/m/m.detailed_b/within_limit": 1,
		"/m/m.route_api-1.user/within_limit": 1, "/m/m.shadow/shadow_mode": 1,
		"/m/_overflow/within_limit": 2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("label sets %v, want %v", got, want)
	}
}
