package llmusage

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Stats counts what a Parser met in its stream.
type Stats struct {
	Events    int // events dispatched: ended by a blank line, with data
	Oversized int // events skipped for being larger than MaxEvent
	Malformed int // events whose data was not the JSON expected, or had counts < 0
}

// StreamError is an error event met in a stream, after the response
// status (200) was sent: Anthropic's "event: error" with
// {"type":"error","error":{"type":"overloaded_error","message":…}}, an
// OpenAI-style data object with an "error" member, a Responses API error
// event with a top-level code, or a response.failed event.
type StreamError struct {
	Event   string // the SSE event name; "" when the event had none
	Type    string // the error's type, e.g. overloaded_error, server_error
	Code    string // the error's code; a numeric code as its digits
	Message string
	// Data is the event's data as sent, for a classifier that reads a
	// whole error body. It is a copy, at most MaxEvent bytes.
	Data []byte
}

func (e *StreamError) Error() string {
	var b strings.Builder
	b.WriteString("stream error")
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Code != "" {
		b.WriteString(" (code " + e.Code + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// streamState is what a Parser has learnt from its events.
type streamState struct {
	usage usageFields
	final bool // a closing usage report was read
	done  bool
	err   *StreamError
	stats Stats
}

// Usage returns the usage reported so far: OpenAI's usage chunk (sent
// when the request set stream_options.include_usage), or Anthropic's
// message_start usage updated by each message_delta (whose counts are
// cumulative). A stream cut before its usage gives a Usage with Seen
// false, or, for Anthropic, Seen without Final.
func (p *Parser) Usage() Usage {
	u := p.st.usage.usage()
	u.Final = u.Seen && p.st.final
	return u
}

// Done reports whether the stream's end marker arrived: OpenAI's
// "data: [DONE]", Anthropic's message_stop, or a Responses API
// response.completed, response.incomplete or response.failed.
func (p *Parser) Done() bool { return p.st.done }

// Err returns the stream's first error event, or nil.
func (p *Parser) Err() *StreamError { return p.st.err }

// Stats returns the parser's counts.
func (p *Parser) Stats() Stats { return p.st.stats }

var doneMarker = []byte("[DONE]")

// dispatch interprets one event. Content events are recognised by name or
// by the absence of the keys read, and are not decoded.
func (p *Parser) dispatch(name []byte, longName bool, data []byte) {
	p.st.stats.Events++
	if p.onEvent != nil {
		p.onEvent(name, data)
	}
	if !longName && ignored(name) {
		return
	}
	if string(name) == "message_stop" || bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		p.st.done = true
		return
	}
	isErr := string(name) == "error"
	if isErr || mentions(data) {
		p.decode(name, isErr, data)
	}
}

// ignored reports the events that never carry usage or an error.
func ignored(name []byte) bool {
	switch string(name) {
	case "ping", "content_block_start", "content_block_delta", "content_block_stop":
		return true
	case "response.completed", "response.incomplete", "response.failed":
		return false
	}
	return bytes.HasPrefix(name, []byte("response."))
}

var (
	interestingKeys = [...][]byte{[]byte(`"usage"`), []byte(`"error"`), []byte(`"type"`)}
	jsonNull        = []byte("null")
)

// mentions reports whether data has one of the keys read with a value
// other than null. A match inside a string value is impossible: there the
// quotes are escaped.
func mentions(data []byte) bool {
	for _, k := range interestingKeys {
		rest := data
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			v := bytes.TrimLeft(rest, " \t\r\n")
			if len(v) == 0 || v[0] != ':' {
				continue
			}
			if v = bytes.TrimLeft(v[1:], " \t\r\n"); !bytes.HasPrefix(v, jsonNull) {
				return true
			}
		}
	}
	return false
}

// event is the part of an event's data the parser reads.
type event struct {
	Type     string          `json:"type"`
	Usage    *usageFields    `json:"usage"`
	Message  json.RawMessage `json:"message"` // Anthropic: the message; Responses error: a string
	Response *struct {
		Usage *usageFields    `json:"usage"`
		Error json.RawMessage `json:"error"`
	} `json:"response"`
	Error json.RawMessage `json:"error"`
	Code  json.RawMessage `json:"code"`
}

func (p *Parser) decode(name []byte, isErr bool, data []byte) {
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		p.st.stats.Malformed++
		if isErr {
			p.fail(newStreamError(name, data, nil))
		}
		return
	}
	switch ev.Type {
	case "message_start":
		var m struct {
			Usage *usageFields `json:"usage"`
		}
		if json.Unmarshal(ev.Message, &m) != nil {
			p.st.stats.Malformed++
			return
		}
		p.addUsage(m.Usage, false)
		return
	case "message_stop":
		p.st.done = true
		return
	case "response.completed", "response.incomplete", "response.failed":
		p.st.done = true
		if ev.Response != nil {
			p.addUsage(ev.Response.Usage, true)
			if ev.Type == "response.failed" {
				p.fail(newStreamError(name, data, &event{Error: ev.Response.Error}))
			}
		}
		return
	}
	if isErr || ev.Type == "error" || present(ev.Error) {
		p.fail(newStreamError(name, data, &ev))
		return
	}
	p.addUsage(ev.Usage, true)
}

// addUsage merges a usage report; final says it is a closing one.
func (p *Parser) addUsage(u *usageFields, final bool) {
	if u == nil {
		return
	}
	if u.validate() != nil {
		p.st.stats.Malformed++
		return
	}
	p.st.usage.merge(u)
	p.st.final = p.st.final || final && u.seen()
}

func (p *Parser) fail(e *StreamError) {
	if p.st.err == nil {
		p.st.err = e
	}
}

// maxRawMessage bounds the message taken from an error event that is not
// JSON.
const maxRawMessage = 512

// newStreamError builds the error of an event; ev is nil when the data is
// not JSON, and the data is then the message.
func newStreamError(name, data []byte, ev *event) *StreamError {
	e := &StreamError{Event: string(name), Data: bytes.Clone(data)}
	if ev == nil {
		e.Message = string(bytes.ToValidUTF8(data[:min(len(data), maxRawMessage)], nil))
		return e
	}
	raw := bytes.TrimSpace(ev.Error)
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var obj struct {
			Type, Code, Message json.RawMessage
		}
		if json.Unmarshal(raw, &obj) == nil {
			e.Type, e.Code, e.Message = scalar(obj.Type), scalar(obj.Code), scalar(obj.Message)
		}
	case len(raw) > 0 && raw[0] == '"':
		e.Message = scalar(raw)
	}
	if e.Code == "" {
		e.Code = scalar(ev.Code)
	}
	if e.Message == "" {
		e.Message = scalar(ev.Message)
	}
	return e
}

// scalar renders a JSON string or number; anything else is "".
func scalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String()
		}
	}
	return ""
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, jsonNull)
}
