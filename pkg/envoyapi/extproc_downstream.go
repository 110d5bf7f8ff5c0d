package envoyapi

import (
	"context"
	"log/slog"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/llmusage"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// downstream is one request seen by the filter before the router: it
// picks the serving hop of the requested target's fallback chain, routes
// the request to it, and holds the hop's concurrency slot until the
// response ends: its last body chunk when Envoy streams the response
// body (as shipped), else the end of the ext_proc stream.
type downstream struct {
	x    *ExtProc
	ctx  context.Context
	snap *policy.Snapshot

	asked   string   // x-resil-target as the client sent it
	spoofed bool     // the client sent x-resil-fallback-from itself
	wait    bodyWait // the decision waits for the buffered body

	root   *policy.Target // the requested target; nil when the request passes untouched
	choice routing.Choice // the serving hop, its slot, rate decision and token reservation
	chunks int            // response body messages so far

	respHeaders headerMap  // the response headers as the upstream sent them
	usage       usageMeter // the response's token usage and the reservation it settles
	failure     transportCheck
}

// requestHeaders reads the routing header. The decision waits for the
// body when Envoy buffers one; otherwise it is made now, on the header.
func (d *downstream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	d.snap = d.x.policies.Current()
	hs := headersOf(h)
	d.asked, _ = hs.get(hdrTarget)
	_, d.spoofed = hs.get(hdrFallbackFrom)
	if d.wait.begin(req, h) {
		return headersResponse(false, nil), nil
	}
	return d.route(nil, false)
}

// requestBody makes the decision on the buffered body; any other body
// message (streamed chunks) passes untouched.
func (d *downstream) requestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return d.wait.body(b, d.route)
}

// route resolves the requested target, walks its chain and answers the
// message that completed the request: a routing mutation, a local reply,
// or nothing for a request that is not ours.
func (d *downstream) route(body []byte, inBody bool) (*extprocv3.ProcessingResponse, error) {
	model, _ := findModel(body)
	root := routing.Requested(d.snap, d.asked, model.value)
	if root == nil {
		d.x.metrics.verdict(d.ctx, roleDownstream, "passthrough")
		return passResponse(inBody), nil
	}
	est := estimate(body, root)
	c, err := d.x.route.Choose(d.ctx, d.snap, root, routing.Scope{Tokens: uint64(est.Tokens), Reserve: true})
	if err != nil {
		return nil, err
	}
	if c.Hop == nil {
		resp, outcome := refuse(root, &c)
		d.x.metrics.verdict(d.ctx, roleDownstream, outcome)
		d.x.log.LogAttrs(d.ctx, slog.LevelDebug, "no eligible hop", slog.String("target", root.Name), slog.String("outcome", outcome))
		return resp, nil
	}
	d.root, d.choice = root, c
	d.usage.hop, d.usage.reserved = c.Hop, c.Reserved
	outcome := "served"
	if c.Hop != root {
		outcome = "fallback"
	}
	d.x.metrics.verdict(d.ctx, roleDownstream, outcome)
	body, injected := injectUsage(body, c.Hop, est)
	if injected {
		model, _ = findModel(body)
	}
	return d.forward(body, model, inBody, injected), nil
}

// estimate is the request's token estimate with root's
// default_max_tokens; zero for a body that is not a JSON request.
func estimate(body []byte, root *policy.Target) llmusage.Estimate {
	if len(body) == 0 {
		return llmusage.Estimate{}
	}
	e, err := llmusage.EstimateRequest(body, int64(root.DefaultMaxTokens))
	if err != nil || e.Tokens < 0 {
		return llmusage.Estimate{}
	}
	return e
}

// injectUsage asks a streamed OpenAI-style request for its usage chunk
// when the serving hop has stream_usage: inject and the request lacks
// it. It reports whether the body changed.
func injectUsage(body []byte, hop *policy.Target, est llmusage.Estimate) ([]byte, bool) {
	if hop.StreamUsage != policy.StreamUsageInject || !est.Stream || est.StreamUsage {
		return body, false
	}
	out, err := llmusage.InjectStreamUsage(body)
	if err != nil || len(out) == len(body) {
		return body, false
	}
	return out, true
}

// forward routes the request to the serving hop: x-resil-target and
// x-resil-cluster (its cluster, for a route whose cluster specifier reads
// it) always, and, for a body naming another model than the hop's or changed
// otherwise (rewritten), the body with only its model replaced and a
// content-length to match.
func (d *downstream) forward(body []byte, model modelField, inBody, rewritten bool) *extprocv3.ProcessingResponse {
	hop := d.choice.Hop
	var m mutation
	m.put(hdrTarget, hop.Name)
	m.put(hdrCluster, hop.Cluster)
	if hop != d.root {
		m.put(hdrFallbackFrom, d.root.Name)
	} else if d.spoofed {
		m.del(hdrFallbackFrom)
	}
	return routeAnswer(&m, body, model, hop.Model, "", inBody, d.asked != hop.Name, rewritten)
}

// passResponse lets the message through unchanged.
func passResponse(inBody bool) *extprocv3.ProcessingResponse {
	if inBody {
		return bodyResponse(false, nil)
	}
	return headersResponse(false, nil)
}

// responseHeaders rewrites the response for the client: the hop's
// x-ratelimit-* headers, a standard retry-after from the upstream's hint,
// x-resil-fallback-from when a fallback served, the expose list, and no
// other internal header. It learns how to read the response's token
// usage: a JSON success asks for the whole body (mode_override), an event
// stream is read chunk by chunk as it passes. A router's local reply for
// a failed connection, reset or timeout counts against the hop. A
// response without a body ends the request: the slot goes back.
func (d *downstream) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	hs := headersOf(h)
	hop := d.choice.Hop
	m := d.x.clientHeaders(hs, hop != nil && d.choice.Rate.Limit > 0, d.choice.Rate, d.fallbackFrom(hs))
	resp := headersResponse(true, common(&m, nil, false))
	st := hs.status()
	if hop != nil {
		d.respHeaders = hs
		d.usage.served = d.servedHop(hs)
		d.usage.start(hs, st, h.GetEndOfStream())
		d.failure.begin(attributeOf(req, attrCodeDetails), hs, st)
		d.recordTransport(d.failure.kind)
	}
	switch {
	case h.GetEndOfStream():
		d.settle(llmusage.Usage{})
		d.choice.Release()
	case d.usage.mode == meterJSON:
		resp.ModeOverride = bufferResponseBody()
	}
	return resp, nil
}

// servedHop is the hop that served the response: the one the upstream
// role names (x-resil-target) when it is a known target, else the hop
// this role chose.
func (d *downstream) servedHop(hs headerMap) *policy.Target {
	if name, ok := hs.get(hdrTarget); ok {
		if t := d.snap.Target(name); t != nil {
			return t
		}
	}
	return d.choice.Hop
}

// fallbackFrom is the requested target when another hop served it: the
// hop this role chose, or the one the upstream role names in the
// response (x-resil-target) when an attempt moved within its cluster.
// Responses to requests that are not ours never carry it.
func (d *downstream) fallbackFrom(hs headerMap) string {
	if d.root == nil {
		return ""
	}
	served, ok := hs.get(hdrTarget)
	if !ok {
		served = d.choice.Hop.Name
	}
	if served == d.root.Name {
		return ""
	}
	return d.root.Name
}

// responseBody answers each chunk of a streamed response at once and
// unchanged. It reads the token usage as the body passes (a whole JSON
// body, or a stream's events across chunk boundaries), feeds a stream's
// error event to the breakers, and settles the token reservation when
// the usage is complete, writing the counts as dynamic metadata. The
// hop's slot is held until the last chunk (end_of_stream), so a long
// generation counts against its cap for as long as it streams.
func (d *downstream) responseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	d.chunks++
	resp := bodyResponse(true, nil)
	eos := b.GetEndOfStream()
	if d.choice.Hop == nil {
		return resp, nil
	}
	if d.chunks == 1 {
		d.recordTransport(d.failure.body(b.GetBody()))
	}
	use, done := d.usage.chunk(b.GetBody(), d.chunks == 1 && eos, eos)
	d.streamError(d.respHeaders)
	if done {
		d.settle(use)
		resp.DynamicMetadata = usageMetadata(use)
	}
	if eos {
		d.settle(llmusage.Usage{})
		d.choice.Release()
	}
	return resp, nil
}

// end settles the reservation with what the response reported, if
// anything (a stream cut before its usage keeps the estimate), and gives
// the hop's slot back however the stream ended (half-close, cancel,
// error), if the response did not end first.
func (d *downstream) end() {
	if d.usage.mode == meterSSE {
		d.settle(d.usage.parser.Usage())
	}
	d.settle(llmusage.Usage{})
	d.choice.Release()
}
