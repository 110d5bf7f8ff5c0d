package envoyapi

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// headerBlock holds the header values of one response and the slice of
// pointers to them: one allocation.
type headerBlock struct {
	vals [3]corev3.HeaderValue
	ptrs [3]*corev3.HeaderValue
}

// rateLimitHeaders describes the most constrained limited status (fewest
// units remaining) as response headers. Values go in Value: Envoy's RLS
// client reads h.value(), not raw_value. The values are cut from one
// string built in a stack buffer.
func rateLimitHeaders(mode HeaderMode, names *[3]string, sts []*ratelimitv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var most *ratelimitv3.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.CurrentLimit != nil && (most == nil || st.LimitRemaining < most.LimitRemaining) {
			most = st
		}
	}
	if most == nil {
		return nil
	}
	limit := uint64(most.CurrentLimit.RequestsPerUnit)
	remaining := uint64(most.LimitRemaining)
	reset := most.DurationUntilReset.GetSeconds()
	var buf [128]byte
	b, cut := buf[:0], [3]int{}
	if mode == HeadersDraft {
		b = strconv.AppendUint(b, limit, 10)
		cut[0] = len(b)
		b = strconv.AppendUint(b, remaining, 10)
		cut[1] = len(b)
		b = strconv.AppendInt(b, reset, 10)
		v := string(b)
		return headerValues(names[:], v[:cut[0]], v[cut[0]:cut[1]], v[cut[1]:])
	}
	b = append(appendPolicyName(b, most.CurrentLimit), ";q="...)
	b = strconv.AppendUint(b, limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, int64(windowOf(most.CurrentLimit)/time.Second), 10)
	cut[0] = len(b)
	b = append(appendPolicyName(b, most.CurrentLimit), ";r="...)
	b = strconv.AppendUint(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	v := string(b)
	return headerValues([]string{hdrRateLimitPolicy, hdrRateLimit}, v[:cut[0]], v[cut[0]:])
}

// headerValues pairs keys with values in one headerBlock.
func headerValues(keys []string, vals ...string) []*corev3.HeaderValue {
	hb := new(headerBlock)
	for i, k := range keys {
		hb.vals[i].Key, hb.vals[i].Value = k, vals[i]
		hb.ptrs[i] = &hb.vals[i]
	}
	return hb.ptrs[:len(keys):len(keys)]
}

// windowOf is the length of a status's window.
func windowOf(cl *ratelimitv3.RateLimitResponse_RateLimit) time.Duration {
	m := time.Duration(1)
	if cl.UnitMultiplier != nil && cl.UnitMultiplier.Value > 0 {
		m = time.Duration(cl.UnitMultiplier.Value)
	}
	return policy.UnitPeriod(policy.Unit(cl.Unit)) * m
}

// appendPolicyName appends an RFC 8941 string naming the policy: the
// limit's name, or "default".
func appendPolicyName(b []byte, cl *ratelimitv3.RateLimitResponse_RateLimit) []byte {
	n := cl.Name
	if n == "" {
		n = "default"
	}
	b = append(b, '"')
	for i := 0; i < len(n); i++ {
		if n[i] == '\\' || n[i] == '"' {
			b = append(b, '\\')
		}
		b = append(b, n[i])
	}
	return append(b, '"')
}
