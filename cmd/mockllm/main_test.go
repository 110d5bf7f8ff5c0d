package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello in one short sentence."}]}`

func newTestServer(t *testing.T, args ...string) *httptest.Server {
	t.Helper()
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(cfg, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	if ct := resp.Header.Get("content-type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func decodeBytes[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func TestCompletion(t *testing.T) {
	srv := newTestServer(t)
	resp := post(t, srv.URL, chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c := decode[completion](t, resp)
	if c.Object != "chat.completion" || c.Model != "gpt-4o" || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Errorf("completion %+v", c)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content == "" ||
		c.Choices[0].FinishReason != "stop" {
		t.Errorf("choices %+v", c.Choices)
	}
	u := c.Usage
	if u.PromptTokens < 1 || u.CompletionTokens < 1 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	if resp.Header.Get("x-request-id") == "" || resp.Header.Get("retry-after") != "" {
		t.Errorf("headers %v", resp.Header)
	}
}

func TestCompletionContentParts(t *testing.T) {
	srv := newTestServer(t)
	short := decode[completion](t, post(t, srv.URL, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	long := decode[completion](t, post(t, srv.URL,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"`+strings.Repeat("word ", 100)+`"}]}]}`))
	if long.Usage.PromptTokens <= short.Usage.PromptTokens {
		t.Errorf("prompt tokens: parts %d, short %d", long.Usage.PromptTokens, short.Usage.PromptTokens)
	}
}

func TestHeaderStatus429(t *testing.T) {
	srv := newTestServer(t)
	resp := post(t, srv.URL, chatBody, "x-mock-status", "429", "x-mock-retry-after", "3")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for h, want := range map[string]string{
		"retry-after":                    "3",
		"retry-after-ms":                 "3000",
		"x-ratelimit-reset-requests":     "3s",
		"x-ratelimit-remaining-requests": "0",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	e := decode[errorBody](t, resp)
	if e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" ||
		e.Error.Message == "" || e.Error.Param != nil {
		t.Errorf("error body %+v", e.Error)
	}
}

func TestHeaderStatusDefaults(t *testing.T) {
	srv := newTestServer(t, "-retry-after", "2")
	cases := []struct {
		status    int
		typ, code string
		hint      string
	}{
		{500, "server_error", "", "2"},
		{503, "server_error", "", "2"},
		{401, "invalid_request_error", "invalid_api_key", ""},
		{404, "invalid_request_error", "model_not_found", ""},
		{400, "invalid_request_error", "", ""},
	}
	for _, c := range cases {
		resp := post(t, srv.URL, chatBody, "x-mock-status", strconv.Itoa(c.status))
		if resp.StatusCode != c.status {
			t.Errorf("status %d, want %d", resp.StatusCode, c.status)
		}
		if got := resp.Header.Get("retry-after"); got != c.hint {
			t.Errorf("%d: retry-after %q, want %q", c.status, got, c.hint)
		}
		e := decode[errorBody](t, resp)
		code := ""
		if e.Error.Code != nil {
			code = *e.Error.Code
		}
		if e.Error.Type != c.typ || code != c.code {
			t.Errorf("%d: error %+v", c.status, e.Error)
		}
	}
	// An explicit hint is sent whatever the status.
	resp := post(t, srv.URL, chatBody, "x-mock-status", "400", "x-mock-retry-after", "5")
	if resp.Header.Get("retry-after") != "5" {
		t.Errorf("explicit hint on 400: %v", resp.Header)
	}
	// x-mock-status 200 answers normally.
	if resp := post(t, srv.URL, chatBody, "x-mock-status", "200"); resp.StatusCode != 200 {
		t.Errorf("x-mock-status 200: %d", resp.StatusCode)
	}
}

func TestHeaderDelay(t *testing.T) {
	srv := newTestServer(t)
	start := time.Now()
	resp := post(t, srv.URL, chatBody, "x-mock-delay-ms", "150")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("answered after %v, want ≥ 150ms", d)
	}
}

func TestDelayFlagAndCancel(t *testing.T) {
	srv := newTestServer(t, "-delay", "10s")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	start := time.Now()
	_, err := http.DefaultClient.Do(req)
	if err == nil {
		t.Fatal("answered before the 10 s delay")
	}
	if time.Since(start) > 5*time.Second {
		t.Error("a cancelled request was not abandoned")
	}
}

func TestFailRateFlag(t *testing.T) {
	always := newTestServer(t, "-fail-rate", "1", "-status", "503", "-retry-after", "4")
	resp := post(t, always.URL, chatBody)
	if resp.StatusCode != 503 || resp.Header.Get("retry-after") != "4" || resp.Header.Get("retry-after-ms") != "4000" {
		t.Errorf("fail-rate 1: %d %v", resp.StatusCode, resp.Header)
	}
	// A header wins over the flags.
	if resp := post(t, always.URL, chatBody, "x-mock-status", "200"); resp.StatusCode != 200 {
		t.Errorf("header did not win: %d", resp.StatusCode)
	}

	never := newTestServer(t, "-fail-rate", "0")
	for range 20 {
		if resp := post(t, never.URL, chatBody); resp.StatusCode != 200 {
			t.Fatalf("fail-rate 0: %d", resp.StatusCode)
		}
	}

	half := newTestServer(t, "-fail-rate", "0.5", "-seed", "7")
	failed := 0
	for range 200 {
		if post(t, half.URL, chatBody).StatusCode == 429 {
			failed++
		}
	}
	if failed < 60 || failed > 140 {
		t.Errorf("fail-rate 0.5: %d of 200 failed", failed)
	}
}

func TestFailModelsFlag(t *testing.T) {
	srv := newTestServer(t, "-fail-models", "mock-a, mock-c", "-status", "429")
	if resp := post(t, srv.URL, `{"model":"mock-a","messages":[]}`); resp.StatusCode != 429 {
		t.Errorf("mock-a: %d", resp.StatusCode)
	}
	resp := post(t, srv.URL, `{"model":"mock-b","messages":[]}`)
	if resp.StatusCode != 200 {
		t.Errorf("mock-b: %d", resp.StatusCode)
	}
	if c := decode[completion](t, resp); c.Model != "mock-b" {
		t.Errorf("model %q", c.Model)
	}
}

func TestBadRequests(t *testing.T) {
	srv := newTestServer(t)
	cases := []struct {
		name, body string
		headers    []string
		want       int
	}{
		{"not JSON", "nope", nil, 400},
		{"no model", `{"messages":[]}`, nil, 400},
		{"bad status header", chatBody, []string{"x-mock-status", "abc"}, 400},
		{"status header out of range", chatBody, []string{"x-mock-status", "999"}, 400},
		{"bad delay header", chatBody, []string{"x-mock-delay-ms", "-1"}, 400},
		{"bad retry header", chatBody, []string{"x-mock-retry-after", "soon"}, 400},
	}
	for _, c := range cases {
		resp := post(t, srv.URL, c.body, c.headers...)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
		if e := decode[errorBody](t, resp); e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("%s: %+v", c.name, e.Error)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("allow") != "POST" {
		t.Errorf("GET: %d allow %q", resp.StatusCode, resp.Header.Get("allow"))
	}
	resp, err = http.Get(srv.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	decode[errorBody](t, resp)
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-status", "200"},
		{"-status", "600"},
		{"-fail-rate", "1.5"},
		{"-fail-rate", "NaN"},
		{"-retry-after", "-1"},
		{"-delay", "-1s"},
		{"extra"},
		{"-nope"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	c, err := parseFlags([]string{"-fail-models", " a ,,b"}, io.Discard)
	if err != nil || len(c.failModels) != 2 || !c.failModels["a"] || !c.failModels["b"] {
		t.Errorf("fail-models %v %v", c.failModels, err)
	}
}

// TestRunServesAndDrains runs the command: it serves, and on cancel lets an
// in-flight request finish before returning nil.
func TestRunServesAndDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, io.Discard, func(a net.Addr) { addrc <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	url := "http://" + addr.String()

	inflight := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("x-mock-delay-ms", "300")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inflight <- -1
			return
		}
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if code := <-inflight; code != 200 {
		t.Errorf("in-flight request during shutdown: %d", code)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"-status", "1"}, io.Discard, nil); err == nil {
		t.Error("bad flags accepted")
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, nil); err != nil {
		t.Errorf("-h: %v", err)
	}
}
