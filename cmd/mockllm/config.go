package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	addr       string
	status     int             // the status of an injected failure
	failRate   float64         // share of requests that fail, 0..1
	failModels map[string]bool // models whose every request fails
	retryAfter int             // retry hint on a failure, in seconds; 0 = none
	delay      time.Duration   // added before every answer
	seed       uint64          // seeds -fail-rate; 0 = random

	// Streamed answers ("stream": true).
	streamChunks int           // content chunks of a streamed answer
	chunkSize    int           // bytes of text in each chunk
	chunkDelay   time.Duration // wait before each chunk
	timeScale    float64       // multiplies every wait (-delay, -chunk-delay)
	errorAfter   int           // error event after this many chunks; -1 = never
	errorStatus  int           // the error event's kind, as a status; 0 = the provider's overload
	cutAfter     int           // connection closed after this many chunks; -1 = never
}

// Bounds of the stream settings.
const (
	maxChunks    = 1_000_000
	maxChunkSize = 1 << 20
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var models string
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", ":8000", "listen address")
	fs.IntVar(&c.status, "status", 429, "status of an injected failure (400-599)")
	fs.Float64Var(&c.failRate, "fail-rate", 0, "share of requests that fail with -status, 0..1")
	fs.StringVar(&models, "fail-models", "", "comma-separated models whose every request fails with -status")
	fs.IntVar(&c.retryAfter, "retry-after", 1, "retry hint on a failure, in seconds (0 = none)")
	fs.DurationVar(&c.delay, "delay", 0, "delay before every answer")
	fs.Uint64Var(&c.seed, "seed", 0, "seed for -fail-rate (0 = random)")
	fs.IntVar(&c.streamChunks, "stream-chunks", 8, "content chunks of a streamed answer")
	fs.IntVar(&c.chunkSize, "chunk-size", 16, "bytes of text in each streamed chunk")
	fs.DurationVar(&c.chunkDelay, "chunk-delay", 0, "wait before each streamed chunk")
	fs.Float64Var(&c.timeScale, "time-scale", 1, "multiplies every wait: -delay and -chunk-delay (0.01 runs 100 times faster)")
	fs.IntVar(&c.errorAfter, "stream-error-after", -1, "send an error event after this many chunks (-1 = never)")
	fs.IntVar(&c.errorStatus, "stream-error-status", 0, "kind of the error event, as a status: 429, 500, 503, 529 (0 = overloaded)")
	fs.IntVar(&c.cutAfter, "stream-cut-after", -1, "close the connection after this many chunks, without the usage (-1 = never)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.failModels = map[string]bool{}
	for m := range strings.SplitSeq(models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.failModels[m] = true
		}
	}
	var errs []error
	if c.status < 400 || c.status > 599 {
		errs = append(errs, fmt.Errorf("-status %d: want 400-599", c.status))
	}
	if !(c.failRate >= 0 && c.failRate <= 1) {
		errs = append(errs, fmt.Errorf("-fail-rate %v: want 0..1", c.failRate))
	}
	if c.retryAfter < 0 {
		errs = append(errs, errors.New("-retry-after must not be negative"))
	}
	if c.delay < 0 {
		errs = append(errs, errors.New("-delay must not be negative"))
	}
	errs = append(errs, c.validateStream()...)
	return c, errors.Join(errs...)
}

func (c *config) validateStream() []error {
	var errs []error
	if c.streamChunks < 0 || c.streamChunks > maxChunks {
		errs = append(errs, fmt.Errorf("-stream-chunks %d: want 0-%d", c.streamChunks, maxChunks))
	}
	if c.chunkSize < 1 || c.chunkSize > maxChunkSize {
		errs = append(errs, fmt.Errorf("-chunk-size %d: want 1-%d", c.chunkSize, maxChunkSize))
	}
	if c.chunkDelay < 0 {
		errs = append(errs, errors.New("-chunk-delay must not be negative"))
	}
	if !(c.timeScale >= 0 && c.timeScale <= 1e6) {
		errs = append(errs, fmt.Errorf("-time-scale %v: want 0..1e6", c.timeScale))
	}
	if c.errorAfter < -1 {
		errs = append(errs, fmt.Errorf("-stream-error-after %d: want -1 (never) or more", c.errorAfter))
	}
	if c.errorStatus != 0 && (c.errorStatus < 400 || c.errorStatus > 599) {
		errs = append(errs, fmt.Errorf("-stream-error-status %d: want 0 or 400-599", c.errorStatus))
	}
	if c.cutAfter < -1 {
		errs = append(errs, fmt.Errorf("-stream-cut-after %d: want -1 (never) or more", c.cutAfter))
	}
	return errs
}
