package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	ratelimitcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

// connsConfig is one connection flood: Idle connections that send
// nothing and Slow ones that send a request's headers a line a second,
// each opened again when the server closes it, held on the HTTP port;
// after Warm, Probes ShouldRateLimit calls each on a new gRPC connection
// and as many /healthcheck GETs each on a new HTTP connection.
type connsConfig struct {
	http, grpc, domain string
	idle, slow, probes int
	warm, timeout      time.Duration
}

// connsResult is what the probes saw while the connections were held.
type connsResult struct {
	Held      int64          `json:"held"`
	Reopened  int64          `json:"reopened"`
	GRPC      map[string]int `json:"grpc_answers"`
	P50ms     float64        `json:"grpc_p50_ms"`
	P99ms     float64        `json:"grpc_p99_ms"`
	Health    map[string]int `json:"healthcheck_answers"`
	TimeoutMs int64          `json:"probe_timeout_ms"`
}

func runConns(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	var c connsConfig
	fs := newFlags("conns", stderr)
	fs.StringVar(&c.http, "http", "127.0.0.1:8080", "HTTP address flooded and probed")
	fs.StringVar(&c.grpc, "grpc", "127.0.0.1:8081", "gRPC address probed")
	fs.StringVar(&c.domain, "domain", "hostile", "RLS domain of the probes")
	fs.IntVar(&c.idle, "idle", 300, "idle connections held")
	fs.IntVar(&c.slow, "slow", 30, "slow connections held (a header line a second)")
	fs.IntVar(&c.probes, "probes", 40, "gRPC calls and /healthcheck GETs probed")
	fs.DurationVar(&c.warm, "warm", 3*time.Second, "how long the connections are held before probing")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "deadline of each probe")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := positive("probes", c.probes); err != nil {
		return nil, err
	}
	if err := positive("timeout", c.timeout); err != nil {
		return nil, err
	}
	hctx, stop := context.WithCancel(ctx)
	var held, reopened atomic.Int64
	var wg sync.WaitGroup
	for i := range c.idle + c.slow {
		wg.Go(func() { holdConn(hctx, c.http, i >= c.idle, &held, &reopened) })
	}
	defer func() { stop(); wg.Wait() }()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.warm):
	}
	res := connsResult{Held: held.Load(), TimeoutMs: c.timeout.Milliseconds()}
	var pw sync.WaitGroup
	pw.Go(func() { res.GRPC, res.P50ms, res.P99ms = probeGRPC(ctx, c) })
	pw.Go(func() { res.Health = probeHealth(ctx, c) })
	pw.Wait()
	res.Reopened = reopened.Load()
	return res, nil
}

// holdConn keeps one connection to addr open until ctx ends, opening it
// again 100 ms after the server closes it. A slow one writes a request
// line and then a header line a second, never ending the headers.
func holdConn(ctx context.Context, addr string, slow bool, held, reopened *atomic.Int64) {
	var d net.Dialer
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			reopened.Add(1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		held.Add(1)
		stopClose := context.AfterFunc(ctx, func() { conn.Close() })
		if slow {
			dribble(ctx, conn)
		} else {
			_, _ = io.Copy(io.Discard, conn) // until the server closes it or ctx ends
		}
		stopClose()
		conn.Close()
		held.Add(-1)
	}
}

// dribble sends a request's headers one line a second until a write
// fails or ctx ends.
func dribble(ctx context.Context, conn net.Conn) {
	if _, err := io.WriteString(conn, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n"); err != nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := fmt.Fprintf(conn, "X-Slow-%d: 1\r\n", i); err != nil {
			return
		}
	}
}

// probeWorkers is how many probes of a kind run at once.
const probeWorkers = 4

// probeEach runs probe n times, probeWorkers at a time, and counts the
// names it returns.
func probeEach(n int, probe func() string) map[string]int {
	var t tally
	var next atomic.Int64
	var wg sync.WaitGroup
	for range probeWorkers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				t.add(probe(), 1)
			}
		})
	}
	wg.Wait()
	return t.counts()
}

// probeGRPC makes c.probes ShouldRateLimit calls, each on a connection
// of its own, and returns their answers and latency percentiles (a
// failed call counts at the time it failed).
func probeGRPC(ctx context.Context, c connsConfig) (map[string]int, float64, float64) {
	var mu sync.Mutex
	var lat []time.Duration
	req := &ratelimitv3.RateLimitRequest{Domain: c.domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{entries("hostile", "probe")}}
	answers := probeEach(c.probes, func() string {
		cc, err := dial(c.grpc)
		if err != nil {
			return "dial failed"
		}
		defer cc.Close()
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		t0 := time.Now()
		_, err = ratelimitv3.NewRateLimitServiceClient(cc).ShouldRateLimit(cctx, req)
		mu.Lock()
		lat = append(lat, time.Since(t0))
		mu.Unlock()
		return status.Code(err).String()
	})
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return answers, percentile(lat, 50), percentile(lat, 99)
}

// probeHealth GETs /healthcheck c.probes times, each on a new connection.
func probeHealth(ctx context.Context, c connsConfig) map[string]int {
	client := &http.Client{Timeout: c.timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	return probeEach(c.probes, func() string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.http+"/healthcheck", nil)
		if err != nil {
			return "bad request"
		}
		resp, err := client.Do(req)
		if err != nil {
			return "no answer"
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Sprint(resp.StatusCode)
	})
}
