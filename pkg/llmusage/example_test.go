package llmusage_test

import (
	"fmt"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/llmusage"
)

// A stream is fed as it passes, in chunks of any split.
func ExampleParser() {
	chunks := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n",
		"\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_",
		"tokens\":15}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
	}
	var p llmusage.Parser
	for _, c := range chunks {
		p.Write([]byte(c))
	}
	u := p.Usage()
	fmt.Println(u.Input, u.Output, u.Total, p.Done())
	fmt.Println(p.Err().Type, p.Err().Message)
	// Output:
	// 25 15 40 false
	// overloaded_error Overloaded
}

// A streamed OpenAI request asks for its usage chunk.
func ExampleInjectStreamUsage() {
	body, _ := llmusage.InjectStreamUsage([]byte(`{"model":"gpt-4o","stream":true,"messages":[]}`))
	fmt.Println(string(body))
	// Output:
	// {"model":"gpt-4o","stream":true,"messages":[],"stream_options":{"include_usage":true}}
}
