package main

import (
	"net/http"
	"strconv"
)

// anthropicError is what Anthropic answers for a status: message, type.
func anthropicError(status int, model string) (msg, typ string) {
	switch status {
	case http.StatusBadRequest:
		return "Invalid request.", "invalid_request_error"
	case http.StatusUnauthorized:
		return "invalid x-api-key", "authentication_error"
	case http.StatusForbidden:
		return "Your API key does not have permission to use the specified resource.", "permission_error"
	case http.StatusNotFound:
		return "model: " + model, "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "Request exceeds the maximum allowed number of bytes.", "request_too_large"
	case http.StatusTooManyRequests:
		return "This request would exceed the rate limit for your organization of 50 requests per minute.",
			"rate_limit_error"
	case http.StatusGatewayTimeout:
		return "Request timed out.", "timeout_error"
	case 529, http.StatusServiceUnavailable:
		return "Overloaded", "overloaded_error"
	}
	if status >= 500 {
		return "Internal server error", "api_error"
	}
	return http.StatusText(status), "invalid_request_error"
}

// failAnthropic writes an Anthropic error body, with a retry hint when
// retryAfter > 0.
func (h *handler) failAnthropic(w http.ResponseWriter, status int, msg, typ string, retryAfter int) {
	hd := w.Header()
	if retryAfter > 0 {
		hd.Set("retry-after", strconv.Itoa(retryAfter))
	}
	if status == http.StatusTooManyRequests {
		hd.Set("anthropic-ratelimit-requests-limit", "50")
		hd.Set("anthropic-ratelimit-requests-remaining", "0")
	}
	if status == 529 || status >= 500 && retryAfter > 0 {
		hd.Set("x-should-retry", "true")
	}
	writeJSON(w, status, map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": msg},
	})
}

// message answers an Anthropic messages request with usage.
func (h *handler) message(w http.ResponseWriter, status int, req *chatRequest, id uint64) {
	reply := "This is a mock reply from " + req.Model + "."
	pt, ct := promptTokens(req), tokens(len(reply))
	okHeaders(w.Header(), anthropic)
	writeJSON(w, status, map[string]any{
		"id":            "msg_mock_" + strconv.FormatUint(id, 10),
		"type":          "message",
		"role":          "assistant",
		"model":         req.Model,
		"content":       []any{map[string]any{"type": "text", "text": reply}},
		"stop_reason":   "end_turn",
		"stop_sequence": nil,
		"usage":         anthropicUsage(pt, ct),
	})
}

func anthropicUsage(input, output int) map[string]any {
	return map[string]any{
		"input_tokens":                input,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
		"output_tokens":               output,
	}
}
