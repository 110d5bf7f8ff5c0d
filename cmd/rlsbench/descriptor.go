package main

import (
	"fmt"
	"strconv"
	"strings"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// keyPlaceholder is replaced by the key index in descriptor values.
const keyPlaceholder = "{k}"

// maxCachedKeys bounds how many requests are built ahead of the run.
// Beyond it each request is built when it is sent.
const maxCachedKeys = 1 << 16

// entryTemplate is one key=value pair of a descriptor; value may hold
// keyPlaceholder.
type entryTemplate struct {
	key, value string
}

// requestTemplate builds the RateLimitRequest sent for a key index.
//
// The template syntax is "k1=v1,k2=v2" for one descriptor with ordered
// entries; ";" separates descriptors. "{k}" in a value becomes the key
// index, e.g. "generic_key=llm,api_key={k}".
type requestTemplate struct {
	domain      string
	hits        uint32
	descriptors [][]entryTemplate
	cache       []*ratelimitv3.RateLimitRequest // nil when keys > maxCachedKeys
}

// parseDescriptor parses the descriptor template syntax.
func parseDescriptor(s string) ([][]entryTemplate, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("descriptor: empty template")
	}
	var out [][]entryTemplate
	for d := range strings.SplitSeq(s, ";") {
		var entries []entryTemplate
		for pair := range strings.SplitSeq(d, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("descriptor: entry %q is not key=value", pair)
			}
			entries = append(entries, entryTemplate{key: k, value: v})
		}
		out = append(out, entries)
	}
	return out, nil
}

// newRequestTemplate returns a template for keys key indexes. It builds
// the requests ahead of time when there are few enough keys, so the hot
// path sends shared, read-only messages.
func newRequestTemplate(domain, descriptor string, hits uint32, keys int) (*requestTemplate, error) {
	ds, err := parseDescriptor(descriptor)
	if err != nil {
		return nil, err
	}
	t := &requestTemplate{domain: domain, hits: hits, descriptors: ds}
	if keys <= maxCachedKeys {
		t.cache = make([]*ratelimitv3.RateLimitRequest, keys)
		for k := range t.cache {
			t.cache[k] = t.build(k)
		}
	}
	return t, nil
}

// request returns the request for key index k. Callers must not modify it.
func (t *requestTemplate) request(k int) *ratelimitv3.RateLimitRequest {
	if t.cache != nil {
		return t.cache[k]
	}
	return t.build(k)
}

// keyName renders the descriptors of key index k, for reports.
func (t *requestTemplate) keyName(k int) string {
	parts := make([]string, len(t.descriptors))
	for i, d := range t.descriptors {
		pairs := make([]string, len(d))
		for j, e := range d {
			pairs[j] = e.key + "=" + expand(e.value, k)
		}
		parts[i] = strings.Join(pairs, ",")
	}
	return strings.Join(parts, ";")
}

func (t *requestTemplate) build(k int) *ratelimitv3.RateLimitRequest {
	req := &ratelimitv3.RateLimitRequest{
		Domain:      t.domain,
		HitsAddend:  t.hits,
		Descriptors: make([]*rlcommonv3.RateLimitDescriptor, len(t.descriptors)),
	}
	for i, d := range t.descriptors {
		entries := make([]*rlcommonv3.RateLimitDescriptor_Entry, len(d))
		for j, e := range d {
			entries[j] = &rlcommonv3.RateLimitDescriptor_Entry{Key: e.key, Value: expand(e.value, k)}
		}
		req.Descriptors[i] = &rlcommonv3.RateLimitDescriptor{Entries: entries}
	}
	return req
}

func expand(value string, k int) string {
	if !strings.Contains(value, keyPlaceholder) {
		return value
	}
	return strings.ReplaceAll(value, keyPlaceholder, strconv.Itoa(k))
}
