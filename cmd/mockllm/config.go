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
}

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
	return c, errors.Join(errs...)
}
