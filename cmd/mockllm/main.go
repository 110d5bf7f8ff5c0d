// Command mockllm is a small OpenAI- and Anthropic-style upstream for
// demos and tests.
//
// POST /v1/chat/completions answers a chat completion, and POST
// /v1/messages an Anthropic message, each with its provider's usage block.
// With "stream": true in the request the answer is server-sent events in
// the provider's shape: OpenAI chunks ending in "data: [DONE]", with a
// final usage chunk only when the request set
// stream_options.include_usage; or Anthropic's message_start (input
// usage), content_block_delta events, message_delta (cumulative output
// usage) and message_stop.
//
// It can be told to fail, per request with headers or for every request
// with flags, and then answers like the provider does: its error body and
// the retry hints providers send (retry-after, retry-after-ms,
// x-ratelimit-reset-requests; x-should-retry for Anthropic overloads). A
// stream can also fail after it started: an error event in the provider's
// shape (OpenAI: a data line with an "error" object; Anthropic: "event:
// error" with overloaded_error), or a connection closed without the usage.
//
// Request headers:
//
//	x-mock-status: 429                answer with this status (2xx answers normally)
//	x-mock-retry-after: 3             retry hint in seconds on a failure
//	x-mock-delay-ms: 250              wait this long before answering
//	x-mock-stream-chunks: 8           content chunks of a streamed answer
//	x-mock-chunk-size: 16             bytes of text in each chunk
//	x-mock-chunk-delay-ms: 100        wait before each chunk
//	x-mock-time-scale: 0.001          multiply every wait (delay and chunk delay)
//	x-mock-stream-error-after: 2      error event after this many chunks (-1 never)
//	x-mock-stream-error-status: 429   the error event's kind (default: overloaded)
//	x-mock-stream-cut-after: 2        close the connection after this many chunks
//
// An error or cut after more chunks than the stream has comes after the
// last chunk, before the usage. A two-minute generation is
// -stream-chunks 1200 -chunk-delay 100ms; a test runs it in 120 ms with
// x-mock-time-scale: 0.001.
//
// Flags set the same for every request (a header wins):
//
//	-addr :8000  -status 429  -fail-rate 0.2  -fail-models gpt-4o,mock-a
//	-retry-after 1  -delay 0s  -seed 1
//	-stream-chunks 8  -chunk-size 16  -chunk-delay 0s  -time-scale 1
//	-stream-error-after -1  -stream-error-status 0  -stream-cut-after -1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}

// shutdownTimeout bounds the drain of in-flight requests at SIGTERM.
const shutdownTimeout = 10 * time.Second

// run serves until ctx ends, then drains and returns. ready, when not nil,
// is called with the listening address once the server accepts requests.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(net.Addr)) error {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           newHandler(cfg, log),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Info("listening", "addr", ln.Addr().String(), "status", cfg.status,
		"fail_rate", cfg.failRate, "fail_models", cfg.failModels)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	log.Info("stopped")
	return err
}
