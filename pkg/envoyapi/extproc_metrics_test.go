package envoyapi_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// counts sums a counter's points by the given attributes' values.
func counts(t *testing.T, rd *sdkmetric.ManualReader, name string, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				k := ""
				for _, key := range keys {
					v, _ := p.Attributes.Value(key)
					k += "/" + v.AsString()
				}
				out[k] += p.Value
			}
		}
	}
	return out
}

func TestExtProcMetrics(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	r := newExtRig(t, envoyapi.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))))
	r.roundTrip(r.downstream(), chatRequest(`{"model":"lone"}`), reply(200))
	r.roundTrip(r.downstream(), chatRequest(`{"model":"nobody"}`), reply(200))
	r.openBreaker("lone")
	r.roundTrip(r.downstream(), chatRequest(`{"model":"lone"}`), r.noUpstream)
	r.attempt(r.upstream("acme"), "primary", 1, upstreamReply(503))
	r.attempt(r.upstream("acme"), "primary", 1, upstreamReply(200))
	got := counts(t, rd, "extproc_verdicts", "role", "outcome", "class")
	want := map[string]int64{
		"/downstream/served/": 1, "/downstream/passthrough/": 1, "/downstream/unavailable/": 1,
		"/upstream/retry/overload": 1, "/upstream/success/": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func TestBreakerTransitions(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	reg := resilience.NewRegistry(resilience.WithStateChange(
		envoyapi.BreakerTransitions(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))))
	target := resilience.Target{Name: "t"}
	for range 5 {
		reg.Record(target, resilience.Verdict{Class: resilience.ClassServer, CountTarget: true})
	}
	got := counts(t, rd, "breaker_transitions", "tier", "name", "from", "to")
	if got["/target/t/closed/open"] != 1 {
		t.Errorf("transitions %v, want one target t closed → open", got)
	}
}
