package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// counterServer decides every descriptor as envoyproxy/ratelimit does
// with its Redis backend: a fixed window counted per request, one
// pipeline of INCRBY and EXPIRE per descriptor, each call, and over the
// limit once the count passes it. It is the per-request counter the
// credit engine's Redis load is measured against (scripts/many-keys.sh):
// one limit for every descriptor, windows by this process's clock.
type counterServer struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	c      *redis.Client
	limit  uint64
	period time.Duration
	now    func() time.Time
}

// ShouldRateLimit implements the RLS v3 decision call.
func (s *counterServer) ShouldRateLimit(ctx context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	ds := req.GetDescriptors()
	hits := uint64(max(req.GetHitsAddend(), 1))
	start := s.now().Truncate(s.period)
	pipe := s.c.Pipeline()
	incrs := make([]*redis.IntCmd, len(ds))
	for i, d := range ds {
		key := counterKey(req.GetDomain(), d.GetEntries(), start)
		incrs[i] = pipe.IncrBy(ctx, key, int64(hits))
		pipe.Expire(ctx, key, s.period)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, status.Errorf(codes.Unavailable, "redis: %v", err)
	}
	resp := &ratelimitv3.RateLimitResponse{OverallCode: ratelimitv3.RateLimitResponse_OK,
		Statuses: make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, len(ds))}
	for i, c := range incrs {
		st := &ratelimitv3.RateLimitResponse_DescriptorStatus{Code: ratelimitv3.RateLimitResponse_OK}
		if uint64(c.Val()) > s.limit {
			st.Code = ratelimitv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = ratelimitv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
	}
	return resp, nil
}

// counterKey is a descriptor's key in the window that starts at start:
// the domain, its entries and the window's Unix second, as
// envoyproxy/ratelimit builds it.
func counterKey(domain string, entries []*rlcommonv3.RateLimitDescriptor_Entry, start time.Time) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('_')
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(e.GetValue())
	}
	b.WriteByte('_')
	b.WriteString(strconv.FormatInt(start.Unix(), 10))
	return b.String()
}

// runCounter serves the per-request counter until ctx is cancelled.
func runCounter(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlsbench serve-counter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":8081", "listen `address`")
	raddr := fs.String("redis", "127.0.0.1:6379", "Redis `address`")
	limit := fs.Uint64("limit", 10, "requests a window admits, every descriptor")
	per := fs.String("per", "second", "the window: second or minute")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve-counter: unexpected argument %q", fs.Arg(0))
	}
	secs, ok := windows[*per]
	if !ok {
		return fmt.Errorf("serve-counter: -per %q: want second or minute", *per)
	}
	period := time.Duration(secs) * time.Second
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve-counter: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: *raddr})
	defer c.Close()
	gs := newRLSGRPCServer(&counterServer{c: c, limit: *limit, period: period, now: time.Now})
	fmt.Fprintf(stderr, "rlsbench: per-request counter RLS listening on %s\n", lis.Addr())
	if err := serveUntilDone(ctx, gs, lis); err != nil {
		return fmt.Errorf("serve-counter: %w", err)
	}
	return nil
}
