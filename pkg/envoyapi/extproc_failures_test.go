package envoyapi_test

import (
	"fmt"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// TestStreamErrorFeedsBreakers: an error event in a 200 event stream
// (Anthropic's event: error, OpenAI's data object with an error) passes
// to the client unchanged and counts against the serving target, as its
// class says: five open its breaker.
func TestStreamErrorFeedsBreakers(t *testing.T) {
	streams := map[string]string{
		"claude": "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		"gpt": "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
			"data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
	}
	for target, stream := range streams {
		t.Run(target, func(t *testing.T) {
			r := newExtRigWith(t, tokenPolicy)
			f := r.downstream()
			f.ChunkSize = 11
			for i := range 5 {
				if !r.reg.Status(r.breakerTarget(target)).Allowed {
					t.Fatalf("breaker open after %d streams", i)
				}
				x := r.roundTrip(f, chatRequest(`{"model":"`+target+`","stream":true,"max_tokens":1,"messages":[]}`), sse(stream))
				if string(x.Response.Body) != stream {
					t.Fatalf("stream changed: %q", x.Response.Body)
				}
			}
			if r.reg.Status(r.breakerTarget(target)).Allowed {
				t.Error("five error events did not open the breaker")
			}
		})
	}
}

// TestStreamWithoutErrorKeepsBreakerClosed: the same number of healthy
// streams counts nothing.
func TestStreamWithoutErrorKeepsBreakerClosed(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	for range 6 {
		r.roundTrip(r.downstream(), chatRequest(`{"model":"short","stream":true,"messages":[]}`), sse(openAIStream()))
	}
	if !r.reg.Status(r.breakerTarget("short")).Allowed {
		t.Error("healthy streams opened the breaker")
	}
}

// TestTransportFailureFeedsBreakers: the router's own reply for an
// upstream that never answered (connect failure, reset, timeout), told by
// its response code details or, without them, by its text, counts against
// the target; an upstream's 503 that the upstream role judged already
// (x-resil-target) is not counted twice.
func TestTransportFailureFeedsBreakers(t *testing.T) {
	text := func(status, body string) func(envoytest.Request) envoytest.Response {
		return func(envoytest.Request) envoytest.Response {
			return envoytest.Response{Headers: envoytest.H(":status", status, "content-type", "text/plain"), Body: []byte(body)}
		}
	}
	cases := []struct {
		name    string
		details string
		up      func(envoytest.Request) envoytest.Response
		opens   bool
	}{
		{"connect failure text", "", text("503", "upstream connect error or disconnect/reset before headers. reset reason: connection failure"), true},
		{"reset text", "", text("503", "upstream connect error or disconnect/reset before headers. reset reason: connection termination"), true},
		{"timeout text", "", text("504", "upstream request timeout"), true},
		{"per-try timeout details", "upstream_per_try_timeout", text("504", "upstream request timeout"), true},
		{"reset details", "upstream_reset_before_response_started{remote_reset}", text("503", "x"), true},
		{"judged upstream", "via_upstream", reply(503, "x-resil-target", "short"), false},
		{"another 503", "", text("503", "no healthy upstream here"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newExtRigWith(t, tokenPolicy)
			f := r.downstream()
			if c.details != "" {
				f.ResponseAttributes = map[string]string{"response.code_details": c.details}
			}
			for range 5 {
				r.roundTrip(f, chatRequest(`{"model":"short","messages":[]}`), c.up)
			}
			if open := !r.reg.Status(r.breakerTarget("short")).Allowed; open != c.opens {
				t.Errorf("breaker open %v, want %v", open, c.opens)
			}
		})
	}
}

// TestLostAttemptFeedsBreakers: an attempt whose upstream stream ends
// without a response (a failed connection, a reset, a per-try timeout)
// counts against its target once the router retries the request; the
// same end without a retry (a client that went away) counts nothing.
func TestLostAttemptFeedsBreakers(t *testing.T) {
	for _, retried := range []bool{true, false} {
		r := newExtRigWith(t, llmPolicy)
		for i := range 5 {
			id := fmt.Sprintf("req-%v-%d", retried, i)
			req := chatRequest(`{"model":"gpt-4o","messages":[]}`, "x-resil-target", "gpt-4o", "x-request-id", id,
				"x-envoy-attempt-count", "1")
			s, err := r.upstreamIn("openai").Open(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.SendRequest(req); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(); err != nil { // no response: Envoy tore the attempt down
				t.Fatal(err)
			}
			if retried {
				req.Headers = req.Headers.Set("x-envoy-attempt-count", "2")
				r.roundTrip(r.upstreamIn("openai"), req, reply(200))
			}
		}
		if open := !r.reg.Status(r.breakerTarget("gpt-4o")).Allowed; open != retried {
			t.Errorf("retried %v: breaker open %v", retried, open)
		}
	}
}
