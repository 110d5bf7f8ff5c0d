// Command rlsbench measures an Envoy rate limit service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit): what one
// decision costs in latency and CPU, and whether limits hold under load
// when requests are spread over several replicas.
//
//	rlsbench -addr rls-0:8081,rls-1:8081 -descriptor 'api_key={k}' -keys 50 -c 32 -d 30s
//	rlsbench -addr rls-0:8081 -descriptor 'user={k}' -keys 1000 -zipf 1.1 -limit 10 -per second
//	rlsbench serve-noop -addr :8081
//	rlsbench serve-counter -addr :8081 -redis 127.0.0.1:6379 -limit 10 -per second
//
// serve-noop answers OK to everything, so a run against it gives the
// floor: the cost of a gRPC call that decides nothing. serve-counter
// decides as envoyproxy/ratelimit does on Redis, one INCRBY and EXPIRE per
// descriptor per call (-redis, -limit, -per), the per-request counter
// whose Redis load the credit engine's is measured against.
//
// -zipf draws each request's key from a Zipf law instead of taking keys in
// turn; -limit and -per check every key's answers against its limit, window
// by window.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errNoAnswers is returned when requests were sent but none was answered.
var errNoAnswers = errors.New("no request was answered")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "rlsbench: %v\n", err)
		os.Exit(1)
	}
}

// run executes one command line. Cancelling ctx ends a load run early
// (its report still prints) or shuts the no-op server down.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve-noop" {
		return runNoop(ctx, args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "serve-counter" {
		return runCounter(ctx, args[1:], stderr)
	}
	cfg, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	res, err := runLoad(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	rep := newReport(res)
	if cfg.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeText(stdout, rep)
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if rep.Requests > 0 && rep.OK+rep.OverLimit == 0 {
		return errNoAnswers
	}
	return nil
}
