package envoyapi

import (
	"context"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// upstream is one attempt seen by the filter in a cluster's upstream
// chain. It classifies the attempt's response, records it in the
// breakers, and tells Envoy's retry policy what to do through headers:
// x-resil-retry-after (for rate_limited_retry_back_off) and x-resil-retry
// (for retriable_headers). It never answers with a local reply, which
// Envoy would not retry, and never touches x-envoy-* headers.
type upstream struct {
	x       *ExtProc
	ctx     context.Context
	target  *policy.Target
	attempt int // x-envoy-attempt-count; 1 for the first attempt

	headers headerMap // the response headers, kept while the body is awaited
	status  int
	pending bool               // the verdict waits for the error body
	first   resilience.Verdict // the verdict on headers alone
}

// requestHeaders learns the attempt's target (x-resil-target, else the
// target the attempt's cluster serves) and its attempt number.
func (u *upstream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	snap := u.x.policies.Current()
	hs := headersOf(h)
	if name, ok := hs.get(hdrTarget); ok {
		u.target = snap.Target(name)
	}
	if u.target == nil {
		if cluster := attributeOf(req, attrCluster); cluster != "" {
			u.target = snap.TargetByCluster(cluster)
		}
	}
	u.attempt = 1
	if v, ok := hs.get(hdrAttemptCount); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			u.attempt = n
		}
	}
	return headersResponse(false, nil), nil
}

// requestBody passes the attempt's body on untouched.
func (u *upstream) requestBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return bodyResponse(false, nil), nil
}

// responseHeaders judges the attempt on its status and headers. An error
// response with a JSON body asks for that body (mode_override) and is
// judged again on it: Envoy holds the headers until the body response,
// so the retry headers written then still reach the router.
func (u *upstream) responseHeaders(_ *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	u.headers, u.status = headersOf(h), headersOf(h).status()
	var m mutation
	for _, k := range u.headers.internal() {
		m.del(k)
	}
	if u.target == nil {
		u.x.metrics.verdict(u.ctx, roleUpstream, "unknown_target")
		return headersResponse(true, common(&m, nil, false)), nil
	}
	u.first = u.classify(nil)
	step := u.plan(u.first)
	retryHeaders(&m, u.first, step, false)
	resp := headersResponse(true, common(&m, nil, false))
	if u.status >= 400 && !h.GetEndOfStream() && u.headers.isJSON() {
		u.pending = true
		resp.ModeOverride = bufferResponseBody()
		return resp, nil
	}
	u.record(u.first, step)
	return resp, nil
}

// responseBody judges an error response again with its body.
func (u *upstream) responseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	if !u.pending {
		return bodyResponse(true, nil), nil
	}
	u.pending = false
	v := u.classify(b.GetBody())
	step := u.plan(v)
	var m mutation
	retryHeaders(&m, v, step, true)
	u.record(v, step)
	return bodyResponse(true, common(&m, nil, false)), nil
}

// end records the headers' verdict when the body never came (Envoy did
// not honour the mode_override, or the stream was cut).
func (u *upstream) end() {
	if u.pending {
		u.pending = false
		u.record(u.first, u.plan(u.first))
	}
}

func (u *upstream) classify(body []byte) resilience.Verdict {
	return resilience.Classify(resilience.Input{Status: u.status, Header: u.headers, Body: body, Now: u.x.route.Now()})
}

// plan decides retry or not with the target's retry policy: the verdict
// must allow a retry, the attempt count must be within num_retries, and a
// hint must not be longer than the profile waits.
func (u *upstream) plan(v resilience.Verdict) resilience.Step {
	return u.x.route.Plan(u.target, v, u.attempt, false)
}

// record feeds the breakers and the metrics with the attempt's final
// verdict; a hint the profile does not wait for skips the target.
func (u *upstream) record(v resilience.Verdict, step resilience.Step) {
	v.SkipFor = max(v.SkipFor, step.SkipFor)
	u.x.route.Record(u.target, v)
	outcome := "success"
	switch {
	case step.Action == resilience.ActionRetry:
		outcome = "retry"
	case v.Failed():
		outcome = "failure"
	}
	u.x.metrics.upstreamVerdict(u.ctx, outcome, string(v.Class))
}

// retryHeaders writes what Envoy's retry policy reads: the hint of a
// failure as integer seconds (rounded up, at least 1), and the retry
// marker when the plan retries. again is set when the headers were
// already written once (the body's verdict replaces the headers').
func retryHeaders(m *mutation, v resilience.Verdict, step resilience.Step, again bool) {
	if v.Failed() && v.HasHint {
		m.put(hdrRetryAfter, resilience.HeaderSeconds(v.Hint))
	} else if again {
		m.del(hdrRetryAfter)
	}
	if step.Action == resilience.ActionRetry {
		m.put(hdrRetry, "1")
	} else if again {
		m.del(hdrRetry)
	}
}
