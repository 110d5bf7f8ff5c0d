package envoyapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

const tokenPolicy = `
targets:
  gpt:
    provider: openai
    cluster: openai
    model: gpt-4o
    context_window: 128000
    token_limits: {tokens_per_minute: 1000}
  claude:
    provider: anthropic
    cluster: anthropic
    model: claude-sonnet
    token_limits: {tokens_per_minute: 1000}
  mini:
    provider: openai
    cluster: openai
    model: gpt-4o-mini
    stream_usage: inject
    default_max_tokens: 300
    token_limits: {tokens_per_minute: 1000}
  short:
    cluster: openai
    context_window: 100
    fallback_models: [long]
  long:
    cluster: anthropic
    context_window: 200000
`

// streamRequest asks for a streamed answer of at most 300 tokens: the
// estimate is 301 (a 4-byte prompt is one token).
func streamRequest(model string) envoytest.Request {
	return chatRequest(`{"model":"` + model + `","stream":true,"max_tokens":300,"messages":[{"role":"user","content":"hiya"}]}`)
}

// openAIStream is a streamed chat completion whose final chunk reports
// 100 + 300 tokens.
func openAIStream() string {
	return "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":300,\"total_tokens\":400}}\n\n" +
		"data: [DONE]\n\n"
}

// anthropicStream is a streamed message: message_start knows the input
// (100), the last message_delta the output (300).
func anthropicStream() string {
	return "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\r\n\r\n" +
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\r\n\r\n" +
		"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":300}}\r\n\r\n" +
		"event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n"
}

func sse(body string) func(envoytest.Request) envoytest.Response {
	return func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "text/event-stream"), Body: []byte(body)}
	}
}

// tokensLeft reads what a target's token budget has left, taking nothing.
func (r *extRig) tokensLeft(name string) uint64 {
	r.t.Helper()
	tg := r.snap.Target(name)
	out := make([]limiter.Result, 1)
	if _, err := r.lim.Decide([]limiter.Request{{Key: routing.TokenKey(tg), Rule: tg.TokenLimit, Op: limiter.Check}}, out); err != nil {
		r.t.Fatal(err)
	}
	return out[0].Remaining
}

// wantUsageMetadata checks the counts written for the rate limit
// filter's apply_on_stream_done descriptor.
func wantUsageMetadata(t *testing.T, x envoytest.Exchange, in, out, total float64) {
	t.Helper()
	md := x.Metadata["envoy.filters.http.ext_proc"].GetFields()
	if md["input_tokens"].GetNumberValue() != in || md["output_tokens"].GetNumberValue() != out ||
		md["total_tokens"].GetNumberValue() != total {
		t.Errorf("metadata %v, want %v + %v = %v", md, in, out, total)
	}
	if x.Stats.DroppedMetadata != 0 {
		t.Errorf("%d metadata namespaces dropped", x.Stats.DroppedMetadata)
	}
}

// TestTokenBudgetStreamed: a budget of 1 000 tokens per minute, streamed
// answers of 400 tokens each (chunks split mid-event): two are served,
// the third is refused before it reaches the provider, in both
// providers' shapes.
func TestTokenBudgetStreamed(t *testing.T) {
	for _, c := range []struct{ target, stream string }{{"gpt", openAIStream()}, {"claude", anthropicStream()}} {
		t.Run(c.target, func(t *testing.T) {
			r := newExtRigWith(t, tokenPolicy)
			f := r.downstream()
			f.ChunkSize = 7
			for i := range 2 {
				x := r.roundTrip(f, streamRequest(c.target), sse(c.stream))
				if x.Local != nil || string(x.Response.Body) != c.stream {
					t.Fatalf("request %d: local %v, body changed: %q", i+1, x.Local, x.Response.Body)
				}
				wantUsageMetadata(t, x, 100, 300, 400)
				if left, want := r.tokensLeft(c.target), uint64(1000-400*(i+1)); left != want {
					t.Errorf("request %d: %d tokens left, want %d", i+1, left, want)
				}
			}
			x := r.roundTrip(f, streamRequest(c.target), r.noUpstream)
			if x.Local == nil || x.Local.Status != 429 || !strings.Contains(string(x.Local.Body), `"type":"tokens"`) {
				t.Fatalf("third request: local %+v, want a 429 for tokens", x.Local)
			}
			if left := r.tokensLeft(c.target); left != 200 {
				t.Errorf("the refusal took tokens: %d left, want 200", left)
			}
		})
	}
}

// TestTokenBudgetWholeJSON: a non-streamed answer is read whole; a
// smaller usage than the estimate is refunded.
func TestTokenBudgetWholeJSON(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	body := `{"id":"x","usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}`
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"gpt","max_tokens":300,"messages":[]}`),
		func(envoytest.Request) envoytest.Response {
			return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"), Body: []byte(body)}
		})
	if string(x.Response.Body) != body {
		t.Fatalf("body %q", x.Response.Body)
	}
	wantUsageMetadata(t, x, 20, 30, 50)
	if left := r.tokensLeft("gpt"); left != 950 {
		t.Errorf("%d tokens left, want 950", left)
	}
	x = r.roundTrip(r.downstream(), chatRequest(`{"model":"gpt","max_tokens":300,"messages":[]}`), reply(429, "retry-after", "3"))
	if left := r.tokensLeft("gpt"); left != 950 {
		t.Errorf("an error answer kept its estimate: %d tokens left, want 950", left)
	}
}

// TestTokenBudgetCutStream: a stream cut before its usage keeps the
// estimate charged.
func TestTokenBudgetCutStream(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	s, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, local, err := s.SendRequest(streamRequest("gpt")); err != nil || local != nil {
		t.Fatalf("request: %v %v", local, err)
	}
	if left := r.tokensLeft("gpt"); left != 699 {
		t.Fatalf("%d tokens left after the reservation, want 699", left)
	}
	if _, _, err := s.SendResponseHeaders(envoytest.H(":status", "200", "content-type", "text/event-stream"), true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SendResponseChunk([]byte(openAIStream()[:60]), false); err != nil {
		t.Fatal(err)
	}
	r.drainEnded()
	s.Cancel()
	r.waitEnded(1)
	if left := r.tokensLeft("gpt"); left != 699 {
		t.Errorf("%d tokens left after the cut, want 699 (the estimate kept)", left)
	}
}

// TestDefaultMaxTokens: a request without an output cap reserves its
// prompt and the target's default_max_tokens.
func TestDefaultMaxTokens(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	s, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel()
	if _, local, err := s.SendRequest(chatRequest(`{"model":"mini","messages":[{"role":"user","content":"hiya"}]}`)); err != nil || local != nil {
		t.Fatalf("request: %v %v", local, err)
	}
	if left := r.tokensLeft("mini"); left != 1000-301 {
		t.Errorf("%d tokens left, want 699 (1 prompt token + 300 by default)", left)
	}
}

// TestStreamUsageInject: a target with stream_usage: inject asks a
// streamed request for its usage chunk, content-length to match; a
// request that asks already is left as sent.
func TestStreamUsageInject(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	in := `{"model":"mini","stream":true,"messages":[{"role":"user","content":"hiya"}]}`
	x := r.roundTrip(r.downstream(), chatRequest(in), sse(openAIStream()))
	want := strings.TrimSuffix(in, "}") + `,"stream_options":{"include_usage":true}}`
	want = strings.Replace(want, `"mini"`, `"gpt-4o-mini"`, 1)
	if got := string(x.Forwarded.Body); got != want {
		t.Fatalf("forwarded %s, want %s", got, want)
	}
	wantHeader(t, x.Forwarded.Headers, "content-length", fmt.Sprint(len(want)))
	if left := r.tokensLeft("mini"); left != 600 {
		t.Errorf("%d tokens left, want 600", left)
	}
	asked := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}`
	x = r.roundTrip(r.downstream(), chatRequest(asked), sse(openAIStream()))
	if string(x.Forwarded.Body) != asked {
		t.Errorf("forwarded %s, want it unchanged", x.Forwarded.Body)
	}
}

// TestContextWindowSkip: a request larger than a hop's context window
// goes to a fallback whose window takes it.
func TestContextWindowSkip(t *testing.T) {
	r := newExtRigWith(t, tokenPolicy)
	prompt := strings.Repeat("word ", 200) // 1 000 bytes: 250 tokens
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"short","messages":[{"role":"user","content":"`+prompt+`"}]}`), reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "long")
	wantHeader(t, x.Response.Headers, "x-resil-fallback-from", "short")
}
