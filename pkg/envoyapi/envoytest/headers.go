// Package envoytest emulates the Envoy side of the ext_proc protocol for
// tests: a client that sends a request's and a response's messages in the
// order Envoy's ext_proc filter sends them, holds headers while a body is
// buffered, and applies the processor's answers with Envoy's mutation
// rules, failing where Envoy would answer 500 or 504.
//
// The rules followed are those of Envoy's ext_proc filter (processor
// state machine and header mutation utilities): header values travel in
// raw_value; a set header with append unset overwrites (append_action is
// ignored); value and raw_value together are an error; host, :authority,
// :scheme, :method and x-envoy-* cannot be set or removed and pseudo
// headers cannot be removed (such attempts are ignored and counted);
// a replaced buffered body must agree with content-length; clear_route_cache
// counts only with a header mutation in the same response, on the request
// path of a downstream filter; each message gets exactly one response of
// its own kind, within the message timeout. Bodies are sent whole
// (BUFFERED) or in chunks (STREAMED, content-length dropped, each chunk
// answered on its own). Dynamic metadata is kept for the namespaces the
// filter receives (metadata_options.receiving_namespaces) and dropped,
// counted, for the others.
//
// Route emulates the router's retries around a cluster's upstream
// filter: one request header map for every attempt, x-envoy-attempt-count,
// a fresh body per attempt, retriable_headers and
// rate_limited_retry_back_off; RouteClusters adds the route's cluster
// specifier, re-selecting each retry's cluster from the request headers
// (refresh_cluster_on_retry).
//
// A Filter is configuration; a Stream is one request and is used by one
// goroutine. Waits are never slept: Route reports them.
package envoytest

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Header is one header line. Keys are lower case, as Envoy sends them.
type Header struct {
	Key, Value string
}

// Headers is a header list in order; a key may repeat.
type Headers []Header

// H builds Headers from key, value pairs.
func H(kv ...string) Headers {
	h := make(Headers, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, Header{strings.ToLower(kv[i]), kv[i+1]})
	}
	return h
}

// Get returns the first value of key and whether it is present.
func (h Headers) Get(key string) (string, bool) {
	key = strings.ToLower(key)
	for _, f := range h {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

// Value returns the first value of key, "" when absent.
func (h Headers) Value(key string) string {
	v, _ := h.Get(key)
	return v
}

// Values returns every value of key, in order.
func (h Headers) Values(key string) []string {
	key = strings.ToLower(key)
	var out []string
	for _, f := range h {
		if f.Key == key {
			out = append(out, f.Value)
		}
	}
	return out
}

// Has reports whether key is present.
func (h Headers) Has(key string) bool {
	_, ok := h.Get(key)
	return ok
}

// Set replaces every value of key with value (Envoy's setCopy).
func (h Headers) Set(key, value string) Headers {
	h = h.Del(key)
	return append(h, Header{strings.ToLower(key), value})
}

// Add appends a value of key (Envoy's addCopy).
func (h Headers) Add(key, value string) Headers {
	return append(h, Header{strings.ToLower(key), value})
}

// Del removes every value of key.
func (h Headers) Del(key string) Headers {
	key = strings.ToLower(key)
	out := h[:0:0]
	for _, f := range h {
		if f.Key != key {
			out = append(out, f)
		}
	}
	return out
}

// Clone copies h.
func (h Headers) Clone() Headers { return append(Headers(nil), h...) }

// Proto encodes h as Envoy does: raw_value only.
func (h Headers) Proto() *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(h))}
	for _, f := range h {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: f.Key, RawValue: []byte(f.Value)})
	}
	return m
}

// disallowed reports the headers the default mutation rules forbid a
// processor to set or remove.
func disallowed(key string) bool {
	switch key {
	case "host", ":authority", ":scheme", ":method":
		return true
	}
	return strings.HasPrefix(key, "x-envoy-")
}

// validName reports whether key is a lower-case header name: a token,
// or a pseudo-header name.
func validName(key string) bool {
	k := strings.TrimPrefix(key, ":")
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue reports whether v may be a header value.
func validValue(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00")
}
