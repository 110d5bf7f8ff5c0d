package llmusage

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// Streams as providers send them (ids, fingerprints and texts shortened).
const (
	openAIChunk = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l","object":"chat.completion.chunk","created":1741570283,` +
		`"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8",`

	openAIWithUsage = openAIChunk + `"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

` + openAIChunk + `"choices":[{"index":0,"delta":{"content":"Hello! ¿Qué tal? 你好 🙂 \"usage\": {}"},"logprobs":null,"finish_reason":null}],"usage":null}

` + openAIChunk + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

` + openAIChunk + `"choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,` +
		`"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,` +
		`"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

`

	openAINoUsage = openAIChunk + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

` + openAIChunk + `"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}

` + openAIChunk + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: [DONE]

`

	openAIError = openAIChunk + `"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}

data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}

`

	openRouterError = `: OPENROUTER PROCESSING

: OPENROUTER PROCESSING

data: {"id":"gen-1745","object":"chat.completion.chunk","created":1745,"model":"openai/gpt-4o","provider":"OpenAI","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}

data: {"id":"gen-1745","object":"chat.completion.chunk","created":1745,"model":"openai/gpt-4o","provider":"OpenAI","error":{"code":502,"message":"Provider disconnected"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}

`

	anthropicStart = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2048,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello! ¿Qué tal? 你好 🙂"}}

`

	anthropicStream = anthropicStart + `event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" \"usage\":{\"output_tokens\":9}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

`

	anthropicOverloaded = anthropicStart + `event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

`

	responsesStream = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c","object":"response","status":"in_progress","usage":null}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c","output_index":0,"content_index":0,"delta":"Hi"}

event: response.completed
data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_67c","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}}

`

	responsesError = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c","status":"in_progress","usage":null}}

event: error
data: {"type":"error","code":"server_is_overloaded","message":"Our servers are currently overloaded. Please try again later.","param":null,"sequence_number":3}

`
)

// summary is what a stream yields, comparable across splits.
type summary struct {
	Usage Usage
	Done  bool
	Err   *StreamError
	Stats Stats
}

func summarize(p *Parser) summary { return summary{p.Usage(), p.Done(), p.Err(), p.Stats()} }

func parse(pieces ...string) summary {
	var p Parser
	for _, s := range pieces {
		p.Write([]byte(s))
	}
	return summarize(&p)
}

func streamErr(event, typ, code, msg, data string) *StreamError {
	return &StreamError{Event: event, Type: typ, Code: code, Message: msg, Data: []byte(data)}
}

var streamCases = []struct {
	name, in string
	want     summary
}{
	{"OpenAI with include_usage", openAIWithUsage, summary{
		Usage: Usage{Input: 19, Output: 10, Total: 29, Seen: true, Final: true}, Done: true, Stats: Stats{Events: 5}}},
	{"OpenAI without usage", openAINoUsage, summary{Done: true, Stats: Stats{Events: 4}}},
	{"OpenAI cut before usage", openAIWithUsage[:strings.Index(openAIWithUsage, `"choices":[]`)], summary{
		Stats: Stats{Events: 3}}},
	{"OpenAI error", openAIError, summary{Stats: Stats{Events: 2}, Err: streamErr("", "server_error", "",
		"The server had an error while processing your request. Sorry about that!",
		`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`)}},
	{"OpenRouter numeric code after comments", openRouterError, summary{Stats: Stats{Events: 2}, Err: streamErr("", "", "502",
		"Provider disconnected", openRouterError[strings.LastIndex(openRouterError, "data: ")+6:len(openRouterError)-2])}},
	{"Anthropic", anthropicStream, summary{
		Usage: Usage{Input: 472 + 100 + 2048, Output: 15, Total: 472 + 100 + 2048 + 15, CacheCreation: 100, CacheRead: 2048, Seen: true, Final: true},
		Done:  true, Stats: Stats{Events: 9}}},
	{"Anthropic overloaded mid-stream", anthropicOverloaded, summary{
		Usage: Usage{Input: 2620, Output: 2, Total: 2622, CacheCreation: 100, CacheRead: 2048, Seen: true},
		Stats: Stats{Events: 5},
		Err: streamErr("error", "overloaded_error", "", "Overloaded",
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}},
	{"Anthropic cut after message_start", anthropicStart, summary{
		Usage: Usage{Input: 2620, Output: 2, Total: 2622, CacheCreation: 100, CacheRead: 2048, Seen: true},
		Stats: Stats{Events: 4}}},
	{"Responses API", responsesStream, summary{
		Usage: Usage{Input: 36, Output: 87, Total: 123, Seen: true, Final: true}, Done: true, Stats: Stats{Events: 3}}},
	{"Responses API error", responsesError, summary{Stats: Stats{Events: 2}, Err: streamErr("error", "", "server_is_overloaded",
		"Our servers are currently overloaded. Please try again later.",
		responsesError[strings.LastIndex(responsesError, "data: ")+6:len(responsesError)-2])}},
	{"error event not JSON", "event: error\ndata: upstream went away\n\n", summary{Stats: Stats{Events: 1, Malformed: 1},
		Err: streamErr("error", "", "", "upstream went away", "upstream went away")}},
	{"first error kept", "data: {\"error\":{\"type\":\"a\"}}\n\ndata: {\"error\":{\"type\":\"b\"}}\n\n", summary{
		Stats: Stats{Events: 2}, Err: streamErr("", "a", "", "", `{"error":{"type":"a"}}`)}},
	{"malformed usage skipped", "data: {\"usage\":{\"prompt_tokens\":-1}}\n\ndata: {\"usage\":{\"prompt_tokens\":1.5}}\n\n" +
		"data: {\"usage\":{\"prompt_tokens\":3}\n\n", summary{Stats: Stats{Events: 3, Malformed: 3}}},
}

// lineEnds gives s with LF, CRLF and CR line ends.
func lineEnds(s string) map[string]string {
	return map[string]string{"LF": s, "CRLF": strings.ReplaceAll(s, "\n", "\r\n"), "CR": strings.ReplaceAll(s, "\n", "\r")}
}

func TestStreams(t *testing.T) {
	for _, c := range streamCases {
		for ends, in := range lineEnds(c.in) {
			if got := parse(in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s (%s):\n got %+v %+v\nwant %+v %+v", c.name, ends, got, got.Err, c.want, c.want.Err)
			}
		}
	}
}

// TestStreamsEverySplit feeds every stream cut in two at every byte, one
// byte at a time, and in random pieces: each must give the same result.
func TestStreamsEverySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range streamCases {
		for ends, in := range lineEnds(c.in) {
			for i := range len(in) + 1 {
				if got := parse(in[:i], in[i:]); !reflect.DeepEqual(got, c.want) {
					t.Fatalf("%s (%s) cut at %d: got %+v", c.name, ends, i, got)
				}
			}
			if got := parse(strings.Split(in, "")...); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s (%s) bytewise: got %+v", c.name, ends, got)
			}
			for range 50 {
				if got := parse(randomSplit(rng, in)...); !reflect.DeepEqual(got, c.want) {
					t.Fatalf("%s (%s) random split: got %+v", c.name, ends, got)
				}
			}
		}
	}
}

// TestStreamOversizedContentKeepsUsage: a content chunk above the cap is
// skipped, and the usage after it still counts.
func TestStreamOversizedContentKeepsUsage(t *testing.T) {
	big := openAIChunk + `"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("word ", 400) + `"}}],"usage":null}

`
	in := big + openAIWithUsage
	p := Parser{MaxEvent: 1024}
	for _, s := range randomSplit(rand.New(rand.NewPCG(5, 6)), in) {
		p.Write([]byte(s))
	}
	if u := p.Usage(); u.Total != 29 || !p.Done() || p.Stats().Oversized != 1 || p.buffered() > 1024 {
		t.Errorf("usage %+v done %v stats %+v buffered %d", u, p.Done(), p.Stats(), p.buffered())
	}
}

func TestStreamErrorText(t *testing.T) {
	for _, c := range []struct {
		e    StreamError
		want string
	}{
		{StreamError{Type: "overloaded_error", Message: "Overloaded"}, "stream error overloaded_error: Overloaded"},
		{StreamError{Code: "502", Message: "Provider disconnected"}, "stream error (code 502): Provider disconnected"},
		{StreamError{}, "stream error"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}
