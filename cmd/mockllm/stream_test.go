package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/llmusage"
)

const (
	chatPath     = "/v1/chat/completions"
	messagesPath = "/v1/messages"

	streamChat     = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}`
	streamChatUsed = `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hello in one short sentence."}]}`
	messagesBody   = `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Say hello in one short sentence."}]}`
	streamMessages = `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"system":"Be brief.","messages":[{"role":"user","content":"Say hello in one short sentence."}]}`
)

func postPath(t *testing.T, url, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
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

// sent is a streamed answer as a client read it.
type sent struct {
	p       *llmusage.Parser
	names   []string // event names, "" for unnamed events
	text    string   // the content deltas, joined
	deltas  int      // content chunks
	readErr error    // how reading the body ended
	raw     string
	header  http.Header
}

// readStream reads a streamed answer through the llmusage parser in 7-byte
// pieces, and reads its content from the same bytes.
func readStream(t *testing.T, resp *http.Response) sent {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("content-type") != "text/event-stream" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("content-type"))
	}
	s := sent{p: new(llmusage.Parser), header: resp.Header}
	var raw strings.Builder
	_, s.readErr = io.CopyBuffer(io.MultiWriter(s.p, &raw), struct{ io.Reader }{resp.Body}, make([]byte, 7))
	s.raw = raw.String()
	for ev := range strings.SplitSeq(s.raw, "\n\n") {
		name, data := "", ""
		for line := range strings.SplitSeq(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		if data == "" {
			continue
		}
		s.names = append(s.names, name)
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Delta struct{ Text string } `json:"delta"`
		}
		json.Unmarshal([]byte(data), &c)
		text := c.Delta.Text
		if len(c.Choices) > 0 {
			text = c.Choices[0].Delta.Content
		}
		if text != "" {
			s.text += text
			s.deltas++
		}
	}
	return s
}

// promptOf is the prompt tokens the mock reports for a body, read from
// its non-streamed answer.
func promptOf(t *testing.T, url, path, body string) int64 {
	t.Helper()
	body = strings.Replace(body, `"stream":true,`, "", 1)
	b, err := io.ReadAll(postPath(t, url, path, body).Body)
	if err != nil {
		t.Fatal(err)
	}
	u, err := llmusage.ParseBody(b, 1<<20)
	if err != nil || !u.Seen {
		t.Fatalf("non-streamed usage %+v %v: %s", u, err, b)
	}
	return u.Input
}

func TestStreamOpenAIWithUsage(t *testing.T) {
	srv := newTestServer(t)
	s := readStream(t, postPath(t, srv.URL, chatPath, streamChatUsed, "x-mock-stream-chunks", "5", "x-mock-chunk-size", "10"))
	if s.readErr != nil || !s.p.Done() || s.p.Err() != nil {
		t.Fatalf("read %v done %v err %v", s.readErr, s.p.Done(), s.p.Err())
	}
	if s.deltas != 5 || s.text != replyText(0, 50) {
		t.Errorf("%d deltas %q", s.deltas, s.text)
	}
	prompt := promptOf(t, srv.URL, chatPath, streamChatUsed)
	want := llmusage.Usage{Input: prompt, Output: 13, Total: prompt + 13, Seen: true, Final: true} // 50 bytes ÷ 4, rounded up
	if u := s.p.Usage(); u != want {
		t.Errorf("usage %+v, want %+v", u, want)
	}
	// role chunk, 5 deltas, finish chunk, usage chunk, [DONE]
	if st := s.p.Stats(); st.Events != 9 || st.Malformed+st.Oversized != 0 {
		t.Errorf("stats %+v", st)
	}
	if strings.Count(s.raw, `"usage":null`) != 7 || !strings.HasSuffix(s.raw, "data: [DONE]\n\n") {
		t.Errorf("stream:\n%s", s.raw)
	}
}

func TestStreamOpenAIWithoutUsage(t *testing.T) {
	srv := newTestServer(t, "-stream-chunks", "3", "-chunk-size", "7")
	s := readStream(t, postPath(t, srv.URL, chatPath, streamChat))
	if s.readErr != nil || !s.p.Done() || s.p.Usage().Seen || s.deltas != 3 || len(s.text) != 21 {
		t.Errorf("read %v done %v usage %+v deltas %d text %q", s.readErr, s.p.Done(), s.p.Usage(), s.deltas, s.text)
	}
	if strings.Contains(s.raw, `"usage"`) {
		t.Errorf("usage sent without include_usage:\n%s", s.raw)
	}
}

func TestStreamAnthropic(t *testing.T) {
	srv := newTestServer(t)
	s := readStream(t, postPath(t, srv.URL, messagesPath, streamMessages, "x-mock-stream-chunks", "4", "x-mock-chunk-size", "25"))
	if s.readErr != nil || !s.p.Done() || s.p.Err() != nil {
		t.Fatalf("read %v done %v err %v", s.readErr, s.p.Done(), s.p.Err())
	}
	if s.header.Get("anthropic-ratelimit-requests-remaining") == "" || s.header.Get("cache-control") != "no-cache" {
		t.Errorf("headers %v", s.header)
	}
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(s.names, " ") != strings.Join(want, " ") || s.text != replyText(0, 100) {
		t.Errorf("events %v text %q", s.names, s.text)
	}
	prompt := promptOf(t, srv.URL, messagesPath, streamMessages)
	if u := s.p.Usage(); u != (llmusage.Usage{Input: prompt, Output: 25, Total: prompt + 25, Seen: true, Final: true}) {
		t.Errorf("usage %+v, prompt %d", u, prompt)
	}
}

func TestStreamErrorMidStream(t *testing.T) {
	srv := newTestServer(t)
	cases := []struct {
		name, path, body, status string
		typ, code                string
		usageSeen                bool
	}{
		{"OpenAI default", chatPath, streamChatUsed, "", "server_error", "", false},
		{"OpenAI rate", chatPath, streamChatUsed, "429", "requests", "rate_limit_exceeded", false},
		{"Anthropic default", messagesPath, streamMessages, "", "overloaded_error", "", true},
		{"Anthropic rate", messagesPath, streamMessages, "429", "rate_limit_error", "", true},
	}
	for _, c := range cases {
		hs := []string{"x-mock-stream-chunks", "5", "x-mock-stream-error-after", "2"}
		if c.status != "" {
			hs = append(hs, "x-mock-stream-error-status", c.status)
		}
		s := readStream(t, postPath(t, srv.URL, c.path, c.body, hs...))
		e := s.p.Err()
		if e == nil || e.Type != c.typ || e.Code != c.code || e.Message == "" {
			t.Errorf("%s: error %+v", c.name, e)
		}
		if s.readErr != nil || s.p.Done() || s.deltas != 2 || s.p.Usage().Seen != c.usageSeen {
			t.Errorf("%s: read %v done %v deltas %d usage %+v", c.name, s.readErr, s.p.Done(), s.deltas, s.p.Usage())
		}
	}
	// An error after more chunks than there are comes after the last one,
	// before the usage; -stream-error-after sets it for every request.
	all := newTestServer(t, "-stream-error-after", "99", "-stream-chunks", "3")
	s := readStream(t, postPath(t, all.URL, chatPath, streamChatUsed))
	if s.p.Err() == nil || s.deltas != 3 || s.p.Usage().Seen || s.p.Done() {
		t.Errorf("error after all chunks: err %v deltas %d usage %+v", s.p.Err(), s.deltas, s.p.Usage())
	}
}

func TestStreamCut(t *testing.T) {
	srv := newTestServer(t, "-stream-chunks", "6")
	for _, c := range []struct{ path, body string }{{chatPath, streamChatUsed}, {messagesPath, streamMessages}} {
		s := readStream(t, postPath(t, srv.URL, c.path, c.body, "x-mock-stream-cut-after", "3"))
		if !errors.Is(s.readErr, io.ErrUnexpectedEOF) {
			t.Errorf("%s: body ended with %v, want an unexpected EOF", c.path, s.readErr)
		}
		if s.deltas != 3 || s.p.Done() || s.p.Err() != nil || s.p.Usage().Output > 1 || s.p.Usage().Final {
			t.Errorf("%s: deltas %d done %v err %v usage %+v", c.path, s.deltas, s.p.Done(), s.p.Err(), s.p.Usage())
		}
	}
}

// TestStreamTimeScale runs a two-minute generation (1200 chunks 100 ms
// apart) a thousand times faster.
func TestStreamTimeScale(t *testing.T) {
	srv := newTestServer(t, "-stream-chunks", "1200", "-chunk-size", "4", "-chunk-delay", "100ms")
	start := time.Now()
	s := readStream(t, postPath(t, srv.URL, chatPath, streamChatUsed, "x-mock-time-scale", "0.001"))
	took := time.Since(start)
	if s.deltas != 1200 || s.p.Usage().Output != 1200 || !s.p.Done() {
		t.Errorf("deltas %d usage %+v", s.deltas, s.p.Usage())
	}
	if took < 120*time.Millisecond || took > time.Minute {
		t.Errorf("took %v: want 120 ms of waits, far below the unscaled 2 minutes", took)
	}
}

// TestStreamFlushesAndStops: the opening events arrive while the first
// chunk is an hour away, and the handler returns once the client goes.
func TestStreamFlushesAndStops(t *testing.T) {
	cfg, err := parseFlags([]string{"-chunk-delay", "1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(cfg, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(10*time.Second, cancel) // an unflushed event fails the read below, not the run
	defer stop.Stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+messagesPath, strings.NewReader(streamMessages))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still waits for a client that went away")
	}
}

func TestStreamBadHeaders(t *testing.T) {
	srv := newTestServer(t)
	for _, h := range [][2]string{
		{"x-mock-stream-chunks", "-1"}, {"x-mock-stream-chunks", "lots"}, {"x-mock-chunk-size", "0"},
		{"x-mock-chunk-delay-ms", "-5"}, {"x-mock-stream-error-after", "-2"}, {"x-mock-stream-error-status", "200"},
		{"x-mock-stream-cut-after", "x"}, {"x-mock-time-scale", "-1"}, {"x-mock-time-scale", "NaN"},
	} {
		resp := postPath(t, srv.URL, chatPath, streamChat, h[0], h[1])
		e := decode[errorBody](t, resp)
		if resp.StatusCode != 400 || !strings.HasPrefix(e.Error.Message, h[0]+": want") {
			t.Errorf("%s: %s: %d %+v", h[0], h[1], resp.StatusCode, e.Error)
		}
		resp = postPath(t, srv.URL, messagesPath, streamMessages, h[0], h[1])
		a := decode[anthropicErrorBody](t, resp)
		if resp.StatusCode != 400 || a.Type != "error" || a.Error.Type != "invalid_request_error" ||
			!strings.HasPrefix(a.Error.Message, h[0]+": want") {
			t.Errorf("%s: %s on messages: %d %+v", h[0], h[1], resp.StatusCode, a)
		}
	}
}

func TestStreamFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-stream-chunks", "-1"}, {"-stream-chunks", strconv.Itoa(maxChunks + 1)}, {"-chunk-size", "0"},
		{"-chunk-delay", "-1s"}, {"-time-scale", "-0.5"}, {"-time-scale", "Inf"}, {"-stream-error-after", "-2"},
		{"-stream-error-status", "302"}, {"-stream-cut-after", "-3"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v", args, err)
		}
	}
	c, err := parseFlags([]string{"-chunk-delay", "2s", "-time-scale", "0.5", "-stream-error-after", "0"}, io.Discard)
	if err != nil || c.chunkDelay != 2*time.Second || c.timeScale != 0.5 || c.errorAfter != 0 || c.cutAfter != -1 {
		t.Errorf("%+v %v", c, err)
	}
}

func TestReplyText(t *testing.T) {
	whole := replyText(0, 3*len(replyWords))
	for _, c := range [][2]int{{0, 1}, {5, 10}, {len(replyWords) - 2, 7}, {len(replyWords), 3}, {10, 2 * len(replyWords)}} {
		if got := replyText(c[0], c[1]); got != whole[c[0]:c[0]+c[1]] {
			t.Errorf("replyText(%d, %d) = %q", c[0], c[1], got)
		}
	}
}
