package main

// openAIStream is a chat completions stream: chunks of deltas, a last
// chunk with the finish reason, the usage chunk when the request set
// stream_options.include_usage (every chunk then has "usage":null), and
// "data: [DONE]".
type openAIStream struct {
	id, model string
	created   int64
	usage     bool
	prompt    int
}

func (s *openAIStream) chunk(choices []any, usage any) map[string]any {
	c := map[string]any{
		"id":      s.id,
		"object":  "chat.completion.chunk",
		"created": s.created,
		"model":   s.model,
		"choices": choices,
	}
	if s.usage {
		c["usage"] = usage
	}
	return c
}

func choice(delta map[string]any, finish any) []any {
	return []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
}

func (s *openAIStream) start(e *sseWriter) {
	e.event("", s.chunk(choice(map[string]any{"role": "assistant", "content": ""}, nil), nil))
}

func (s *openAIStream) delta(e *sseWriter, text string) {
	e.event("", s.chunk(choice(map[string]any{"content": text}, nil), nil))
}

func (s *openAIStream) finish(e *sseWriter, completion int) {
	e.event("", s.chunk(choice(map[string]any{}, "stop"), nil))
	if s.usage {
		e.event("", s.chunk([]any{}, map[string]any{
			"prompt_tokens": s.prompt, "completion_tokens": completion, "total_tokens": s.prompt + completion,
		}))
	}
	e.event("", "[DONE]")
}

// fail sends an error object in a data line, as OpenAI-style APIs do
// mid-stream; the default is a server error.
func (s *openAIStream) fail(e *sseWriter, status int) {
	if status == 0 {
		status = 500
	}
	msg, typ, code := providerError(openAI, status, s.model)
	var c any
	if code != "" {
		c = code
	}
	e.event("", map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}

// anthropicStream is a messages stream: message_start with the input
// usage, a text content block of deltas, message_delta with the
// cumulative output usage, message_stop.
type anthropicStream struct {
	id, model string
	prompt    int
}

func (s *anthropicStream) start(e *sseWriter) {
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.id, "type": "message", "role": "assistant", "content": []any{}, "model": s.model,
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(s.prompt, 1),
	}})
	e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	e.event("ping", map[string]any{"type": "ping"})
}

func (s *anthropicStream) delta(e *sseWriter, text string) {
	e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": text}})
}

func (s *anthropicStream) finish(e *sseWriter, completion int) {
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": completion}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// fail sends an error event; the default is overloaded_error.
func (s *anthropicStream) fail(e *sseWriter, status int) {
	if status == 0 {
		status = 529
	}
	msg, typ := anthropicError(status, s.model)
	e.event("error", map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
