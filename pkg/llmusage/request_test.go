package llmusage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestEstimateRequest(t *testing.T) {
	cases := []struct {
		name, body string
		want       Estimate
	}{
		{"OpenAI, default cap", `{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hi."}]}`,
			Estimate{Prompt: 4, Output: 100, Tokens: 104}}, // 9+7 = 16 bytes
		{"rounded up", `{"messages":[{"role":"user","content":"12345"}]}`, Estimate{Prompt: 2, Output: 100, Tokens: 102}},
		{"max_tokens", `{"messages":[{"role":"user","content":"1234"}],"max_tokens":50}`, Estimate{Prompt: 1, Output: 50, Tokens: 51}},
		{"max_completion_tokens, streamed", `{"messages":[],"max_completion_tokens":7,"stream":true}`,
			Estimate{Output: 7, Tokens: 7, Stream: true}},
		{"both caps: the larger", `{"max_tokens":9,"max_completion_tokens":700}`, Estimate{Output: 700, Tokens: 700}},
		{"zero cap is a cap", `{"max_tokens":0}`, Estimate{}},
		{"stream usage asked", `{"stream":true,"stream_options":{"include_usage":true}}`,
			Estimate{Output: 100, Tokens: 100, Stream: true, StreamUsage: true}},
		{"stream false", `{"stream":false,"stream_options":{"include_usage":false}}`, Estimate{Output: 100, Tokens: 100}},
		{"content parts, images not counted",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"12345678"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAAAAAAAAAA"}}]}]}`,
			Estimate{Prompt: 2, Output: 100, Tokens: 102}},
		{"Anthropic system and tool result", `{"model":"claude","max_tokens":1024,"system":[{"type":"text","text":"1234"}],` +
			`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"12345678"}]}]}]}`,
			Estimate{Prompt: 3, Output: 1024, Tokens: 1027}},
		{"Responses API", `{"model":"gpt-4o","instructions":"1234","input":[{"role":"user","content":[{"type":"input_text","text":"1234"}]}],"max_output_tokens":10}`,
			Estimate{Prompt: 2, Output: 10, Tokens: 12}},
		{"legacy prompt", `{"prompt":["1234","5678"]}`, Estimate{Prompt: 2, Output: 100, Tokens: 102}},
		{"keys match exactly", `{"Stream":true,"MAX_TOKENS":5,"stream_options":{"Include_Usage":true},"Messages":[{"content":"1234"}]}`,
			Estimate{Output: 100, Tokens: 100}},
		{"null cap is no cap", `{"max_tokens":null,"stream_options":null}`, Estimate{Output: 100, Tokens: 100}},
		{"last duplicate wins", `{"stream":true,"stream":false,"max_tokens":1,"max_tokens":2}`, Estimate{Output: 2, Tokens: 2}},
		{"escapes count as their text", `{"prompt":"\u00e9\n"}`, Estimate{Prompt: 1, Output: 100, Tokens: 101}},
	}
	for _, c := range cases {
		got, err := EstimateRequest([]byte(c.body), 100)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}

func TestEstimateRequestErrors(t *testing.T) {
	for _, c := range []struct {
		body string
		def  int64
		want string
	}{
		{`nope`, 1, "request body: invalid character"},
		{`[]`, 1, "request body: json: cannot unmarshal array"},
		{`{"max_tokens":-1}`, 1, "max_tokens: -1 is negative"},
		{`{"max_completion_tokens":1.5}`, 1, `max_completion_tokens: want a whole number, got "1.5"`},
		{`{"max_tokens":"10"}`, 1, `max_tokens: want a whole number, got "\"10\""`},
		{`{"stream":true,"stream_options":true}`, 1, "stream_options: want an object"},
		{`{}`, -1, "defaultMaxTokens -1: want ≥ 0"},
	} {
		_, err := EstimateRequest([]byte(c.body), c.def)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
	// A deeply nested prompt is walked to a bound: deeper text is not
	// counted, and the walk does not recurse without end.
	deep := `{"messages":["1234",` + strings.Repeat(`[`, 500) + `"5678"` + strings.Repeat(`]`, 500) + `]}`
	if e, err := EstimateRequest([]byte(deep), 0); err != nil || e.Prompt != 1 {
		t.Errorf("deep prompt: %+v %v", e, err)
	}
}

func TestInjectStreamUsage(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"added after the last member", `{"model":"gpt-4o","stream":true,"messages":[]}`,
			`{"model":"gpt-4o","stream":true,"messages":[],"stream_options":{"include_usage":true}}`},
		{"whitespace kept", "{\n  \"stream\": true ,\n  \"n\": 1\n}\n",
			"{\n  \"stream\": true ,\n  \"n\": 1,\"stream_options\":{\"include_usage\":true}\n}\n"},
		{"into existing options", `{"stream":true,"stream_options":{"continuous_usage_stats":false}}`,
			`{"stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`},
		{"into empty options", `{"stream":true,"stream_options":{ }}`, `{"stream":true,"stream_options":{"include_usage":true }}`},
		{"false set true", `{"stream":true,"stream_options":{"include_usage": false}}`,
			`{"stream":true,"stream_options":{"include_usage": true}}`},
		{"null options replaced", `{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"already set", `{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"not streamed", `{"stream":false}`, `{"stream":false}`},
		{"no stream field", `{"model":"m"}`, `{"model":"m"}`},
		{"escaped key", `{"str\u0065am":true}`, `{"str\u0065am":true,"stream_options":{"include_usage":true}}`},
		{"last duplicate wins", `{"stream":true,"stream":false}`, `{"stream":true,"stream":false}`},
	}
	for _, c := range cases {
		got, err := InjectStreamUsage([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s:\n got %s %v\nwant %s", c.name, got, err, c.want)
			continue
		}
		if c.in != c.want {
			var doc struct {
				StreamOptions struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if err := json.Unmarshal(got, &doc); err != nil || !doc.StreamOptions.IncludeUsage {
				t.Errorf("%s: result %s does not ask for usage: %v", c.name, got, err)
			}
		}
	}
	// Unchanged bodies are the same slice, not a copy.
	in := []byte(`{"stream":false}`)
	if got, _ := InjectStreamUsage(in); &got[0] != &in[0] {
		t.Error("unchanged body copied")
	}
}

func TestInjectStreamUsageKeepsEveryOtherByte(t *testing.T) {
	in := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"h\u00e9 \"quoted\" {}"}],"stream":true,"temperature":0.70}`)
	got, err := InjectStreamUsage(in)
	if err != nil {
		t.Fatal(err)
	}
	added := `,"stream_options":{"include_usage":true}`
	if !bytes.Equal(bytes.Replace(got, []byte(added), nil, 1), in) {
		t.Errorf("other bytes changed:\n%s\n%s", in, got)
	}
}

func TestInjectStreamUsageErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`stream=true`, "request body: not valid JSON"},
		{`[{"stream":true}]`, "request body: not a JSON object"},
		{`{"stream":true} {}`, "request body: not valid JSON"},
		{`{"stream":true,"stream_options":"yes"}`, "request body: stream_options: want an object"},
		{``, "request body: not valid JSON"},
	} {
		got, err := InjectStreamUsage([]byte(c.in))
		if err == nil || err.Error() != c.want || got != nil {
			t.Errorf("%s: %s %v, want %q", c.in, got, err, c.want)
		}
	}
}
