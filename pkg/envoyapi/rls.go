package envoyapi

import (
	"context"
	"log/slog"
	"math"
	"sync"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// Policies gives the policy snapshot in force; policy.Watcher is one.
type Policies interface {
	Current() *policy.Snapshot
}

// Decider decides a batch of limiter requests; *limiter.Limiter is one.
type Decider interface {
	Decide(reqs []limiter.Request, out []limiter.Result) (bool, error)
}

// RLS serves envoy.service.ratelimit.v3.RateLimitService. It is safe for
// concurrent use; build it with NewRLS.
type RLS struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	policies Policies
	decider  Decider
	headers  HeaderMode
	names    [3]string
	charging Charging
	metadata bool
	bounds   RequestBounds
	log      *slog.Logger
	metrics  *rlsMetrics
	scratch  sync.Pool
}

// NewRLS builds the RLS server over the policies in force and a decider.
func NewRLS(p Policies, d Decider, opts ...Option) *RLS {
	o := newOptions(opts)
	return &RLS{
		policies: p,
		decider:  d,
		headers:  o.headers,
		names:    o.names,
		charging: o.charging,
		metadata: o.metadata,
		bounds:   o.bounds.withDefaults(),
		log:      o.log,
		metrics:  newRLSMetrics(o.meter, o.metricLimits),
		scratch:  sync.Pool{New: func() any { return new(batch) }},
	}
}

// RegisterRLS registers s as envoy.service.ratelimit.v3.RateLimitService.
// Serve it with ServerCodec among the server's options, so a request with
// invalid UTF-8 is answered InvalidArgument rather than gRPC's Internal.
func RegisterRLS(r grpc.ServiceRegistrar, s *RLS) {
	ratelimitv3.RegisterRateLimitServiceServer(r, s)
}

// ShouldRateLimit decides every descriptor of req together. The answer is
// OVER_LIMIT when a descriptor is over its limit (quota-mode descriptors
// only when all of them are); what is charged then depends on the
// Charging mode (WithCharging): by default, nothing.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	if err := s.bounds.validate(req); err != nil {
		return nil, toStatus(err)
	}
	b := s.scratch.Get().(*batch)
	defer s.scratch.Put(b)
	b.reset(len(req.Descriptors), s.charging)
	b.maxOverride = s.bounds.MaxOverridePeriod
	snap := s.policies.Current()
	root := snap.Domain(req.Domain)
	b.usage, b.shadow = isUsageReport(req), snap.ShadowMode()
	for i, d := range req.Descriptors {
		if err := b.plan(i, req, d, root); err != nil {
			return nil, toStatus(err)
		}
	}
	b.applyReplaces()
	b.collect()
	if err := s.decide(b); err != nil {
		return nil, toStatus(err)
	}
	resp := b.respond()
	if s.metadata {
		resp.DynamicMetadata = dynamicMetadata(req, b)
	}
	if s.headers != HeadersOff {
		resp.ResponseHeadersToAdd = rateLimitHeaders(s.headers, &s.names, resp.Statuses)
	}
	label := req.Domain
	if root == nil {
		label = "_unknown" // bounded label set: clients choose domains
	}
	s.record(label, b, resp)
	s.logDenials(ctx, req.Domain, b)
	return resp, nil
}

// logDenials logs the descriptors a limit refused, with the request's
// fields: shadow-mode denials at info (shadow mode exists to be watched),
// enforced ones at debug (metrics count them; a log line per 429 would
// flood). The trace id ties a line to its span when tracing is on.
func (s *RLS) logDenials(ctx context.Context, domain string, b *batch) {
	for i := range b.plans {
		p := &b.plans[i]
		if p.kind != limited || b.results[p.batchIdx].Allowed || p.op == limiter.Refund {
			continue
		}
		shadow := p.shadow || b.shadow
		level := slog.LevelDebug
		if shadow {
			level = slog.LevelInfo
		}
		if !s.log.Enabled(ctx, level) {
			continue
		}
		r := b.results[p.batchIdx]
		attrs := []slog.Attr{
			slog.String("domain", domain), slog.Int("descriptor", i), slog.String("key", string(p.key)),
			slog.Bool("shadow", shadow), slog.Uint64("hits", p.hits), slog.Uint64("limit", r.Limit),
			slog.Duration("retry_after", r.RetryAfter), slog.String("mode", r.Mode.String()),
		}
		if p.limit != nil && p.limit.Name != "" {
			attrs = append(attrs, slog.String("limit_name", p.limit.Name))
		}
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
		s.log.LogAttrs(ctx, level, "over limit", attrs...)
	}
}

// hitsFor returns the units a descriptor spends and what it does with them:
// the request-level hits_addend (0 means 1) unless the descriptor sets its
// own; a descriptor 0 only checks; is_negative_hits refunds.
func hitsFor(req *ratelimitv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) (uint64, limiter.Op) {
	n := uint64(max(req.HitsAddend, 1))
	if h := d.GetHitsAddend(); h != nil {
		n = h.Value
	}
	switch {
	case d.GetIsNegativeHits():
		return n, limiter.Refund
	case n == 0:
		return 0, limiter.Check
	}
	return n, limiter.Charge
}

// remainingField clamps a count into the proto's uint32.
func remainingField(n uint64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}
