package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// handler serves the OpenAI-style API.
type handler struct {
	cfg config
	log *slog.Logger
	mux *http.ServeMux
	seq atomic.Uint64
	now func() time.Time

	mu  sync.Mutex
	rng *rand.Rand
}

func newHandler(cfg config, log *slog.Logger) *handler {
	seed := cfg.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := &handler{cfg: cfg, log: log, mux: http.NewServeMux(), now: time.Now,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	h.mux.HandleFunc("/v1/chat/completions", h.chat)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/plain")
		io.WriteString(w, "OK\n")
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, http.StatusNotFound, "Unknown request URL: "+r.Method+" "+r.URL.Path+".",
			"invalid_request_error", "unknown_url", 0)
	})
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// chatRequest is the part of a chat completion request the mock reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"` // a string, or an array of parts
	} `json:"messages"`
}

func (h *handler) chat(w http.ResponseWriter, r *http.Request) {
	id := h.seq.Add(1)
	w.Header().Set("x-request-id", fmt.Sprintf("req_mock_%d", id))
	if r.Method != http.MethodPost {
		w.Header().Set("allow", http.MethodPost)
		h.fail(w, http.StatusMethodNotAllowed, "Method "+r.Method+" not allowed; use POST.",
			"invalid_request_error", "", 0)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return // the client went away
	}
	if len(body) > maxBody {
		h.fail(w, http.StatusRequestEntityTooLarge, "The request body is too large.", "invalid_request_error", "", 0)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		h.fail(w, http.StatusBadRequest, "We could not parse the JSON body of your request.",
			"invalid_request_error", "", 0)
		return
	}
	if req.Model == "" {
		h.fail(w, http.StatusBadRequest, "You must provide a model parameter.", "invalid_request_error", "", 0)
		return
	}

	delay := h.cfg.delay
	if v := r.Header.Get("x-mock-delay-ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			h.fail(w, http.StatusBadRequest, "x-mock-delay-ms: want a whole number of milliseconds.",
				"invalid_request_error", "", 0)
			return
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	status, ok := h.status(r, req.Model)
	if !ok {
		h.fail(w, http.StatusBadRequest, "x-mock-status: want a status code 100-599.", "invalid_request_error", "", 0)
		return
	}
	retryAfter, explicit := h.cfg.retryAfter, false
	if v := r.Header.Get("x-mock-retry-after"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 0 {
			h.fail(w, http.StatusBadRequest, "x-mock-retry-after: want whole seconds.", "invalid_request_error", "", 0)
			return
		}
		retryAfter, explicit = s, true
	}

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	if status >= 300 {
		if !explicit && !retriable(status) {
			retryAfter = 0
		}
		msg, typ, code := providerError(status, req.Model)
		h.log.Info("failure", "model", req.Model, "status", status, "retry_after", retryAfter)
		h.fail(w, status, msg, typ, code, retryAfter)
		return
	}
	h.complete(w, status, &req, id)
}

// status decides the request's status: the x-mock-status header, else a
// failure for a -fail-models model or by -fail-rate, else 200. ok is false
// when the header is malformed.
func (h *handler) status(r *http.Request, model string) (status int, ok bool) {
	if v := r.Header.Get("x-mock-status"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 100 || s > 599 {
			return 0, false
		}
		return s, true
	}
	if h.cfg.failModels[model] {
		return h.cfg.status, true
	}
	if h.cfg.failRate > 0 {
		h.mu.Lock()
		x := h.rng.Float64()
		h.mu.Unlock()
		if x < h.cfg.failRate {
			return h.cfg.status, true
		}
	}
	return http.StatusOK, true
}

// retriable says whether a provider would attach a retry hint by default.
func retriable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// providerError is what OpenAI answers for a status: message, type, code.
func providerError(status int, model string) (msg, typ, code string) {
	switch status {
	case http.StatusBadRequest:
		return "Invalid request.", "invalid_request_error", ""
	case http.StatusUnauthorized:
		return "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
	case http.StatusForbidden:
		return "You are not allowed to use this model.", "permission_error", "model_not_allowed"
	case http.StatusNotFound:
		return "The model `" + model + "` does not exist or you do not have access to it.",
			"invalid_request_error", "model_not_found"
	case http.StatusRequestTimeout:
		return "Request timed out.", "timeout", ""
	case http.StatusTooManyRequests:
		return "Rate limit reached for " + model + " on requests per min (RPM). Please try again later.",
			"requests", "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		return "The server is overloaded or not ready yet.", "server_error", ""
	case 529:
		return "Overloaded.", "overloaded_error", ""
	}
	if status >= 500 {
		return "The server had an error while processing your request. Sorry about that!", "server_error", ""
	}
	return http.StatusText(status), "invalid_request_error", ""
}

// fail writes an OpenAI error body, with retry hints when retryAfter > 0.
func (h *handler) fail(w http.ResponseWriter, status int, msg, typ, code string, retryAfter int) {
	hd := w.Header()
	if retryAfter > 0 {
		hd.Set("retry-after", strconv.Itoa(retryAfter))
		hd.Set("retry-after-ms", strconv.Itoa(retryAfter*1000))
		hd.Set("x-ratelimit-reset-requests", (time.Duration(retryAfter) * time.Second).String())
	}
	if status == http.StatusTooManyRequests {
		hd.Set("x-ratelimit-limit-requests", "60")
		hd.Set("x-ratelimit-remaining-requests", "0")
	}
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// complete answers a chat completion with usage.
func (h *handler) complete(w http.ResponseWriter, status int, req *chatRequest, id uint64) {
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Role) + textLen(m.Content)
	}
	reply := "This is a mock reply from " + req.Model + "."
	pt, ct := tokens(prompt), tokens(len(reply))
	hd := w.Header()
	hd.Set("x-ratelimit-limit-requests", "10000")
	hd.Set("x-ratelimit-remaining-requests", "9999")
	hd.Set("x-ratelimit-reset-requests", "6ms")
	writeJSON(w, status, map[string]any{
		"id":      "chatcmpl-mock-" + strconv.FormatUint(id, 10),
		"object":  "chat.completion",
		"created": h.now().Unix(),
		"model":   req.Model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": reply},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
	})
}

// textLen is the length of a message's text: a string, or the "text" of
// each part of an array.
func textLen(c any) int {
	switch c := c.(type) {
	case string:
		return len(c)
	case []any:
		n := 0
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					n += len(s)
				}
			}
		}
		return n
	}
	return 0
}

// tokens estimates a token count from bytes of text: about four a token.
func tokens(n int) int { return max(1, (n+3)/4) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("content-type", "application/json")
	w.Header().Set("content-length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
