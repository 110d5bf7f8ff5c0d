package envoyapi_test

import (
	"fmt"
	"runtime"
	"strconv"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// fuzzInput hands out fuzz bytes; past the end it gives zeros.
type fuzzInput struct{ b []byte }

func (f *fuzzInput) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// take hands out up to n bytes.
func (f *fuzzInput) take(n int) []byte {
	n = min(n, len(f.b))
	out := f.b[:n:n]
	f.b = f.b[n:]
	return out
}

func (f *fuzzInput) name() string { return fuzzNames[int(f.byte())%len(fuzzNames)] }

var bodyModes = []extprocfilterv3.ProcessingMode_BodySendMode{extprocfilterv3.ProcessingMode_BUFFERED,
	extprocfilterv3.ProcessingMode_STREAMED, extprocfilterv3.ProcessingMode_NONE, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL}

// requestHeaders: flags bit 0 end_of_stream, 1 protocol_config (mode
// in bits 2-3), 4 x-resil-target, 5 x-envoy-attempt-count, 6 the
// cluster attribute, 7 observability mode.
func (d *fuzzDriver) requestHeaders() *extprocv3.ProcessingRequest {
	fl := d.in.byte()
	h := envoytest.H(":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json")
	if fl&0x10 != 0 {
		h = h.Add("x-resil-target", d.in.name())
	}
	if fl&0x20 != 0 {
		h = h.Add("x-envoy-attempt-count", strconv.Itoa(int(d.in.byte()%5)))
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: h.Proto(), EndOfStream: fl&1 != 0}}}
	if fl&0x02 != 0 {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: bodyModes[fl>>2&3]}
	}
	if fl&0x40 != 0 {
		cluster := []string{"acme", "beta", "gamma", "duo", "nowhere"}[d.in.byte()%5]
		req.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
			"xds.cluster_name": structpb.NewStringValue(cluster)}}}
	}
	req.ObservabilityMode = fl&0x80 != 0
	return req
}

// requestBody: flags bit 0 end_of_stream, 1 a chat request naming a
// target (bit 2: streamed) split at the next byte into two messages,
// else raw fuzz bytes; 7 observability mode.
func (d *fuzzDriver) requestBody() {
	fl := d.in.byte()
	obs, eos := fl&0x80 != 0, fl&1 != 0
	if fl&0x02 == 0 {
		d.send(fuzzBody(false, d.in.take(int(d.in.byte())), eos, obs))
		return
	}
	body := fmt.Appendf(nil, `{"model":%q,"stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`,
		d.in.name(), fl&0x04 != 0, d.in.byte())
	k := min(int(d.in.byte()), len(body))
	d.send(fuzzBody(false, body[:k], false, obs))
	if !d.ended {
		d.send(fuzzBody(false, body[k:], eos, obs))
	}
}

// responseHeaders: flags bit 0 end_of_stream, 1-3 the status, 4-5 the
// content-type, 6 a retry-after and an x-resil-target, 7 observability.
func (d *fuzzDriver) responseHeaders() *extprocv3.ProcessingRequest {
	fl := d.in.byte()
	st := []string{"200", "200", "429", "500", "503", "400", "404", "x"}[fl>>1&7]
	h := envoytest.H(":status", st)
	if ct := []string{"application/json", "text/event-stream", "text/plain", ""}[fl>>4&3]; ct != "" {
		h = h.Add("content-type", ct)
	}
	if fl&0x40 != 0 {
		h = h.Add("retry-after", strconv.Itoa(int(d.in.byte()))).Add("x-resil-target", d.in.name())
	}
	return &extprocv3.ProcessingRequest{ObservabilityMode: fl&0x80 != 0,
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: h.Proto(), EndOfStream: fl&1 != 0}}}
}

// The usage reports a response body may carry.
var (
	sseUsage  = []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
	jsonUsage = []byte(`{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	errBody   = []byte(`{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}`)
)

// responseBody: flags bit 0 end_of_stream, 1-2 what: raw fuzz bytes, a
// usage event, a JSON usage or error body, or (bit 3) the big chunk as
// many times as the next byte says; 7 observability mode.
func (d *fuzzDriver) responseBody() {
	fl := d.in.byte()
	obs, eos := fl&0x80 != 0, fl&1 != 0
	if fl&0x08 != 0 {
		n := int(d.in.byte() % 33)
		for i := 0; i < n && !d.ended; i++ {
			d.bigged = true
			d.send(fuzzBody(true, bigChunk, false, obs))
		}
		return
	}
	var body []byte
	switch fl >> 1 & 3 {
	case 0:
		body = d.in.take(int(d.in.byte()))
	case 1:
		body = sseUsage
	case 2:
		body = jsonUsage
	case 3:
		body = errBody
	}
	d.send(fuzzBody(true, body, eos, obs))
}

func fuzzBody(response bool, body []byte, eos, obs bool) *extprocv3.ProcessingRequest {
	b := &extprocv3.HttpBody{Body: body, EndOfStream: eos}
	if response {
		return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: b}}
	}
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: b}}
}

func trailers(response, obs bool) *extprocv3.ProcessingRequest {
	tr := &extprocv3.HttpTrailers{Trailers: envoytest.H("grpc-status", "0").Proto()}
	if response {
		return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: tr}}
	}
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: tr}}
}

// check holds the server to Envoy's rules for the answers to req: none
// in observability mode; else at most one, exactly one while the stream
// goes on, of req's kind or an ImmediateResponse where Envoy takes one.
// After an ImmediateResponse Envoy closes the stream.
func (d *fuzzDriver) check(req *extprocv3.ProcessingRequest, got []*extprocv3.ProcessingResponse) {
	t := d.t
	t.Helper()
	switch {
	case req.GetObservabilityMode() && len(got) > 0:
		t.Fatalf("%d responses to a %T in observability mode", len(got), req.GetRequest())
	case req.GetObservabilityMode():
		return
	case len(got) > 1:
		t.Fatalf("%d responses to one %T: %v", len(got), req.GetRequest(), got)
	case len(got) == 0 && !d.ended:
		t.Fatalf("no response to a %T, and the stream goes on", req.GetRequest())
	case len(got) == 0:
		return
	}
	if !answers(req, got[0]) {
		t.Fatalf("%T answered with %T", req.GetRequest(), got[0].GetResponse())
	}
	if got[0].GetImmediateResponse() != nil && !d.ended {
		d.end(0)
	}
}

// answers reports whether resp is a response Envoy takes for req.
func answers(req *extprocv3.ProcessingRequest, resp *extprocv3.ProcessingResponse) bool {
	immediate := resp.GetImmediateResponse() != nil
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return resp.GetRequestHeaders() != nil || immediate
	case *extprocv3.ProcessingRequest_RequestBody:
		return resp.GetRequestBody() != nil || immediate
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return resp.GetRequestTrailers() != nil || immediate
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return resp.GetResponseHeaders() != nil || immediate
	case *extprocv3.ProcessingRequest_ResponseBody:
		return resp.GetResponseBody() != nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return resp.GetResponseTrailers() != nil
	}
	return false
}

// checkMemory bounds what the live stream holds once it was sent big
// chunks: the heap may not have grown by maxStreamMem since it opened.
func (d *fuzzDriver) checkMemory() {
	if !d.bigged {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > d.base && ms.HeapAlloc-d.base > maxStreamMem {
		d.t.Fatalf("a live stream holds %d bytes after big chunks, want at most %d", ms.HeapAlloc-d.base, maxStreamMem)
	}
}
