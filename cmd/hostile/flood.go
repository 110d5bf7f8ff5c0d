package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// floodConfig is one key flood: first Big requests of one huge unique
// value each under a YEAR×100 override, then unique small keys, PerReq
// to a request, from C callers until D has passed or Keys were sent.
type floodConfig struct {
	addr, domain, key  string
	perReq, valueBytes int
	keys               int
	d, timeout         time.Duration
	c                  int
	big, bigBytes      int
}

// tally counts answers by name; safe for concurrent use.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (t *tally) add(name string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int{}
	}
	t.m[name] += n
}

func (t *tally) counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out
}

// floodResult is what a flood sent and what it was answered.
type floodResult struct {
	Big      map[string]int `json:"big_answers"`
	BigBytes int            `json:"big_value_bytes"`
	Requests int64          `json:"requests"`
	KeysSent int64          `json:"keys_sent"`
	Answers  map[string]int `json:"answers"`
	Seconds  float64        `json:"seconds"`
}

func parseFlood(args []string, stderr io.Writer) (floodConfig, error) {
	var c floodConfig
	fs := newFlags("flood", stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "gRPC address")
	fs.StringVar(&c.domain, "domain", "hostile", "RLS domain")
	fs.StringVar(&c.key, "key", "flood", "descriptor key of the small keys")
	fs.IntVar(&c.perReq, "per-request", 50, "descriptors (unique keys) per request")
	fs.IntVar(&c.valueBytes, "value-bytes", 32, "bytes of each small key's value")
	fs.IntVar(&c.keys, "keys", 0, "stop after this many small keys; 0: run for -d")
	fs.DurationVar(&c.d, "d", 15*time.Second, "how long the small keys are sent")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline of each call")
	fs.IntVar(&c.c, "c", 8, "concurrent callers")
	fs.IntVar(&c.big, "big", 100, "requests with one huge unique value and a YEAR×100 override, sent first")
	fs.IntVar(&c.bigBytes, "big-bytes", 4<<20-64<<10, "bytes of each huge value")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for name, v := range map[string]int{"per-request": c.perReq, "value-bytes": c.valueBytes, "c": c.c, "big-bytes": c.bigBytes} {
		if err := positive(name, v); err != nil {
			return c, err
		}
	}
	if c.keys < 0 || c.big < 0 {
		return c, fmt.Errorf("-keys and -big must not be negative, got %d and %d", c.keys, c.big)
	}
	return c, positive("d", c.d)
}

func runFlood(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	cfg, err := parseFlood(args, stderr)
	if err != nil {
		return nil, err
	}
	cc, err := dial(cfg.addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := ratelimitv3.NewRateLimitServiceClient(cc)
	res := floodResult{BigBytes: cfg.bigBytes}
	start := time.Now()
	res.Big = floodBig(ctx, client, cfg)
	var small tally
	res.Requests, res.KeysSent = floodSmall(ctx, client, cfg, &small)
	res.Answers = small.counts()
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// floodBig sends cfg.big requests, four at a time, each with its own huge
// value under a YEAR×100 override.
func floodBig(ctx context.Context, c ratelimitv3.RateLimitServiceClient, cfg floodConfig) map[string]int {
	var t tally
	var next atomic.Int64
	var wg sync.WaitGroup
	pad := strings.Repeat("b", cfg.bigBytes)
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(cfg.big) && ctx.Err() == nil; i = next.Add(1) {
				v := fmt.Sprintf("%d-", i) + pad[len(fmt.Sprint(i))+1:]
				d := entries("hostile", v)
				d.Limit = yearsOverride()
				cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
				t.add(answer(c.ShouldRateLimit(cctx, &ratelimitv3.RateLimitRequest{Domain: cfg.domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{d}})), 1)
				cancel()
			}
		})
	}
	wg.Wait()
	return t.counts()
}

// floodSmall sends unique small keys from cfg.c callers until cfg.d has
// passed or cfg.keys were sent; it returns the requests and keys sent.
func floodSmall(ctx context.Context, c ratelimitv3.RateLimitServiceClient, cfg floodConfig, t *tally) (int64, int64) {
	ctx, cancel := context.WithTimeout(ctx, cfg.d)
	defer cancel()
	var next, reqs atomic.Int64
	var wg sync.WaitGroup
	for range cfg.c {
		wg.Go(func() {
			for ctx.Err() == nil {
				first := (next.Add(1) - 1) * int64(cfg.perReq)
				if cfg.keys > 0 && first >= int64(cfg.keys) {
					return
				}
				req := &ratelimitv3.RateLimitRequest{Domain: cfg.domain}
				for j := range int64(cfg.perReq) {
					req.Descriptors = append(req.Descriptors, entries(cfg.key, fmt.Sprintf("%0*d", cfg.valueBytes, first+j)))
				}
				cctx, ccancel := context.WithTimeout(ctx, cfg.timeout)
				resp, err := c.ShouldRateLimit(cctx, req)
				ccancel()
				if err != nil && ctx.Err() != nil {
					return // the run ended mid-call
				}
				reqs.Add(1)
				t.add(answer(resp, err), 1)
			}
		})
	}
	wg.Wait()
	return reqs.Load(), reqs.Load() * int64(cfg.perReq)
}
