package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// noopCachedStatuses is how many descriptors the no-op server has
// prebuilt answers for; larger requests get an answer built per call.
const noopCachedStatuses = 16

// stopGrace bounds how long the no-op server waits for in-flight calls
// on shutdown before it closes every connection.
const stopGrace = 5 * time.Second

// noopServer answers every ShouldRateLimit call with OK and one OK status
// per descriptor, without any limit. It is the floor a real service is
// measured against: the cost of a gRPC call that decides nothing.
type noopServer struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	// answers[n] is the shared, read-only answer for n descriptors.
	answers [noopCachedStatuses + 1]*ratelimitv3.RateLimitResponse
}

var _ ratelimitv3.RateLimitServiceServer = (*noopServer)(nil)

func newNoopServer() *noopServer {
	s := &noopServer{}
	for n := range s.answers {
		s.answers[n] = okAnswer(n)
	}
	return s
}

// ShouldRateLimit implements the RLS v3 decision call.
func (s *noopServer) ShouldRateLimit(_ context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	n := len(req.GetDescriptors())
	if n < len(s.answers) {
		return s.answers[n], nil
	}
	return okAnswer(n), nil
}

func okAnswer(n int) *ratelimitv3.RateLimitResponse {
	resp := &ratelimitv3.RateLimitResponse{
		OverallCode: ratelimitv3.RateLimitResponse_OK,
		Statuses:    make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, n),
	}
	for i := range resp.Statuses {
		resp.Statuses[i] = &ratelimitv3.RateLimitResponse_DescriptorStatus{Code: ratelimitv3.RateLimitResponse_OK}
	}
	return resp
}

// newNoopGRPCServer returns a gRPC server with the no-op RLS and a health
// service reporting SERVING.
func newNoopGRPCServer() *grpc.Server { return newRLSGRPCServer(newNoopServer()) }

// newRLSGRPCServer returns a gRPC server with rls and a health service
// reporting SERVING: the no-op's and the per-request counter's.
func newRLSGRPCServer(rls ratelimitv3.RateLimitServiceServer) *grpc.Server {
	// The same stream-worker pool as ratelimit-svc (16 per core), so the
	// floor is the same gRPC server doing nothing.
	gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(16 * runtime.GOMAXPROCS(0))))
	ratelimitv3.RegisterRateLimitServiceServer(gs, rls)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ratelimitv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	return gs
}

// runNoop serves the no-op RLS until ctx is cancelled.
func runNoop(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlsbench serve-noop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":8081", "listen `address`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve-noop: unexpected argument %q", fs.Arg(0))
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve-noop: %w", err)
	}
	fmt.Fprintf(stderr, "rlsbench: no-op RLS listening on %s\n", lis.Addr())
	if err := serveUntilDone(ctx, newNoopGRPCServer(), lis); err != nil {
		return fmt.Errorf("serve-noop: %w", err)
	}
	return nil
}

// serveUntilDone runs gs on lis until ctx is cancelled, then stops it
// gracefully, forcing the stop after stopGrace.
func serveUntilDone(ctx context.Context, gs *grpc.Server, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		gs.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
