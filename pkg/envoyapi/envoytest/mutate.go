package envoytest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// ErrRejected wraps every answer Envoy would turn into a local reply with
// status_on_error (500): an invalid mutation, a content-length mismatch,
// a spurious response, a gRPC error. In strict mode it also wraps what
// Envoy silently ignores and counts (a forbidden header mutation, a value
// outside raw_value, a clear_route_cache that cannot take effect).
var ErrRejected = errors.New("envoy would reject the processor's answer")

// ErrTimeout is the per-message timeout: Envoy answers 504.
var ErrTimeout = errors.New("ext_proc message timeout")

// Stats counts what Envoy would count instead of failing.
type Stats struct {
	// RejectedMutations is Envoy's rejected_header_mutations: set or
	// remove attempts on forbidden headers, silently ignored.
	RejectedMutations int
	// ValueOnly counts headers set through value instead of raw_value;
	// Envoy sets them to the empty string.
	ValueOnly int
	// ClearRouteCacheIgnored counts clear_route_cache flags that could
	// not take effect (no header mutation, response path, upstream filter).
	ClearRouteCacheIgnored int
	// Messages and Responses count what went each way.
	Messages, Responses int
	// DroppedMetadata counts dynamic metadata namespaces a response set
	// outside the filter's receiving namespaces (Envoy drops them).
	DroppedMetadata int
}

// ignored records a mutation Envoy ignores: counted, and an error in
// strict mode.
func (s *Stream) ignored(counter *int, format string, args ...any) error {
	*counter++
	if s.f.Lenient {
		return nil
	}
	return fmt.Errorf("%w: "+format, append([]any{ErrRejected}, args...)...)
}

// applyHeaders applies a HeaderMutation to h as Envoy's mutation utils do:
// removals, then sets; permissive is the ImmediateResponse rule set.
func (s *Stream) applyHeaders(h Headers, m *extprocv3.HeaderMutation, permissive bool) (Headers, error) {
	for _, key := range m.GetRemoveHeaders() {
		k := strings.ToLower(key)
		if !validName(k) {
			return h, fmt.Errorf("%w: invalid header name %q to remove", ErrRejected, key)
		}
		if k != key {
			if err := s.ignored(&s.stats.RejectedMutations, "upper-case header name %q", key); err != nil {
				return h, err
			}
		}
		if (disallowed(k) && !permissive) || strings.HasPrefix(k, ":") || k == "host" {
			if err := s.ignored(&s.stats.RejectedMutations, "remove of %q", k); err != nil {
				return h, err
			}
			continue
		}
		h = h.Del(k)
	}
	for _, o := range m.GetSetHeaders() {
		var err error
		if h, err = s.setHeader(h, o, permissive); err != nil {
			return h, err
		}
	}
	return h, nil
}

// setHeader applies one set entry: raw_value only, append unset means
// overwrite, append_action is not read.
func (s *Stream) setHeader(h Headers, o *corev3.HeaderValueOption, permissive bool) (Headers, error) {
	hv := o.GetHeader()
	key := strings.ToLower(hv.GetKey())
	switch {
	case hv == nil || !validName(key):
		return h, fmt.Errorf("%w: invalid header name %q to set", ErrRejected, hv.GetKey())
	case hv.GetValue() != "" && len(hv.GetRawValue()) > 0:
		return h, fmt.Errorf("%w: header %q sets both value and raw_value", ErrRejected, key)
	case !validValue(string(hv.GetRawValue())):
		return h, fmt.Errorf("%w: invalid value for header %q", ErrRejected, key)
	}
	if key != hv.GetKey() {
		if err := s.ignored(&s.stats.RejectedMutations, "upper-case header name %q", hv.GetKey()); err != nil {
			return h, err
		}
	}
	if hv.GetValue() != "" {
		if err := s.ignored(&s.stats.ValueOnly, "header %q set through value, not raw_value", key); err != nil {
			return h, err
		}
	}
	if disallowed(key) && !permissive {
		return h, s.ignored(&s.stats.RejectedMutations, "set of %q", key)
	}
	value := string(hv.GetRawValue())
	if o.GetAppend().GetValue() {
		return h.Add(key, value), nil
	}
	return h.Set(key, value), nil
}

// immediate turns an ImmediateResponse into the local reply Envoy sends.
func (s *Stream) immediate(ir *extprocv3.ImmediateResponse) (*LocalReply, error) {
	code := int(ir.GetStatus().GetCode())
	if code < 200 {
		code = 200
	}
	h := H(":status", strconv.Itoa(code), "content-type", "text/plain")
	h, err := s.applyHeaders(h, ir.GetHeaders(), true)
	if err != nil {
		return nil, err
	}
	details := strings.Join(strings.Fields(ir.GetDetails()), "_")
	return &LocalReply{Status: code, Headers: h, Body: ir.GetBody(), Details: details}, nil
}

// LocalReply is a response Envoy generated itself.
type LocalReply struct {
	Status  int
	Headers Headers
	Body    []byte
	Details string
}
