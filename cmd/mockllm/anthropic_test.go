package main

import (
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/llmusage"
)

type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type anthropicMessage struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
}

func TestMessages(t *testing.T) {
	srv := newTestServer(t)
	resp := postPath(t, srv.URL, messagesPath, messagesBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	u, err := llmusage.ParseBody(b, 1<<20)
	if err != nil || !u.Seen || u.Input < 1 || u.Output < 1 || u.Total != u.Input+u.Output || u.CacheRead != 0 {
		t.Errorf("usage %+v %v", u, err)
	}
	m := decodeBytes[anthropicMessage](t, b)
	if m.Type != "message" || m.Role != "assistant" || m.Model != "claude-sonnet-4-5" || m.StopReason != "end_turn" ||
		len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text == "" {
		t.Errorf("message %+v", m)
	}
	// The system prompt counts.
	without := postPath(t, srv.URL, messagesPath, `{"model":"m","messages":[{"role":"user","content":"Say hello in one short sentence."}]}`)
	b, _ = io.ReadAll(without.Body)
	if w, _ := llmusage.ParseBody(b, 1<<20); w.Input >= u.Input {
		t.Errorf("prompt tokens without system %d, with %d", w.Input, u.Input)
	}
}

func TestOpenAIUsageParses(t *testing.T) {
	srv := newTestServer(t)
	b, _ := io.ReadAll(post(t, srv.URL, chatBody).Body)
	u, err := llmusage.ParseBody(b, 1<<20)
	if err != nil || !u.Seen || u.Total != u.Input+u.Output || u.Output < 1 {
		t.Errorf("usage %+v %v", u, err)
	}
}

func TestMessagesFailures(t *testing.T) {
	srv := newTestServer(t, "-retry-after", "2")
	cases := []struct {
		status      int
		typ         string
		retryAfter  string
		shouldRetry string
	}{
		{529, "overloaded_error", "2", "true"},
		{429, "rate_limit_error", "2", ""},
		{500, "api_error", "2", "true"},
		{404, "not_found_error", "", ""},
		{401, "authentication_error", "", ""},
	}
	for _, c := range cases {
		resp := postPath(t, srv.URL, messagesPath, messagesBody, "x-mock-status", strconv.Itoa(c.status))
		e := decode[anthropicErrorBody](t, resp)
		if resp.StatusCode != c.status || e.Type != "error" || e.Error.Type != c.typ || e.Error.Message == "" {
			t.Errorf("%d: %d %+v", c.status, resp.StatusCode, e)
		}
		if resp.Header.Get("retry-after") != c.retryAfter || resp.Header.Get("x-should-retry") != c.shouldRetry {
			t.Errorf("%d: headers %v", c.status, resp.Header)
		}
	}
	// A streamed request that fails is refused before any event, as JSON.
	resp := postPath(t, srv.URL, messagesPath, streamMessages, "x-mock-status", "529")
	if e := decode[anthropicErrorBody](t, resp); resp.StatusCode != 529 || e.Error.Type != "overloaded_error" {
		t.Errorf("streamed failure: %d %+v", resp.StatusCode, e)
	}
	// Bad requests on the messages path answer in its shape.
	for _, body := range []string{"nope", `{"messages":[]}`} {
		resp := postPath(t, srv.URL, messagesPath, body)
		if e := decode[anthropicErrorBody](t, resp); resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %+v", body, resp.StatusCode, e)
		}
	}
	resp, err := http.Get(srv.URL + messagesPath)
	if err != nil {
		t.Fatal(err)
	}
	if e := decode[anthropicErrorBody](t, resp); resp.StatusCode != 405 || e.Type != "error" {
		t.Errorf("GET: %d %+v", resp.StatusCode, e)
	}
	resp.Body.Close()
}
