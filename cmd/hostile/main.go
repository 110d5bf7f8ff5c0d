// Command hostile plays a hostile client against a ratelimit-svc, one
// attack per subcommand, and prints what it saw as one line of JSON.
// scripts/hostile-load.sh runs it against two builds and tables the
// figures side by side.
//
//	hostile codes -addr 127.0.0.1:8081          # answers to a YEAR×100 override, a 4 MiB value, invalid UTF-8
//	hostile flood -addr 127.0.0.1:8081 -d 15s   # unique keys as fast as they are taken
//	hostile conns -http 127.0.0.1:8080 -grpc 127.0.0.1:8081  # idle and slow HTTP connections, then probes
//	hostile body -addr 127.0.0.1:8081           # a 6 MiB buffered ext_proc request body
//	hostile stuck -addr 127.0.0.1:8081          # an ext_proc stream that takes a slot and goes silent
//	hostile rate -addr 127.0.0.1:8081 -d 20s    # a steady load on one key, tallied by the second
//
// Every subcommand stops on its own deadline or on SIGINT/SIGTERM; the
// goroutines it starts end before it returns.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "hostile: %v\n", err)
		os.Exit(1)
	}
}

// commands maps a subcommand to its runner: it parses its own flags and
// returns the result to print.
var commands = map[string]func(ctx context.Context, args []string, stderr io.Writer) (any, error){
	"codes": runCodes,
	"flood": runFlood,
	"conns": runConns,
	"body":  runBody,
	"stuck": runStuck,
	"rate":  runRate,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || commands[args[0]] == nil {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(stderr, "usage: hostile <command> [flags]; commands: %v\n", names)
		return flag.ErrHelp
	}
	res, err := commands[args[0]](ctx, args[1:], stderr)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// newFlags is a subcommand's flag set; errors go to stderr, not exit.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hostile "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// positive checks that a numeric flag is above zero.
func positive[T int | time.Duration](name string, v T) error {
	if v <= 0 {
		return fmt.Errorf("-%s must be positive, got %v", name, v)
	}
	return nil
}

// percentile is the p-th percentile (0–100) of sorted durations, in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return float64(sorted[i].Microseconds()) / 1000
}
