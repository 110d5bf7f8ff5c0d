package envoyapi

import (
	"context"
	"log/slog"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

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
	choice routing.Choice // the serving hop, its slot and rate decision
	charge bool           // the response body was asked for, to charge its tokens
	chunks int            // response body messages so far
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
	c, err := d.x.route.Choose(d.ctx, d.snap, root, routing.Scope{})
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
	outcome := "served"
	if c.Hop != root {
		outcome = "fallback"
	}
	d.x.metrics.verdict(d.ctx, roleDownstream, outcome)
	return d.forward(body, model, inBody), nil
}

// forward routes the request to the serving hop: x-resil-target always,
// and, for a body naming another model than the hop's, the body with only
// its model replaced and a content-length to match.
func (d *downstream) forward(body []byte, model modelField, inBody bool) *extprocv3.ProcessingResponse {
	hop := d.choice.Hop
	var m mutation
	m.put(hdrTarget, hop.Name)
	if hop != d.root {
		m.put(hdrFallbackFrom, d.root.Name)
	} else if d.spoofed {
		m.del(hdrFallbackFrom)
	}
	return routeAnswer(&m, body, model, hop.Model, "", inBody, d.asked != hop.Name)
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
// other internal header. A JSON success of a target with a token budget
// asks for the body, to charge its usage. A response without a body ends
// the request: the slot goes back.
func (d *downstream) responseHeaders(_ *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	hs := headersOf(h)
	hop := d.choice.Hop
	m := d.x.clientHeaders(hs, hop != nil && d.choice.Rate.Limit > 0, d.choice.Rate, d.fallbackFrom(hs))
	resp := headersResponse(true, common(&m, nil, false))
	st := hs.status()
	switch {
	case h.GetEndOfStream():
		d.choice.Release()
	case d.x.route.ChargesTokens(hop) && st >= 200 && st < 300 && hs.isJSON():
		d.charge = true
		resp.ModeOverride = bufferResponseBody()
	}
	return resp, nil
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
// unchanged, and charges the tokens a JSON response reports to the hop's
// token budget when the body comes whole (buffered, as the mode override
// asks, or in a single chunk). The hop's slot is held until the last chunk
// (end_of_stream), so a long generation counts against its cap for as
// long as it streams.
func (d *downstream) responseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	d.chunks++
	if d.charge && d.chunks == 1 && b.GetEndOfStream() { // the whole body
		if n, ok := totalTokens(b.GetBody()); ok {
			if err := d.x.route.ChargeTokens(d.choice.Hop, n); err != nil {
				d.x.log.LogAttrs(d.ctx, slog.LevelWarn, "token charge failed", slog.Any("error", err))
			}
		}
	}
	if b.GetEndOfStream() {
		d.choice.Release()
	}
	return bodyResponse(true, nil), nil
}

// end gives the hop's slot back however the stream ended (half-close,
// cancel, error), if the response did not end first.
func (d *downstream) end() { d.choice.Release() }
