package resilience

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// maxBodyScan bounds how much of a body is decoded or searched.
const maxBodyScan = 1 << 20

// bodyInfo is what the classifier reads from an error body, including the
// parts retryhint reads a wait from (retryDelays, text). Providers
// disagree on the shape, so it is gathered from every place a known
// provider puts it.
type bodyInfo struct {
	codes       []string // lower-cased type, code, status, error_type, reason…
	message     string
	status      int      // a numeric error code that is an HTTP error status
	retryDelays []string // google.rpc.RetryInfo.retryDelay values, for retryhint
	quotaIDs    []string // google.rpc.QuotaFailure violation quota ids
	text        string   // the scanned text: the message, else the raw body
	errorObj    bool     // the JSON says it is an error
}

// isError reports whether the body is an error report (and not, say, a
// completion that mentions an error).
func (b *bodyInfo) isError() bool { return b.errorObj }

// parseBody reads an error body: a JSON object (or an array of them), or a
// server-sent-events stream whose first data line holds one. A body that
// is not JSON still yields its text for message patterns.
func parseBody(raw []byte) bodyInfo {
	if len(raw) > maxBodyScan {
		raw = raw[:maxBodyScan]
	}
	raw = bytes.TrimSpace(raw)
	var info bodyInfo
	payload := ssePayload(raw)
	var doc any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if len(payload) > 0 && dec.Decode(&doc) == nil {
		if obj, ok := firstObject(doc); ok {
			info.readTop(obj)
		}
	}
	info.text = info.message
	if info.text == "" {
		info.text = string(raw)
	}
	return info
}

// ssePayload returns the first "data:" line of an event stream that looks
// like JSON, or raw itself when raw is not an event stream.
func ssePayload(raw []byte) []byte {
	if !bytes.HasPrefix(raw, []byte("data:")) && !bytes.HasPrefix(raw, []byte("event:")) &&
		!bytes.HasPrefix(raw, []byte(":")) {
		return raw
	}
	for line := range bytes.Lines(raw) {
		data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
		data = bytes.TrimSpace(data)
		if ok && len(data) > 0 && (data[0] == '{' || data[0] == '[') {
			return data
		}
	}
	return nil
}

func firstObject(doc any) (map[string]any, bool) {
	switch v := doc.(type) {
	case map[string]any:
		return v, true
	case []any:
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				return m, true
			}
		}
	}
	return nil, false
}

// codeKeys are the fields that carry a machine-readable error kind.
var codeKeys = []string{"type", "code", "status", "error_type", "__type", "reason"}

func (b *bodyInfo) readTop(obj map[string]any) {
	if e, ok := obj["error"]; ok && e != nil {
		b.errorObj = true
	}
	if obj["type"] == "error" || obj["object"] == "error" {
		b.errorObj = true
	}
	b.readFields(obj)
	switch e := obj["error"].(type) {
	case string:
		b.message = e
	case map[string]any:
		b.readFields(e)
		b.readDetails(e["details"])
		if m, ok := e["metadata"].(map[string]any); ok {
			b.readFields(m)
		}
	}
	b.readDetails(obj["details"])
}

func (b *bodyInfo) readFields(obj map[string]any) {
	for _, k := range codeKeys {
		s, isNum := scalar(obj[k])
		if s == "" {
			continue
		}
		b.codes = append(b.codes, strings.ToLower(s))
		if isNum && k == "code" {
			if n, err := strconv.Atoi(s); err == nil && n >= 400 && n <= 599 {
				b.status = n
			}
		}
	}
	if s, ok := obj["message"].(string); ok && b.message == "" {
		b.message = s
	}
	if s, ok := obj["error_code"].(string); ok {
		b.codes = append(b.codes, strings.ToLower(s))
	}
}

// readDetails reads an Anthropic details object or a google.rpc details
// array.
func (b *bodyInfo) readDetails(v any) {
	switch d := v.(type) {
	case map[string]any:
		b.readFields(d)
	case []any:
		for _, e := range d {
			if m, ok := e.(map[string]any); ok {
				b.readDetail(m)
			}
		}
	}
}

func (b *bodyInfo) readDetail(m map[string]any) {
	typ, _ := m["@type"].(string)
	switch {
	case strings.HasSuffix(typ, "google.rpc.RetryInfo"):
		if s, ok := m["retryDelay"].(string); ok {
			b.retryDelays = append(b.retryDelays, s)
		}
	case strings.HasSuffix(typ, "google.rpc.QuotaFailure"):
		vs, _ := m["violations"].([]any)
		for _, v := range vs {
			if vm, ok := v.(map[string]any); ok {
				if id, ok := vm["quotaId"].(string); ok {
					b.quotaIDs = append(b.quotaIDs, id)
				}
			}
		}
	case strings.HasSuffix(typ, "google.rpc.ErrorInfo"):
		if s, ok := m["reason"].(string); ok {
			b.codes = append(b.codes, strings.ToLower(s))
		}
	}
}

// scalar renders a JSON string or number; isNum reports a number or a
// string of digits.
func scalar(v any) (s string, isNum bool) {
	switch x := v.(type) {
	case string:
		return x, isDigits(x)
	case json.Number:
		return x.String(), isDigits(x.String())
	}
	return "", false
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// hasCode reports whether any collected code equals one of want.
func (b *bodyInfo) hasCode(want []string) bool {
	return slices.ContainsFunc(b.codes, func(c string) bool { return slices.Contains(want, c) })
}
