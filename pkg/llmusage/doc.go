// Package llmusage reads token usage from LLM API traffic: from a whole
// JSON response, from a text/event-stream response fed chunk by chunk as
// it passes, and from a request body before it is sent (an estimate for a
// reservation). It knows the OpenAI chat completions and Responses shapes
// and the Anthropic messages shape, and nothing of how the bytes travel: it
// imports only the standard library.
//
// The model:
//
//   - Usage is one response's token counts. Anthropic's cache tokens
//     (cache_creation_input_tokens, cache_read_input_tokens) are folded into
//     Input and also kept apart; OpenAI's prompt_tokens already include
//     cached tokens. Usage.Seen tells a report of zero tokens from no
//     report at all, and Usage.Final a closing report from Anthropic's
//     opening one, which knows the input but not the output.
//   - ParseBody reads the usage of a whole (non-streamed) JSON response,
//     refusing bodies above a caller-given size.
//   - A Parser takes a stream in chunks of any split (mid-line, mid-CRLF,
//     mid-UTF-8, mid-JSON) through Write, follows the server-sent events
//     format, and keeps at most one event: its memory is bounded by
//     MaxEvent, and a larger event is skipped and counted, never buffered.
//     From the events it keeps the usage (OpenAI's final chunk, Anthropic's
//     message_start and last message_delta, a Responses API
//     response.completed), whether the stream reached its end marker
//     ([DONE], message_stop, response.completed), and the first error
//     event, as a StreamError exposing the provider's type, code and
//     message for a classifier.
//   - EstimateRequest reads a request body: prompt text bytes ÷ 4 rounded
//     up, plus the request's output cap or a default, and whether it is
//     streamed. InjectStreamUsage asks an OpenAI-style streamed request for
//     its usage chunk, changing no other byte of the body.
//
// Zero values: a zero Usage is "no usage seen"; a zero Parser is ready to
// use with DefaultMaxEvent. A Parser is for one stream and is not safe for
// concurrent use; the functions are safe for concurrent use.
package llmusage
