package envoyapi

import (
	"context"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// upstream is one attempt seen by the filter in a cluster's upstream
// chain. On the request it routes a retry within the cluster: the
// requested target's chain is walked again, and the attempt moves to
// the first hop of the cluster that can serve (its model written into
// the body). On the response it classifies the outcome, records it in
// the breakers, and tells Envoy's retry policy what to do through
// headers: x-resil-retry-after (for rate_limited_retry_back_off) and
// x-resil-retry (for retriable_headers). It never answers with a local
// reply, which Envoy would not retry, and never touches x-envoy-*
// headers.
//
// Request header mutations persist from one attempt to the next, so the
// attempt learns what earlier ones did: x-resil-target is the hop the
// request is routed to, x-resil-first-attempt the attempt at which that
// hop began serving it (1 when absent), which counts the hop's own
// retries against its num_retries.
//
// When Envoy re-selects the cluster of every retry (the filter's gRPC
// initial metadata x-resil-reselect: true, for a route with
// refresh_cluster_on_retry and a cluster specifier reading
// x-resil-cluster), each attempt also writes x-resil-cluster for the next
// one, and a fail-over may move to a hop of another cluster.
type upstream struct {
	x        *ExtProc
	ctx      context.Context
	reselect bool // Envoy re-selects each retry's cluster from x-resil-cluster
	snap     *policy.Snapshot
	cluster  string // xds.cluster_name
	attempt  int    // x-envoy-attempt-count; 1 for the first attempt
	first    int    // the attempt at which target began serving the request

	requestID    string         // x-request-id
	routed       bool           // the request went on to the upstream
	held         string         // x-resil-target as the attempt arrived
	contentLen   string         // content-length as the attempt arrived
	fallbackFrom string         // x-resil-fallback-from as the attempt arrived
	wait         bodyWait       // routing waits for the buffered body
	root         *policy.Target // the requested target; nil when unknown
	target       *policy.Target // the attempt's target; nil when unknown
	choice       routing.Choice // a hop the attempt moved to, held for the attempt

	headers headerMap // the response headers, kept while the body is awaited
	status  int
	pending bool               // the verdict waits for the error body
	verdict resilience.Verdict // the verdict on headers alone
}

// requestHeaders learns the attempt's number, cluster and routing
// headers; routing waits for the body when Envoy buffers one.
func (u *upstream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	u.snap = u.x.policies.Current()
	hs := headersOf(h)
	u.cluster = attributeOf(req, attrCluster)
	u.attempt = positive(hs, hdrAttemptCount, 1)
	u.first = min(positive(hs, hdrFirstAttempt, 1), u.attempt)
	u.held, _ = hs.get(hdrTarget)
	u.fallbackFrom, _ = hs.get(hdrFallbackFrom)
	u.contentLen, _ = hs.get(hdrContentLen)
	u.requestID, _ = hs.get(hdrRequestID)
	if u.wait.begin(req, h) {
		return headersResponse(false, nil), nil
	}
	return u.route(nil, false)
}

// positive reads a header holding a positive integer, def when absent
// or malformed.
func positive(hs headerMap, name string, def int) int {
	if v, ok := hs.get(name); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// requestBody routes the attempt on its buffered body.
func (u *upstream) requestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return u.wait.body(b, u.route)
}

// route finds the attempt's target. The first attempt of a request the
// downstream role routed goes as routed; any other walks the requested
// target's chain within the attempt's cluster, the routed hop asked
// only its breakers (its slot and rate were taken when it was routed).
// When no hop of the cluster can serve, the attempt goes as it is.
func (u *upstream) route(body []byte, inBody bool) (*extprocv3.ProcessingResponse, error) {
	model, _ := findModel(body)
	requested := u.fallbackFrom
	if requested == "" {
		requested = u.held
	}
	u.root = routing.Requested(u.snap, requested, model.value)
	u.target = u.snap.Target(u.held)
	if u.target == nil && u.cluster != "" {
		u.target = u.snap.TargetByCluster(u.cluster)
	}
	u.routed = true
	u.retried()
	if u.root == nil || u.cluster == "" || (u.attempt == 1 && u.target != nil && u.target.Name == u.held) {
		return u.pass(inBody), nil
	}
	est := estimate(body, u.root) // context windows only: the downstream role reserved the tokens
	c, err := u.x.route.Choose(u.ctx, u.snap, u.root, routing.Scope{Cluster: u.cluster, Held: u.held, Tokens: uint64(est.Tokens)})
	if err != nil {
		return nil, err
	}
	if c.Hop == nil {
		u.x.metrics.upstreamVerdict(u.ctx, "no_eligible_hop", "")
		return u.pass(inBody), nil
	}
	u.choice, u.target = c, c.Hop
	return u.forward(body, model, inBody), nil
}

// forward moves the attempt to its hop when it is not the routed one:
// x-resil-target, x-resil-fallback-from and x-resil-first-attempt. The
// body's model is the hop's on every attempt (each gets the original
// body), and content-length matches the body sent, which an earlier
// attempt's rewrite may have changed. A retry of the routed hop whose
// body names its model changes nothing.
func (u *upstream) forward(body []byte, model modelField, inBody bool) *extprocv3.ProcessingResponse {
	hop := u.target
	var m mutation
	if hop.Name != u.held {
		u.first = u.attempt
		m.put(hdrTarget, hop.Name)
		m.put(hdrFirstAttempt, strconv.Itoa(u.first))
		if hop != u.root {
			m.put(hdrFallbackFrom, u.root.Name)
		} else if u.fallbackFrom != "" {
			m.del(hdrFallbackFrom)
		}
	}
	u.plan(&m)
	return routeAnswer(&m, body, model, hop.Model, u.contentLen, inBody, false, false)
}

// pass lets the attempt go as it is, with only the next attempt's plan.
func (u *upstream) pass(inBody bool) *extprocv3.ProcessingResponse {
	var m mutation
	u.plan(&m)
	if inBody {
		return bodyResponse(false, common(&m, nil, false))
	}
	return headersResponse(false, common(&m, nil, false))
}

// plan writes x-resil-cluster, the cluster Envoy re-selects for the next
// attempt (refresh_cluster_on_retry with a cluster specifier reading the
// header), when the filter is configured for it (x-resil-reselect). The
// plan is made before the outcome is known: see routing.NextCluster.
func (u *upstream) plan(m *mutation) {
	if !u.reselect || u.target == nil {
		return
	}
	m.put(hdrCluster, u.x.route.NextCluster(u.snap, u.root, u.target, u.attempt-u.first))
}

// responseHeaders judges the attempt on its status and headers. An error
// response with a JSON body asks for that body (mode_override) and is
// judged again on it: Envoy holds the headers until the body response,
// so the retry headers written then still reach the router. The
// response names the attempt's target for the downstream role.
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
	m.put(hdrTarget, u.target.Name)
	u.verdict = u.classify(nil)
	next := u.next(u.verdict)
	retryHeaders(&m, u.verdict, next, false)
	resp := headersResponse(true, common(&m, nil, false))
	if u.status >= 400 && !h.GetEndOfStream() && u.headers.isJSON() {
		u.pending = true
		resp.ModeOverride = bufferResponseBody()
		return resp, nil
	}
	u.record(u.verdict, next)
	return resp, nil
}

// responseBody judges an error response again with its body.
func (u *upstream) responseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	if !u.pending {
		return bodyResponse(true, nil), nil
	}
	u.pending = false
	v := u.classify(b.GetBody())
	next := u.next(v)
	var m mutation
	retryHeaders(&m, v, next, true)
	u.record(v, next)
	return bodyResponse(true, common(&m, nil, false)), nil
}

// end records the headers' verdict when the body never came (Envoy did
// not honour the mode_override, or the stream was cut), notes an attempt
// that got no response at all (see lostAttempts), and gives back the
// slot of a hop the attempt moved to.
func (u *upstream) end() {
	u.lost()
	if u.pending {
		u.pending = false
		u.record(u.verdict, u.next(u.verdict))
	}
	u.choice.Release()
}

func (u *upstream) classify(body []byte) resilience.Verdict {
	return resilience.Classify(resilience.Input{Status: u.status, Header: u.headers, Body: body, Now: u.x.route.Now()})
}

// next plans what follows the attempt with the target's retry policy:
// the hop's own retries so far count against its num_retries, and an
// eligible hop of the requested chain (in this cluster, or in any when
// Envoy re-selects the cluster per attempt) is where a fail-over moves
// the next attempt.
func (u *upstream) next(v resilience.Verdict) routing.Next {
	scope := routing.Scope{Cluster: u.cluster}
	if u.reselect {
		scope = routing.Scope{} // Envoy moves the next attempt to the alternative's cluster
	}
	return u.x.route.Next(u.snap, u.root, u.target, v, u.attempt-u.first, scope)
}

// record feeds the breakers and the metrics with the attempt's final
// verdict; a hint the profile does not wait for, or a fail-over, skips
// the target.
func (u *upstream) record(v resilience.Verdict, next routing.Next) {
	v.SkipFor = max(v.SkipFor, next.SkipFor)
	u.x.route.Record(u.target, v)
	outcome := "success"
	switch {
	case next.Alternative != nil:
		outcome = "fallback"
	case next.Retry:
		outcome = "retry"
	case v.Failed():
		outcome = "failure"
	}
	u.x.metrics.upstreamVerdict(u.ctx, outcome, string(v.Class))
}

// retryHeaders writes what Envoy's retry policy reads: the retry marker
// when the plan retries, and the hint of a failure as integer seconds
// (rounded up, at least 1), but for a move to another hop, which goes at
// once. again is set when the headers were already written once (the
// body's verdict replaces the headers').
func retryHeaders(m *mutation, v resilience.Verdict, next routing.Next, again bool) {
	if v.Failed() && v.HasHint && next.Alternative == nil {
		m.put(hdrRetryAfter, retryAfterValue(v.Hint))
	} else if again {
		m.del(hdrRetryAfter)
	}
	if next.Retry {
		m.put(hdrRetry, "1")
	} else if again {
		m.del(hdrRetry)
	}
}
