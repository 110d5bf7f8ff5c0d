package llmusage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Usage is the token count of one response, as the provider reported it.
// The zero value means no usage was seen.
type Usage struct {
	// Input is the prompt's tokens: OpenAI's prompt_tokens, or Anthropic's
	// input_tokens plus its two cache counts.
	Input int64
	// Output is the generated tokens: completion_tokens or output_tokens.
	Output int64
	// Total is total_tokens when the provider sent it, else Input+Output.
	Total int64
	// CacheCreation and CacheRead are Anthropic's
	// cache_creation_input_tokens and cache_read_input_tokens. In an
	// Anthropic report they are part of Input; in a report that has
	// prompt_tokens (which counts cached tokens already) they are not
	// added again.
	CacheCreation, CacheRead int64
	// Seen reports that a usage report with at least one count was read.
	Seen bool
	// Final reports that the counts come from the response's closing
	// report: a whole body's usage, OpenAI's usage chunk, Anthropic's
	// message_delta, a Responses API response.completed. Anthropic's
	// message_start alone gives Seen without Final: the input is known,
	// the output is not, and a stream cut there generated an unknown
	// number of tokens.
	Final bool
}

// ErrTooLarge is returned for a body above the caller's limit.
var ErrTooLarge = errors.New("body too large")

// ParseBody reads the usage of a whole JSON response body: OpenAI's
// usage.prompt_tokens, completion_tokens and total_tokens, or Anthropic's
// usage.input_tokens and output_tokens with its cache counts. A body
// without usage gives a zero Usage and no error. A body longer than
// maxBytes is refused with ErrTooLarge without being read; a body that is
// not a JSON object, or whose counts are not whole numbers ≥ 0, is an
// error naming the field.
func ParseBody(body []byte, maxBytes int) (Usage, error) {
	if maxBytes <= 0 {
		return Usage{}, fmt.Errorf("maxBytes %d: want > 0", maxBytes)
	}
	if len(body) > maxBytes {
		return Usage{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), maxBytes)
	}
	var doc struct {
		Usage *usageFields `json:"usage"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return Usage{}, fmt.Errorf("response body: %w", err)
	}
	if doc.Usage == nil {
		return Usage{}, nil
	}
	if err := doc.Usage.validate(); err != nil {
		return Usage{}, fmt.Errorf("response body: usage.%w", err)
	}
	u := doc.Usage.usage()
	u.Final = u.Seen
	return u, nil
}

// count is a token count that may be absent.
type count struct {
	v  int64
	ok bool
}

// UnmarshalJSON reads a whole number (1e3 and 12.0 included); null leaves
// the count absent.
func (c *count) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if v, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*c = count{v, true}
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("want a whole number, got %s", truncate(b, 32))
	}
	*c = count{int64(f), true}
	return nil
}

// usageFields is a usage object as sent, each count present or not.
type usageFields struct {
	Prompt        count `json:"prompt_tokens"`
	Completion    count `json:"completion_tokens"`
	Total         count `json:"total_tokens"`
	Input         count `json:"input_tokens"`
	Output        count `json:"output_tokens"`
	CacheCreation count `json:"cache_creation_input_tokens"`
	CacheRead     count `json:"cache_read_input_tokens"`
}

// fieldNames names the counts in the order of list.
var fieldNames = [...]string{"prompt_tokens", "completion_tokens", "total_tokens",
	"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}

func (f *usageFields) list() [len(fieldNames)]*count {
	return [...]*count{&f.Prompt, &f.Completion, &f.Total, &f.Input, &f.Output, &f.CacheCreation, &f.CacheRead}
}

// validate returns an error naming the first negative count.
func (f *usageFields) validate() error {
	for i, c := range f.list() {
		if c.ok && c.v < 0 {
			return fmt.Errorf("%s: %d is negative", fieldNames[i], c.v)
		}
	}
	return nil
}

// merge takes every count present in g. Anthropic's message_delta counts
// are cumulative, so a later report replaces an earlier one field by field.
func (f *usageFields) merge(g *usageFields) {
	dst := f.list()
	for i, c := range g.list() {
		if c.ok {
			*dst[i] = *c
		}
	}
}

func (f *usageFields) seen() bool {
	for _, c := range f.list() {
		if c.ok {
			return true
		}
	}
	return false
}

// usage computes the counts: see Usage for how the fields combine.
func (f *usageFields) usage() Usage {
	u := Usage{CacheCreation: f.CacheCreation.v, CacheRead: f.CacheRead.v, Seen: f.seen()}
	if f.Prompt.ok {
		u.Input = f.Prompt.v
	} else {
		u.Input = add(add(f.Input.v, u.CacheCreation), u.CacheRead)
	}
	u.Output = f.Output.v
	if f.Completion.ok {
		u.Output = f.Completion.v
	}
	u.Total = add(u.Input, u.Output)
	if f.Total.ok {
		u.Total = f.Total.v
	}
	return u
}

// add adds two counts ≥ 0, saturating instead of overflowing.
func add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// truncate renders at most n bytes of b, for error messages.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return strconv.Quote(string(bytes.ToValidUTF8(b[:n], nil))) + "…"
	}
	return strconv.Quote(string(b))
}
