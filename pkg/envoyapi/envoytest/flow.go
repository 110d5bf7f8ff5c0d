package envoytest

import (
	"context"
	"fmt"
	"strconv"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// path is the direction a message travels.
type path struct {
	response bool
	headers  kind // the direction's headers message kind
	body     kind
}

var (
	requestPath  = path{response: false, headers: kindRequestHeaders, body: kindRequestBody}
	responsePath = path{response: true, headers: kindResponseHeaders, body: kindResponseBody}
)

// SendRequest runs the request path: request_headers, then the body:
// whole when buffered (headers held until its answer), in chunks when
// streamed. It returns the request as the router forwards it, or the
// local reply that ended it.
func (s *Stream) SendRequest(req Request) (Request, *LocalReply, error) {
	h, body, local, err := s.run(requestPath, req.Headers, req.Body)
	return Request{Headers: h, Body: body}, local, err
}

// SendResponse runs the response path: response_headers, then the body:
// whole when buffered (configured or by mode_override), in chunks of
// Filter.ChunkSize when streamed. It returns the response as the client
// gets it.
func (s *Stream) SendResponse(resp Response) (Response, *LocalReply, error) {
	h, body, local, err := s.run(responsePath, resp.Headers, resp.Body)
	return Response{Headers: h, Body: body}, local, err
}

// SendResponseHeaders runs the response headers message alone, for a
// response with a body (hasBody) that SendResponseChunk then streams.
// It returns the headers as the client gets them.
func (s *Stream) SendResponseHeaders(h Headers, hasBody bool) (Headers, *LocalReply, error) {
	h, _, local, _, err := s.headers(responsePath, h, hasBody)
	return h, local, err
}

// SendResponseChunk sends one chunk of a streamed response body (last
// marks end_of_stream) and returns it as the client gets it.
func (s *Stream) SendResponseChunk(chunk []byte, last bool) ([]byte, *LocalReply, error) {
	return s.chunk(responsePath, chunk, last)
}

func (s *Stream) run(p path, h Headers, body []byte) (Headers, []byte, *LocalReply, error) {
	hasBody := len(body) > 0
	h, replacement, local, replaced, err := s.headers(p, h.Clone(), hasBody)
	switch {
	case replaced:
		return h, replacement, nil, err
	case err != nil || local != nil || !hasBody:
		return h, body, local, err
	}
	switch s.mode(p) {
	case extprocfilterv3.ProcessingMode_BUFFERED:
		return s.buffered(p, h, body)
	case extprocfilterv3.ProcessingMode_STREAMED:
		body, local, err := s.streamed(p, body)
		return h, body, local, err
	}
	return h, body, nil, nil
}

// headers runs a headers message. replaced reports CONTINUE_AND_REPLACE
// (no body processing follows), with the replacement body; a streamed
// body loses content-length, as Envoy removes it.
func (s *Stream) headers(p path, h Headers, hasBody bool) (Headers, []byte, *LocalReply, bool, error) {
	resp, err := s.exchange(headersMessage(p, h, !hasBody), p.headers)
	if err != nil || resp == nil {
		return h, nil, nil, false, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		local, err := s.immediate(ir)
		return h, nil, local, false, err
	}
	s.modeOverride(resp.GetModeOverride(), true)
	h, body, replaced, err := s.apply(p, false, h, nil, commonOf(resp))
	if err == nil && hasBody && !replaced && s.mode(p) == extprocfilterv3.ProcessingMode_STREAMED {
		h = h.Del("content-length")
	}
	return h, body, nil, replaced, err
}

// buffered sends the whole body in one message, the headers held.
func (s *Stream) buffered(p path, h Headers, body []byte) (Headers, []byte, *LocalReply, error) {
	resp, err := s.exchange(bodyMessage(p, body, true), p.body)
	if err != nil || resp == nil {
		return h, body, nil, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		local, err := s.immediate(ir)
		return h, body, local, err
	}
	if resp.GetModeOverride() != nil {
		s.modeOverride(resp.GetModeOverride(), false)
	}
	h, body, _, err = s.apply(p, true, h, body, commonOf(resp))
	return h, body, nil, err
}

// streamed sends the body in chunks of Filter.ChunkSize (all of it when
// zero) and returns what passes on.
func (s *Stream) streamed(p path, body []byte) ([]byte, *LocalReply, error) {
	size := s.f.ChunkSize
	if size <= 0 {
		size = len(body)
	}
	var out []byte
	for len(body) > 0 {
		n := min(size, len(body))
		got, local, err := s.chunk(p, body[:n], n == len(body))
		if err != nil || local != nil {
			return out, local, err
		}
		out, body = append(out, got...), body[n:]
	}
	return out, nil, nil
}

// chunk sends one streamed body chunk and applies its answer: a body
// mutation replaces the chunk; the headers went on already, so a header
// mutation cannot take effect (ignored and counted, an error in strict
// mode).
func (s *Stream) chunk(p path, chunk []byte, last bool) ([]byte, *LocalReply, error) {
	resp, err := s.exchange(bodyMessage(p, chunk, last), p.body)
	if err != nil || resp == nil {
		return chunk, nil, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		local, err := s.immediate(ir)
		return chunk, local, err
	}
	cr := commonOf(resp)
	if cr.GetHeaderMutation() != nil {
		if err := s.ignored(&s.stats.RejectedMutations, "header mutation in a streamed body response"); err != nil {
			return chunk, nil, err
		}
	}
	switch bm := cr.GetBodyMutation(); {
	case bm.GetStreamedResponse() != nil:
		return chunk, nil, fmt.Errorf("%w: streamed_response outside FULL_DUPLEX_STREAMED", ErrRejected)
	case bm.GetClearBody():
		return nil, nil, nil
	case bm.GetBody() != nil:
		return bm.GetBody(), nil, nil
	}
	return chunk, nil, nil
}

func (s *Stream) mode(p path) extprocfilterv3.ProcessingMode_BodySendMode {
	if p.response {
		return s.respMode
	}
	return s.reqMode
}

// modeOverride applies a mode_override: only from a headers response and
// only when the filter allows it; body modes replace the configured ones.
func (s *Stream) modeOverride(m *extprocfilterv3.ProcessingMode, inHeaders bool) {
	if m == nil {
		return
	}
	if !inHeaders || !s.f.AllowModeOverride {
		return
	}
	s.reqMode, s.respMode = m.GetRequestBodyMode(), m.GetResponseBodyMode()
}

func headersMessage(p path, h Headers, eos bool) *extprocv3.ProcessingRequest {
	hh := &extprocv3.HttpHeaders{Headers: h.Proto(), EndOfStream: eos}
	if p.response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hh}}
}

func bodyMessage(p path, body []byte, eos bool) *extprocv3.ProcessingRequest {
	hb := &extprocv3.HttpBody{Body: body, EndOfStream: eos}
	if p.response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}}
}

func commonOf(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return v.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return v.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return v.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return v.ResponseBody.GetResponse()
	}
	return nil
}

// apply applies a CommonResponse to held headers and body. replaced
// reports CONTINUE_AND_REPLACE, which ends body processing in that
// direction and drops content-length.
func (s *Stream) apply(p path, inBody bool, h Headers, body []byte, cr *extprocv3.CommonResponse) (Headers, []byte, bool, error) {
	if cr == nil {
		return h, body, false, nil
	}
	replace := cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	if replace && inBody {
		return h, body, false, fmt.Errorf("%w: CONTINUE_AND_REPLACE in a body response", ErrRejected)
	}
	h, err := s.applyHeaders(h, cr.GetHeaderMutation(), false)
	if err != nil {
		return h, body, false, err
	}
	if err := s.clearRoute(p, cr); err != nil {
		return h, body, false, err
	}
	bm := cr.GetBodyMutation()
	switch {
	case replace:
		return h.Del("content-length"), bm.GetBody(), true, nil
	case bm == nil:
		return h, body, false, nil
	case !inBody:
		return h, body, false, fmt.Errorf("%w: body_mutation in a headers response without CONTINUE_AND_REPLACE", ErrRejected)
	case bm.GetStreamedResponse() != nil:
		return h, body, false, fmt.Errorf("%w: streamed_response outside FULL_DUPLEX_STREAMED", ErrRejected)
	}
	newBody := bm.GetBody()
	if bm.GetClearBody() {
		newBody = nil
	}
	if cl, ok := h.Get("content-length"); ok && cl != strconv.Itoa(len(newBody)) {
		return h, body, false, fmt.Errorf("%w: mismatch between content length (%s) and the length of the mutated body (%d)",
			ErrRejected, cl, len(newBody))
	}
	return h, newBody, false, nil
}

// clearRoute honours clear_route_cache as Envoy does: only with a header
// mutation in the same response, on the request path, downstream.
func (s *Stream) clearRoute(p path, cr *extprocv3.CommonResponse) error {
	if !cr.GetClearRouteCache() {
		return nil
	}
	if cr.GetHeaderMutation() != nil && !p.response && !s.f.Upstream {
		s.routeCleared = true
		return nil
	}
	return s.ignored(&s.stats.ClearRouteCacheIgnored, "clear_route_cache without effect")
}

// Exchange is one HTTP exchange through one filter.
type Exchange struct {
	// Forwarded is the request the router sends upstream; zero when a
	// local reply answered the request.
	Forwarded Request
	// Response is what the client receives: the processed upstream
	// response, or the local reply.
	Response Response
	// Local is set when the processor answered with a local reply.
	Local        *LocalReply
	RouteCleared bool
	Stats        Stats
	// Metadata is the dynamic metadata the processor set, by namespace.
	Metadata map[string]*structpb.Struct
}

// RoundTrip runs a whole exchange on a new stream: the request path, the
// upstream (called with the forwarded request) unless a local reply ended
// the request, the response path, and the half-close.
func (f *Filter) RoundTrip(ctx context.Context, req Request, upstream func(Request) Response) (Exchange, error) {
	s, err := f.Open(ctx)
	if err != nil {
		return Exchange{}, err
	}
	defer s.Cancel()
	var x Exchange
	fwd, local, err := s.SendRequest(req)
	if err == nil && local == nil {
		x.Forwarded = fwd
		x.Response, local, err = s.SendResponse(upstream(fwd))
	}
	if err == nil {
		err = s.Finish()
	}
	if local != nil {
		x.Local = local
		x.Response = Response{Headers: local.Headers, Body: local.Body}
	}
	x.RouteCleared, x.Stats, x.Metadata = s.RouteCleared(), s.Stats(), s.DynamicMetadata()
	return x, err
}
