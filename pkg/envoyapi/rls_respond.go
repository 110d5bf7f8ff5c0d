package envoyapi

import (
	"math"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The response leaves with gRPC, which marshals it after the handler
// returns, so it cannot be pooled; instead a status and the messages it
// points to are allocated together, and a one-descriptor response (the
// usual call) is a single allocation.

// statusParts is one descriptor's status with the messages it points to.
type statusParts struct {
	status ratelimitv3.RateLimitResponse_DescriptorStatus
	limit  ratelimitv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// singleResponse is a whole one-descriptor response.
type singleResponse struct {
	resp     ratelimitv3.RateLimitResponse
	statuses [1]*ratelimitv3.RateLimitResponse_DescriptorStatus
	parts    statusParts
}

// respond turns the limiter's results into the RLS response.
func (b *batch) respond() *ratelimitv3.RateLimitResponse {
	var resp *ratelimitv3.RateLimitResponse
	if len(b.plans) == 1 {
		one := new(singleResponse)
		b.status(&one.parts, &b.plans[0])
		one.statuses[0] = &one.parts.status
		resp, one.resp.Statuses = &one.resp, one.statuses[:]
	} else {
		parts := make([]statusParts, len(b.plans))
		resp = &ratelimitv3.RateLimitResponse{
			Statuses: make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, len(b.plans)),
		}
		for i := range b.plans {
			b.status(&parts[i], &b.plans[i])
			resp.Statuses[i] = &parts[i].status
		}
	}
	resp.OverallCode = ratelimitv3.RateLimitResponse_OK
	if b.overallOver() {
		resp.OverallCode = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	return resp
}

// status fills sp.status for plan p, pointing into sp for its parts.
func (b *batch) status(sp *statusParts, p *plan) {
	st := &sp.status
	st.Code = ratelimitv3.RateLimitResponse_OK
	switch p.kind {
	case unlimited:
		st.LimitRemaining = math.MaxUint32
		return
	case unmatched, replaced:
		return
	}
	r := &b.results[p.batchIdx]
	if b.over(p) {
		st.Code = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	st.CurrentLimit = currentLimit(sp, p)
	st.LimitRemaining = remainingField(r.Remaining)
	sp.reset.Seconds = wholeSeconds(r.Reset)
	st.DurationUntilReset = &sp.reset
}

// currentLimit describes the limit a status was decided by, in the units
// Envoy turns into x-ratelimit-limit.
func currentLimit(sp *statusParts, p *plan) *ratelimitv3.RateLimitResponse_RateLimit {
	cl := &sp.limit
	mult := uint32(0)
	if o := p.override; o != nil {
		cl.RequestsPerUnit = o.RequestsPerUnit
		cl.Unit = ratelimitv3.RateLimitResponse_RateLimit_Unit(o.Unit)
		mult = o.UnitMultiplier.GetValue()
	} else {
		l := p.limit
		cl.Name = l.Name
		cl.RequestsPerUnit = l.RequestsPerUnit
		cl.Unit = ratelimitv3.RateLimitResponse_RateLimit_Unit(l.Unit)
		mult = l.UnitMultiplier
	}
	if mult > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(mult) // rare: kept out of statusParts
	}
	if p.limit != nil && cl.Name == "" {
		cl.Name = p.limit.Name
	}
	return cl
}
