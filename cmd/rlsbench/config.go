package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// benchConfig is the parsed command line of a load run.
type benchConfig struct {
	addrs       []string
	conns       int // connections per address
	domain      string
	descriptor  string
	keys        int
	zipf        float64 // exponent of the key draw; 0: keys in turn
	seed        uint64  // seed of the key draw
	hits        uint32
	concurrency int
	duration    time.Duration // 0: no time bound (count must be set)
	count       int64         // 0: no count bound
	rate        float64       // requests/s; 0 means closed loop
	timeout     time.Duration // per request
	pids        []int
	json        bool
	progress    bool
	limit       uint64 // per-key limit the answers are checked against; 0: no check
	window      int64  // the limit's window in seconds
}

// windows are the -per values: a limit's window length in seconds.
var windows = map[string]int64{"second": 1, "minute": 60}

// defaultDuration applies when neither -d nor -n is given.
const defaultDuration = 10 * time.Second

func parseBenchFlags(args []string, stderr io.Writer) (benchConfig, error) {
	var cfg benchConfig
	var addrs, pids, per string
	var hits uint
	fs := flag.NewFlagSet("rlsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { benchUsage(fs) }
	fs.StringVar(&addrs, "addr", "127.0.0.1:8081", "RLS `addresses`, comma separated; requests go round-robin over them")
	fs.IntVar(&cfg.conns, "conns", 1, "gRPC connections per address")
	fs.StringVar(&cfg.domain, "domain", "rlsbench", "rate limit domain")
	fs.StringVar(&cfg.descriptor, "descriptor", "api_key={k}", "descriptor `template`: k=v,k=v per descriptor, ';' between descriptors, {k} is the key index")
	fs.IntVar(&cfg.keys, "keys", 100, "number of distinct keys ({k} runs over 0..keys-1)")
	fs.Float64Var(&cfg.zipf, "zipf", 0, "draw each request's key from a Zipf distribution with exponent `s` > 1 over 0..keys-1, key 0 the most popular (0: keys in turn)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the -zipf draw; worker i draws from its own stream (seed, i)")
	fs.UintVar(&hits, "hits", 1, "hits_addend of each request (0 leaves it unset)")
	fs.IntVar(&cfg.concurrency, "c", 16, "concurrent workers (with -rate: most requests in flight)")
	fs.DurationVar(&cfg.duration, "d", 0, "run `duration` (default 10s unless -n is set)")
	fs.Int64Var(&cfg.count, "n", 0, "total requests to send (0: bounded by -d only)")
	fs.Float64Var(&cfg.rate, "rate", 0, "open-loop pacing in requests/s; latency then counts from the scheduled send time (0: closed loop)")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "per-request timeout")
	fs.StringVar(&pids, "pids", "", "comma-separated `PIDs` whose CPU time is measured over the run")
	fs.BoolVar(&cfg.json, "json", false, "print the report as JSON")
	fs.BoolVar(&cfg.progress, "progress", false, "print a progress line every second to stderr")
	fs.Uint64Var(&cfg.limit, "limit", 0, "per-key limit `N` to check the answers against: count keys admitted more than N in a window, and keys denied in a window in which they were sent at most N (0: no check)")
	fs.StringVar(&per, "per", "second", "window of -limit: second or minute (Unix-aligned, by send time)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.addrs = splitList(addrs)
	var err error
	if cfg.pids, err = parsePIDs(pids); err != nil {
		return cfg, err
	}
	if hits > math.MaxUint32 {
		return cfg, fmt.Errorf("-hits %d exceeds %d", hits, uint32(math.MaxUint32))
	}
	cfg.hits = uint32(hits)
	var ok bool
	if cfg.window, ok = windows[per]; !ok {
		return cfg, fmt.Errorf("-per must be second or minute, got %q", per)
	}
	if cfg.duration == 0 && cfg.count == 0 {
		cfg.duration = defaultDuration
	}
	return cfg, cfg.validate()
}

func (c benchConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(len(c.addrs) > 0, "-addr: no address")
	check(c.conns >= 1, "-conns must be at least 1, got %d", c.conns)
	check(c.domain != "", "-domain must not be empty")
	check(c.keys >= 1, "-keys must be at least 1, got %d", c.keys)
	check(c.zipf == 0 || (c.zipf > 1 && !math.IsInf(c.zipf, 0)), "-zipf must be 0 or a finite number > 1, got %g", c.zipf)
	check(c.concurrency >= 1, "-c must be at least 1, got %d", c.concurrency)
	check(c.duration >= 0, "-d must not be negative")
	check(c.count >= 0, "-n must not be negative")
	check(c.rate >= 0 && !math.IsInf(c.rate, 0) && !math.IsNaN(c.rate), "-rate must be a finite number >= 0")
	check(c.timeout > 0, "-timeout must be positive")
	if _, err := parseDescriptor(c.descriptor); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parsePIDs(s string) ([]int, error) {
	var pids []int
	for _, part := range splitList(s) {
		pid, err := strconv.Atoi(part)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-pids: %q is not a process id", part)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

func benchUsage(fs *flag.FlagSet) {
	out := fs.Output()
	fmt.Fprint(out, `Usage:
  rlsbench [flags]                 drive an Envoy RLS v3 server and report cost and accuracy
  rlsbench serve-noop [-addr :8081] run a no-op RLS server (every descriptor OK), the floor to compare with

Flags:
`)
	fs.PrintDefaults()
}
