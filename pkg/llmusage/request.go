package llmusage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Estimate is what a request may cost, known before it is sent.
type Estimate struct {
	// Prompt is the prompt's text bytes ÷ 4, rounded up: the text of
	// messages (string contents and "text" parts, nested contents such as
	// tool results included), system, instructions, prompt and input.
	// Images, audio and tool definitions are not counted.
	Prompt int64
	// Output is the request's output cap: the largest of
	// max_completion_tokens, max_tokens and max_output_tokens, else the
	// caller's default.
	Output int64
	// Tokens is Prompt + Output.
	Tokens int64
	// Stream reports "stream": true.
	Stream bool
	// StreamUsage reports stream_options.include_usage: true, which asks an
	// OpenAI-style stream for its final usage chunk.
	StreamUsage bool
}

// outputCaps are the request fields that cap the output, in the order
// they are checked.
var outputCaps = [...]string{"max_completion_tokens", "max_tokens", "max_output_tokens"}

// promptFields are the request fields whose text is the prompt.
var promptFields = [...]string{"messages", "system", "instructions", "prompt", "input"}

// EstimateRequest reads a request body (OpenAI chat completions or
// Responses, or Anthropic messages) for a reservation: see Estimate.
// defaultMaxTokens is the output cap of a request that sets none. Keys
// match exactly, as providers read them (encoding/json alone would also
// take "Stream" for "stream"). A body that is not a JSON object, an
// output cap that is not a whole number ≥ 0, or a stream_options that is
// not an object is an error naming the field.
func EstimateRequest(body []byte, defaultMaxTokens int64) (Estimate, error) {
	if defaultMaxTokens < 0 {
		return Estimate{}, fmt.Errorf("defaultMaxTokens %d: want ≥ 0", defaultMaxTokens)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return Estimate{}, fmt.Errorf("request body: %w", err)
	}
	e := Estimate{Output: -1, Stream: isTrue(top["stream"])}
	if so := top["stream_options"]; present(so) {
		var opts map[string]json.RawMessage
		if json.Unmarshal(so, &opts) != nil {
			return Estimate{}, errors.New("request body: stream_options: want an object")
		}
		e.StreamUsage = isTrue(opts["include_usage"])
	}
	for _, name := range outputCaps {
		raw := top[name]
		if !present(raw) {
			continue
		}
		var v int64
		if json.Unmarshal(raw, &v) != nil {
			return Estimate{}, fmt.Errorf("request body: %s: want a whole number, got %s", name, truncate(raw, 32))
		}
		if v < 0 {
			return Estimate{}, fmt.Errorf("request body: %s: %d is negative", name, v)
		}
		e.Output = max(e.Output, v)
	}
	if e.Output < 0 {
		e.Output = defaultMaxTokens
	}
	var n int64
	for _, name := range promptFields {
		var v any
		if raw := top[name]; present(raw) && json.Unmarshal(raw, &v) == nil {
			n += textBytes(v, 0)
		}
	}
	e.Prompt = (n + 3) / 4
	e.Tokens = add(e.Prompt, e.Output)
	return e, nil
}

// maxDepth bounds the walk of nested contents.
const maxDepth = 32

// textBytes counts the text of a prompt value: a string, an array of
// values, or an object's "text" and "content".
func textBytes(v any, depth int) int64 {
	if depth > maxDepth {
		return 0
	}
	switch v := v.(type) {
	case string:
		return int64(len(v))
	case []any:
		var n int64
		for _, e := range v {
			n += textBytes(e, depth+1)
		}
		return n
	case map[string]any:
		return textBytes(v["text"], depth+1) + textBytes(v["content"], depth+1)
	}
	return 0
}

func isTrue(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("true")) }

// InjectStreamUsage returns a streamed OpenAI-style request body with
// "stream_options":{"include_usage":true} added after its last member, or
// include_usage set to true inside an existing stream_options object (or
// one replacing "stream_options":null); every other byte is unchanged. A
// request that is not streamed or already asks for usage is returned as
// it is (the same slice). A body that is not a JSON object, or whose
// stream_options is neither an object nor null, is an error.
func InjectStreamUsage(body []byte) ([]byte, error) {
	top, err := members(body)
	if err != nil {
		return nil, fmt.Errorf("request body: %w", err)
	}
	if !isTrue(top.value(body, "stream")) {
		return body, nil
	}
	so, ok := top.find("stream_options")
	if !ok {
		insert := []byte(`,"stream_options":{"include_usage":true}`)
		return splice(body, top.end, top.end, insert), nil
	}
	raw := body[so.start:so.end]
	switch {
	case bytes.Equal(raw, jsonNull):
		return splice(body, so.start, so.end, []byte(`{"include_usage":true}`)), nil
	case raw[0] != '{':
		return nil, errors.New("request body: stream_options: want an object")
	}
	inner, err := members(raw)
	if err != nil {
		return nil, fmt.Errorf("request body: stream_options: %w", err)
	}
	iu, ok := inner.find("include_usage")
	switch {
	case ok && isTrue(raw[iu.start:iu.end]):
		return body, nil
	case ok:
		return splice(body, so.start+iu.start, so.start+iu.end, []byte("true")), nil
	}
	add := []byte(`,"include_usage":true`)
	if len(inner.spans) == 0 {
		add = add[1:]
	}
	at := so.start + inner.end
	return splice(body, at, at, add), nil
}

// splice returns a copy of b with b[i:j] replaced by s.
func splice(b []byte, i, j int, s []byte) []byte {
	out := make([]byte, 0, len(b)-(j-i)+len(s))
	out = append(out, b[:i]...)
	out = append(out, s...)
	return append(out, b[j:]...)
}

// span is one member of a JSON object: its key and where its value lies.
type span struct {
	key        string
	start, end int
}

// object is the members of a JSON object, in order, and where its last
// value ends (just after the opening brace when it has none).
type object struct {
	spans []span
	end   int
}

// find returns a member by key; the last one wins, as in encoding/json.
func (o object) find(key string) (span, bool) {
	for i := len(o.spans) - 1; i >= 0; i-- {
		if o.spans[i].key == key {
			return o.spans[i], true
		}
	}
	return span{}, false
}

func (o object) value(b []byte, key string) []byte {
	if s, ok := o.find(key); ok {
		return b[s.start:s.end]
	}
	return nil
}

// members lists the members of the JSON object b, which must be valid
// JSON with nothing after the object.
func members(b []byte) (object, error) {
	if !json.Valid(b) {
		return object{}, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return object{}, errors.New("not a JSON object")
	}
	o := object{end: int(dec.InputOffset())}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return object{}, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return object{}, err
		}
		o.end = int(dec.InputOffset())
		o.spans = append(o.spans, span{key, o.end - len(v), o.end})
	}
	return o, nil
}
