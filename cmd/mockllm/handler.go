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

// handler serves the OpenAI-style and Anthropic-style APIs.
type handler struct {
	cfg config
	log *slog.Logger
	mux *http.ServeMux
	seq atomic.Uint64
	now func() time.Time

	mu  sync.Mutex
	rng *rand.Rand
}

// dialect is the provider whose API a path speaks.
type dialect int

const (
	openAI    dialect = iota // /v1/chat/completions
	anthropic                // /v1/messages
)

func newHandler(cfg config, log *slog.Logger) *handler {
	seed := cfg.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := &handler{cfg: cfg, log: log, mux: http.NewServeMux(), now: time.Now,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	h.mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, openAI) })
	h.mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, anthropic) })
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

// chatRequest is the part of a chat completion or messages request the
// mock reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"` // a string, or an array of parts
	} `json:"messages"`
	System        any  `json:"system"` // Anthropic: a string, or text blocks
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// answer is how a request is answered, from its headers and the flags.
type answer struct {
	delay      time.Duration
	status     int
	retryAfter int
	explicit   bool // retryAfter came from the request
	stream     streamPlan
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, d dialect) {
	id := h.seq.Add(1)
	w.Header().Set("x-request-id", fmt.Sprintf("req_mock_%d", id))
	req, ok := h.readRequest(w, r, d)
	if !ok {
		return
	}
	a, msg := h.answer(r, req.Model)
	if msg != "" {
		h.failAs(d, w, http.StatusBadRequest, msg, "invalid_request_error", "", 0)
		return
	}
	if !wait(r, a.delay) {
		return
	}
	switch {
	case a.status >= 300:
		retryAfter := a.retryAfter
		if !a.explicit && !retriable(a.status) {
			retryAfter = 0
		}
		msg, typ, code := providerError(d, a.status, req.Model)
		h.log.Info("failure", "model", req.Model, "status", a.status, "retry_after", retryAfter)
		h.failAs(d, w, a.status, msg, typ, code, retryAfter)
	case req.Stream:
		h.stream(w, r, d, req, id, a.stream)
	case d == anthropic:
		h.message(w, a.status, req, id)
	default:
		h.complete(w, a.status, req, id)
	}
}

// readRequest reads and checks the request, answering it when it is bad.
func (h *handler) readRequest(w http.ResponseWriter, r *http.Request, d dialect) (*chatRequest, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("allow", http.MethodPost)
		h.failAs(d, w, http.StatusMethodNotAllowed, "Method "+r.Method+" not allowed; use POST.",
			"invalid_request_error", "", 0)
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, false // the client went away
	}
	if len(body) > maxBody {
		h.failAs(d, w, http.StatusRequestEntityTooLarge, "The request body is too large.", "invalid_request_error", "", 0)
		return nil, false
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		h.failAs(d, w, http.StatusBadRequest, "We could not parse the JSON body of your request.",
			"invalid_request_error", "", 0)
		return nil, false
	}
	if req.Model == "" {
		h.failAs(d, w, http.StatusBadRequest, "You must provide a model parameter.", "invalid_request_error", "", 0)
		return nil, false
	}
	return &req, true
}

// answer reads the x-mock-* headers over the flags. msg, when not empty,
// says which header is malformed.
func (h *handler) answer(r *http.Request, model string) (a answer, msg string) {
	a.delay, a.retryAfter = h.cfg.delay, h.cfg.retryAfter
	if v := r.Header.Get("x-mock-delay-ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return a, "x-mock-delay-ms: want a whole number of milliseconds."
		}
		a.delay = time.Duration(ms) * time.Millisecond
	}
	status, ok := h.status(r, model)
	if !ok {
		return a, "x-mock-status: want a status code 100-599."
	}
	a.status = status
	if v := r.Header.Get("x-mock-retry-after"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 0 {
			return a, "x-mock-retry-after: want whole seconds."
		}
		a.retryAfter, a.explicit = s, true
	}
	var scale float64
	a.stream, scale, msg = h.streamPlan(r)
	a.delay = scaled(a.delay, scale)
	return a, msg
}

// wait waits d, or less if the client goes away; it reports whether the
// client is still there.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
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

// providerError is what the provider answers for a status: message,
// type, code.
func providerError(d dialect, status int, model string) (msg, typ, code string) {
	if d == anthropic {
		msg, typ = anthropicError(status, model)
		return msg, typ, ""
	}
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

// failAs writes the dialect's error body.
func (h *handler) failAs(d dialect, w http.ResponseWriter, status int, msg, typ, code string, retryAfter int) {
	if d == anthropic {
		h.failAnthropic(w, status, msg, typ, retryAfter)
		return
	}
	h.fail(w, status, msg, typ, code, retryAfter)
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
	reply := "This is a mock reply from " + req.Model + "."
	pt, ct := promptTokens(req), tokens(len(reply))
	okHeaders(w.Header(), openAI)
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

// okHeaders sets the rate limit headers of a successful answer.
func okHeaders(hd http.Header, d dialect) {
	if d == anthropic {
		hd.Set("anthropic-ratelimit-requests-limit", "10000")
		hd.Set("anthropic-ratelimit-requests-remaining", "9999")
		return
	}
	hd.Set("x-ratelimit-limit-requests", "10000")
	hd.Set("x-ratelimit-remaining-requests", "9999")
	hd.Set("x-ratelimit-reset-requests", "6ms")
}

// promptTokens estimates the prompt's tokens from its messages' roles and
// text and the system prompt.
func promptTokens(req *chatRequest) int {
	n := textLen(req.System)
	for _, m := range req.Messages {
		n += len(m.Role) + textLen(m.Content)
	}
	return tokens(n)
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
