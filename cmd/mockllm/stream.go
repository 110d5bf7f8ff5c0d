package main

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// streamPlan is how a streamed answer goes.
type streamPlan struct {
	chunks, size int
	delay        time.Duration // before each chunk, scaled
	errorAfter   int           // -1: never
	errorStatus  int           // 0: the provider's overload
	cutAfter     int           // -1: never
}

// streamPlan reads the x-mock-* stream headers over the flags, and the
// time scale that applies to every wait. msg, when not empty, says which
// header is malformed.
func (h *handler) streamPlan(r *http.Request) (p streamPlan, scale float64, msg string) {
	c := h.cfg
	p = streamPlan{chunks: c.streamChunks, size: c.chunkSize, errorAfter: c.errorAfter,
		errorStatus: c.errorStatus, cutAfter: c.cutAfter}
	delayMS := -1
	scale = c.timeScale
	ints := []struct {
		header   string
		dst      *int
		min, max int
		want     string
	}{
		{"x-mock-stream-chunks", &p.chunks, 0, maxChunks, "a whole number of chunks"},
		{"x-mock-chunk-size", &p.size, 1, maxChunkSize, "a whole number of bytes ≥ 1"},
		{"x-mock-chunk-delay-ms", &delayMS, 0, math.MaxInt32, "a whole number of milliseconds"},
		{"x-mock-stream-error-after", &p.errorAfter, -1, maxChunks, "a whole number of chunks, or -1"},
		{"x-mock-stream-error-status", &p.errorStatus, 400, 599, "a status code 400-599"},
		{"x-mock-stream-cut-after", &p.cutAfter, -1, maxChunks, "a whole number of chunks, or -1"},
	}
	for _, f := range ints {
		v := r.Header.Get(f.header)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < f.min || n > f.max {
			return p, scale, f.header + ": want " + f.want + "."
		}
		*f.dst = n
	}
	if v := r.Header.Get("x-mock-time-scale"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || !(s >= 0 && s <= 1e6) {
			return p, scale, "x-mock-time-scale: want a number 0..1e6."
		}
		scale = s
	}
	p.delay = c.chunkDelay
	if delayMS >= 0 {
		p.delay = time.Duration(delayMS) * time.Millisecond
	}
	p.delay = scaled(p.delay, scale)
	return p, scale, ""
}

// scaled multiplies d by the time scale.
func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(min(float64(d)*scale, math.MaxInt64))
}

// shape writes the events of one provider's stream.
type shape interface {
	start(e *sseWriter)
	delta(e *sseWriter, text string)
	finish(e *sseWriter, completionTokens int)
	fail(e *sseWriter, status int)
}

// stream answers with server-sent events: the provider's opening events,
// p.chunks content chunks of p.size bytes each p.delay apart, then its
// closing events with usage. With errorAfter or cutAfter k (at most the
// number of chunks: k beyond it means after the last), an error event
// ends the stream after k chunks, or the connection is closed after them,
// without the closing events.
func (h *handler) stream(w http.ResponseWriter, r *http.Request, d dialect, req *chatRequest, id uint64, p streamPlan) {
	var sh shape = &openAIStream{id: "chatcmpl-mock-" + strconv.FormatUint(id, 10), model: req.Model,
		created: h.now().Unix(), usage: req.StreamOptions.IncludeUsage, prompt: promptTokens(req)}
	if d == anthropic {
		sh = &anthropicStream{id: "msg_mock_" + strconv.FormatUint(id, 10), model: req.Model, prompt: promptTokens(req)}
	}
	hd := w.Header()
	okHeaders(hd, d)
	hd.Set("content-type", "text/event-stream")
	hd.Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	e := &sseWriter{w: w, rc: http.NewResponseController(w)}
	sh.start(e)
	for i := 0; ; i++ {
		switch {
		case e.err != nil:
			return // the client went away
		case i == p.errorAfter || p.errorAfter > p.chunks && i == p.chunks:
			h.log.Info("stream error", "model", req.Model, "after_chunks", i)
			sh.fail(e, p.errorStatus)
			return
		case i == p.cutAfter || p.cutAfter > p.chunks && i == p.chunks:
			h.log.Info("stream cut", "model", req.Model, "after_chunks", i)
			panic(http.ErrAbortHandler) // net/http closes the connection without ending the body
		case i == p.chunks:
			sh.finish(e, tokens(p.chunks*p.size))
			return
		}
		if !wait(r, p.delay) {
			return
		}
		sh.delta(e, replyText(i*p.size, p.size))
	}
}

// replyWords is the text of streamed replies, repeated.
const replyWords = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "

// replyText is n bytes of the reply from byte offset on: ASCII, so that a
// chunk never splits a character.
func replyText(offset, n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := offset % len(replyWords); b.Len() < n; i = 0 {
		b.WriteString(replyWords[i:min(len(replyWords), i+n-b.Len())])
	}
	return b.String()
}

// sseWriter writes events and flushes each; the first error stops it.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	err error
}

// event writes an event with an optional name and v as JSON data, or v
// itself when it is a string.
func (e *sseWriter) event(name string, v any) {
	if e.err != nil {
		return
	}
	e.buf = e.buf[:0]
	if name != "" {
		e.buf = append(append(append(e.buf, "event: "...), name...), '\n')
	}
	e.buf = append(e.buf, "data: "...)
	if s, ok := v.(string); ok {
		e.buf = append(e.buf, s...)
	} else {
		b, _ := json.Marshal(v)
		e.buf = append(e.buf, b...)
	}
	e.buf = append(e.buf, "\n\n"...)
	if _, e.err = e.w.Write(e.buf); e.err == nil {
		e.err = e.rc.Flush()
	}
}
