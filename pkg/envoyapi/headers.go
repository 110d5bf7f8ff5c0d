package envoyapi

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// rateLimitHeaders describes the most constrained limited status (fewest
// units remaining) as response headers. Values go in Value: Envoy's RLS
// client reads h.value(), not raw_value.
func rateLimitHeaders(mode HeaderMode, sts []*ratelimitv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var most *ratelimitv3.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.CurrentLimit != nil && (most == nil || st.LimitRemaining < most.LimitRemaining) {
			most = st
		}
	}
	if most == nil {
		return nil
	}
	limit := strconv.FormatUint(uint64(most.CurrentLimit.RequestsPerUnit), 10)
	remaining := strconv.FormatUint(uint64(most.LimitRemaining), 10)
	reset := strconv.FormatInt(most.DurationUntilReset.GetSeconds(), 10)
	if mode == HeadersDraft {
		return []*corev3.HeaderValue{
			{Key: "x-ratelimit-limit", Value: limit},
			{Key: "x-ratelimit-remaining", Value: remaining},
			{Key: "x-ratelimit-reset", Value: reset},
		}
	}
	name := policyName(most.CurrentLimit)
	w := strconv.FormatInt(int64(windowOf(most.CurrentLimit)/time.Second), 10)
	return []*corev3.HeaderValue{
		{Key: "ratelimit-policy", Value: name + ";q=" + limit + ";w=" + w},
		{Key: "ratelimit", Value: name + ";r=" + remaining + ";t=" + reset},
	}
}

// windowOf is the length of a status's window.
func windowOf(cl *ratelimitv3.RateLimitResponse_RateLimit) time.Duration {
	m := time.Duration(1)
	if cl.UnitMultiplier != nil && cl.UnitMultiplier.Value > 0 {
		m = time.Duration(cl.UnitMultiplier.Value)
	}
	return policy.UnitPeriod(policy.Unit(cl.Unit)) * m
}

// policyName is an RFC 8941 string naming the policy: the limit's name, or
// "default".
func policyName(cl *ratelimitv3.RateLimitResponse_RateLimit) string {
	n := cl.Name
	if n == "" {
		n = "default"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(n) + `"`
}
