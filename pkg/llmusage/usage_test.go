package llmusage

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseBody(t *testing.T) {
	cases := []struct {
		name, body string
		want       Usage
	}{
		{"OpenAI", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":12}}}`,
			Usage{Input: 19, Output: 10, Total: 29, Seen: true, Final: true}},
		{"OpenAI without total", `{"usage":{"prompt_tokens":19,"completion_tokens":10}}`,
			Usage{Input: 19, Output: 10, Total: 29, Seen: true, Final: true}},
		{"Anthropic", `{"id":"msg_01","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",` +
			`"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2048,"output_tokens":15,"service_tier":"standard"}}`,
			Usage{Input: 2620, Output: 15, Total: 2635, CacheCreation: 100, CacheRead: 2048, Seen: true, Final: true}},
		{"Anthropic without cache", `{"usage":{"input_tokens":10,"output_tokens":5}}`,
			Usage{Input: 10, Output: 5, Total: 15, Seen: true, Final: true}},
		{"prompt_tokens already count the cache", `{"usage":{"prompt_tokens":120,"completion_tokens":5,"total_tokens":125,"cache_read_input_tokens":100}}`,
			Usage{Input: 120, Output: 5, Total: 125, CacheRead: 100, Seen: true, Final: true}},
		{"Responses API", `{"object":"response","usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123}}`,
			Usage{Input: 36, Output: 87, Total: 123, Seen: true, Final: true}},
		{"zero usage is seen", `{"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`, Usage{Seen: true, Final: true}},
		{"whole floats", `{"usage":{"prompt_tokens":1e2,"completion_tokens":5.0}}`, Usage{Input: 100, Output: 5, Total: 105, Seen: true, Final: true}},
		{"no usage", `{"id":"x"}`, Usage{}},
		{"null usage", `{"usage":null}`, Usage{}},
		{"empty usage", `{"usage":{}}`, Usage{}},
		{"null counts", `{"usage":{"prompt_tokens":null}}`, Usage{}},
		{"saturates", `{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":5,"output_tokens":1}}`,
			Usage{Input: math.MaxInt64, Output: 1, Total: math.MaxInt64, CacheRead: 5, Seen: true, Final: true}},
	}
	for _, c := range cases {
		got, err := ParseBody([]byte(c.body), 1<<20)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}

func TestParseBodyErrors(t *testing.T) {
	cases := []struct {
		name, body string
		max        int
		want       string
	}{
		{"too large", `{"usage":{"prompt_tokens":1}}`, 10, "body too large: 29 bytes, limit 10"},
		{"no limit", `{}`, 0, "maxBytes 0: want > 0"},
		{"not JSON", `<html>`, 100, "response body: invalid character"},
		{"not an object", `[1]`, 100, "response body: json: cannot unmarshal array"},
		{"negative", `{"usage":{"completion_tokens":-3}}`, 100, "usage.completion_tokens: -3 is negative"},
		{"fraction", `{"usage":{"output_tokens":2.5}}`, 100, `want a whole number, got "2.5"`},
		{"string count", `{"usage":{"total_tokens":"7"}}`, 100, `want a whole number, got "\"7\""`},
		{"usage not an object", `{"usage":7}`, 100, "response body: json: cannot unmarshal number"},
	}
	for _, c := range cases {
		_, err := ParseBody([]byte(c.body), c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := ParseBody(make([]byte, 11), 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v is not ErrTooLarge", err)
	}
}
