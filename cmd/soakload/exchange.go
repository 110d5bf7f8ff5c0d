package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// shape is one request as Envoy's downstream ext_proc filter presents it:
// a POST with a buffered JSON body naming model, answered with a 200
// event stream of chunks response body messages, gap apart.
type shape struct {
	model  string
	chunks int
	gap    time.Duration
}

// outcome is how one exchange ended: kind is "ok" (admitted and streamed
// to the end), "reply <status>" (a local reply) or "error <code|what>".
type outcome struct {
	kind     string
	decision time.Duration // from sending the body to its answer
}

// stream is the client side of one ext_proc stream.
type stream = grpc.BidiStreamingClient[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]

// exchange runs one request on a new stream of c. admitted is called once
// the request is let through and released before the last response chunk
// is sent, so that the span between them lies inside the time the
// processor holds the request's slot.
func exchange(ctx context.Context, c extprocv3.ExternalProcessorClient, sh shape, admitted func() (release func())) outcome {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-resil-role", "downstream")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.Process(ctx)
	if err != nil {
		return failed(err)
	}
	body := []byte(`{"model":"` + sh.model + `","stream":true,"messages":[{"role":"user","content":"soak"}]}`)
	if r, err := send(s, requestHeaders(len(body)), "request_headers"); err != nil || r != "" {
		return result(r, err)
	}
	start := time.Now()
	r, err := send(s, bodyMessage(body, true, false), "request_body")
	out := outcome{decision: time.Since(start)}
	if err != nil || r != "" {
		out.kind = result(r, err).kind
		return out
	}
	release := admitted()
	out.kind = respond(s, sh, release)
	return out
}

// respond plays the upstream's answer: 200 headers, then the chunks, and
// ends the stream as Envoy does after the last response.
func respond(s stream, sh shape, release func()) string {
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	if r, err := send(s, responseHeaders(), "response_headers"); err != nil || r != "" {
		return result(r, err).kind
	}
	for i := range sh.chunks {
		if i > 0 {
			time.Sleep(sh.gap)
		}
		last := i == sh.chunks-1
		if last {
			release()
			released = true
		}
		chunk := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"t" + strconv.Itoa(i) + "\"}}]}\n\n")
		if r, err := send(s, bodyMessage(chunk, last, true), "response_body"); err != nil || r != "" {
			return result(r, err).kind
		}
	}
	if err := s.CloseSend(); err != nil {
		return failed(err).kind
	}
	if m, err := s.Recv(); !errors.Is(err, io.EOF) {
		if err == nil {
			return fmt.Sprintf("error spurious %T", m.GetResponse())
		}
		return failed(err).kind
	}
	return "ok"
}

// send sends m and reads its answer: "" when the request goes on,
// "reply <status>" for a local reply; an answer of the wrong kind is an
// error.
func send(s stream, m *extprocv3.ProcessingRequest, want string) (string, error) {
	if err := s.Send(m); err != nil {
		if errors.Is(err, io.EOF) {
			_, err = s.Recv() // the stream's real status
		}
		return "", err
	}
	resp, err := s.Recv()
	if err != nil {
		return "", err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return "reply " + strconv.Itoa(int(ir.GetStatus().GetCode())), nil
	}
	got := map[bool]string{resp.GetRequestHeaders() != nil: "request_headers", resp.GetRequestBody() != nil: "request_body",
		resp.GetResponseHeaders() != nil: "response_headers", resp.GetResponseBody() != nil: "response_body"}[true]
	if got != want {
		return "", fmt.Errorf("%w: answer %q to %s", errProtocol, got, want)
	}
	return "", nil
}

var errProtocol = errors.New("protocol")

func result(reply string, err error) outcome {
	if err != nil {
		return failed(err)
	}
	return outcome{kind: reply}
}

func failed(err error) outcome {
	if errors.Is(err, errProtocol) {
		return outcome{kind: "error protocol"}
	}
	return outcome{kind: "error " + status.Code(err).String()}
}

func requestHeaders(bodyLen int) *extprocv3.ProcessingRequest {
	h := headerMap(":method", "POST", ":path", "/v1/chat/completions", ":authority", "llm", ":scheme", "http",
		"content-type", "application/json", "content-length", strconv.Itoa(bodyLen))
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
		},
	}
}

func responseHeaders() *extprocv3.ProcessingRequest {
	h := headerMap(":status", "200", "content-type", "text/event-stream")
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: h}}}
}

func bodyMessage(b []byte, eos, response bool) *extprocv3.ProcessingRequest {
	hb := &extprocv3.HttpBody{Body: b, EndOfStream: eos}
	if response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}
