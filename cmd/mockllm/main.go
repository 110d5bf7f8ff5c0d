// Command mockllm is a small OpenAI-style upstream for demos and tests.
//
// POST /v1/chat/completions answers a chat completion with a usage block.
// It can be told to fail, per request with headers or for every request
// with flags, and then answers like a provider does: an OpenAI error body
// and the retry hints providers send (retry-after, retry-after-ms,
// x-ratelimit-reset-requests).
//
// Request headers:
//
//	x-mock-status: 429        answer with this status (2xx answers normally)
//	x-mock-retry-after: 3     retry hint in seconds on a failure
//	x-mock-delay-ms: 250      wait this long before answering
//
// Flags set the same for every request (a header wins):
//
//	-addr :8000  -status 429  -fail-rate 0.2  -fail-models gpt-4o,mock-a
//	-retry-after 1  -delay 0s  -seed 1
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
