package envoyapi

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// HeaderMode selects the rate-limit headers the RLS asks Envoy to add to
// responses (response_headers_to_add).
type HeaderMode uint8

const (
	// HeadersOff adds none (the zero value); Envoy's own
	// enable_x_ratelimit_headers still works from the statuses.
	HeadersOff HeaderMode = iota
	// HeadersDraft adds X-RateLimit-Limit, -Remaining and -Reset, or the
	// names WithHeaderNames gives.
	HeadersDraft
	// HeadersIETF adds the IETF RateLimit and RateLimit-Policy fields.
	HeadersIETF
)

// ParseHeaderMode maps "off", "draft" or "ietf" (empty means off).
func ParseHeaderMode(s string) (HeaderMode, error) {
	switch s {
	case "", "off":
		return HeadersOff, nil
	case "draft":
		return HeadersDraft, nil
	case "ietf":
		return HeadersIETF, nil
	}
	return 0, fmt.Errorf("unknown response header mode %q (want off, draft or ietf)", s)
}

type options struct {
	log      *slog.Logger
	meter    metric.Meter
	headers  HeaderMode
	names    [3]string // draft headers' names: limit, remaining, reset
	charging Charging
	metadata bool
	// metricLimits caps the per-limit metric labels (WithMetricLimits).
	metricLimits int
	bounds       RequestBounds
}

// Option configures a server of this package.
type Option func(*options)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeterProvider sets where metrics go; the default is the OTel global.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp.Meter(meterName) }
}

// WithResponseHeaders selects the headers the RLS adds to responses.
func WithResponseHeaders(m HeaderMode) Option { return func(o *options) { o.headers = m } }

// WithHeaderNames names the three headers of HeadersDraft (limit,
// remaining units, seconds until reset), as envoyproxy/ratelimit's
// LIMIT_*_HEADER variables do; empty names keep the defaults
// (x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset).
func WithHeaderNames(limit, remaining, reset string) Option {
	return func(o *options) { o.names = [3]string{limit, remaining, reset} }
}

// WithCharging sets what a request charges when a descriptor is over its
// limit; the default, ChargeAdmitted, charges nothing for a denied
// request. ChargingFor gives envoyproxy/ratelimit's modes.
func WithCharging(c Charging) Option { return func(o *options) { o.charging = c } }

// WithDynamicMetadata makes the RLS return envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA struct (see dynamicMetadata); off by default.
func WithDynamicMetadata(on bool) Option { return func(o *options) { o.metadata = on } }

const meterName = "github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"

func newOptions(opts []Option) options {
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&o)
	}
	for i, def := range draftNames {
		if o.names[i] == "" {
			o.names[i] = def
		}
	}
	if o.meter == nil {
		o.meter = otel.GetMeterProvider().Meter(meterName)
	}
	return o
}
