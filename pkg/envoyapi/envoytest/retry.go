package envoytest

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// RetryPolicy is the part of a route's retry policy the emulated router
// follows: retriable_headers (one header, exact value) and
// rate_limited_retry_back_off with one reset header in SECONDS format.
type RetryPolicy struct {
	// NumRetries is the route's num_retries.
	NumRetries int
	// RetriableHeader and RetriableValue: a response carrying the header
	// with this exact value is retried.
	RetriableHeader, RetriableValue string
	// ResetHeader names the rate_limited_retry_back_off reset header,
	// read as integer seconds; a value above MaxInterval is skipped.
	ResetHeader string
	MaxInterval time.Duration
	// Cluster is the route's cluster specifier: the cluster of an attempt,
	// from the request headers as they are when it starts (after the
	// router wrote x-envoy-attempt-count). It picks the first attempt's
	// cluster, and every retry's when RefreshClusterOnRetry is set, as
	// refresh_cluster_on_retry does. Nil: one cluster, "".
	Cluster               func(Headers) string
	RefreshClusterOnRetry bool
}

// Attempt is one upstream attempt of a routed request.
type Attempt struct {
	// Number is x-envoy-attempt-count: 1 for the first attempt.
	Number int
	// Cluster is the cluster the attempt went to (RetryPolicy.Cluster).
	Cluster string
	// Wait is the reset header's interval the router waited before this
	// attempt; Backoff is set when it used its exponential backoff
	// instead (no usable reset header). Both are zero for the first.
	Wait    time.Duration
	Backoff bool
	// Forwarded is the request as the upstream received it, Response the
	// upstream's answer as the upstream filter passed it on.
	Forwarded Request
	Response  Response
}

// Route runs a request through the router's retries, with filter as the
// cluster's upstream ext_proc, once per attempt, on its own stream, as
// Envoy does. Like Envoy's router it keeps one request header map for
// all attempts (a filter's header mutations persist into later
// attempts), writes x-envoy-attempt-count into it before each attempt,
// and sends each attempt a fresh copy of the original body; an attempt
// whose content-length does not match its body fails with ErrRejected
// (the upstream would get a malformed request). upstream
// answers attempt n. Route returns every attempt, the last one's
// response being what the router passes downstream. Waits are reported,
// not slept.
func Route(ctx context.Context, filter *Filter, p RetryPolicy, req Request,
	upstream func(n int, fwd Request) Response) ([]Attempt, error) {
	return RouteClusters(ctx, func(string) *Filter { return filter }, p, req,
		func(n int, _ string, fwd Request) Response { return upstream(n, fwd) })
}

// RouteClusters is Route over several clusters: p.Cluster picks each
// attempt's cluster (re-selected on every retry with
// RefreshClusterOnRetry), filter gives that cluster's upstream ext_proc
// (its xds.cluster_name attribute set), and upstream answers attempt n
// in it.
func RouteClusters(ctx context.Context, filter func(cluster string) *Filter, p RetryPolicy, req Request,
	upstream func(n int, cluster string, fwd Request) Response) ([]Attempt, error) {
	headers := req.Headers.Clone()
	var out []Attempt
	var wait time.Duration
	var backoff bool
	cluster := ""
	for n := 1; ; n++ {
		headers = headers.Set("x-envoy-attempt-count", strconv.Itoa(n))
		if p.Cluster != nil && (n == 1 || p.RefreshClusterOnRetry) {
			cluster = p.Cluster(headers)
		}
		a := Attempt{Number: n, Cluster: cluster, Wait: wait, Backoff: backoff}
		x, err := filter(cluster).RoundTrip(ctx, Request{Headers: headers, Body: append([]byte(nil), req.Body...)},
			func(fwd Request) Response { return upstream(n, cluster, fwd) })
		if err != nil {
			return out, err
		}
		headers = x.Forwarded.Headers
		if cl, ok := headers.Get("content-length"); ok && x.Local == nil && cl != strconv.Itoa(len(x.Forwarded.Body)) {
			return out, fmt.Errorf("%w: attempt %d sends content-length %s with a body of %d bytes",
				ErrRejected, n, cl, len(x.Forwarded.Body))
		}
		a.Forwarded, a.Response = x.Forwarded, x.Response
		out = append(out, a)
		if n > p.NumRetries || x.Response.Headers.Value(p.RetriableHeader) != p.RetriableValue || p.RetriableHeader == "" {
			return out, nil
		}
		wait, backoff = p.resetInterval(x.Response.Headers)
	}
}

// resetInterval reads the reset header as Envoy does: integer seconds,
// at most MaxInterval, more than a millisecond; otherwise the router
// falls back to its exponential backoff.
func (p RetryPolicy) resetInterval(h Headers) (time.Duration, bool) {
	v, ok := h.Get(p.ResetHeader)
	if !ok || p.ResetHeader == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	d := time.Duration(n) * time.Second
	if err != nil || d <= time.Millisecond || (p.MaxInterval > 0 && d > p.MaxInterval) {
		return 0, true
	}
	return d, false
}
