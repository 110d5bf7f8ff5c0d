package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestNoopAnswers(t *testing.T) {
	addr := serveLoopback(t, newNoopGRPCServer())
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := ratelimitv3.NewRateLimitServiceClient(cc)

	for _, n := range []int{0, 1, 3, noopCachedStatuses, noopCachedStatuses + 5} {
		req := &ratelimitv3.RateLimitRequest{Domain: "d"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{
				Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: strings.Repeat("v", i)}},
			})
		}
		resp, err := client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatalf("%d descriptors: %v", n, err)
		}
		if resp.GetOverallCode() != ratelimitv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
			t.Fatalf("%d descriptors: overall %v with %d statuses", n, resp.GetOverallCode(), len(resp.GetStatuses()))
		}
		for i, s := range resp.GetStatuses() {
			if s.GetCode() != ratelimitv3.RateLimitResponse_OK || s.GetCurrentLimit() != nil {
				t.Errorf("%d descriptors: status %d = %v, want OK with no limit", n, i, s)
			}
		}
	}

	hc := healthpb.NewHealthClient(cc)
	for _, name := range []string{"", ratelimitv3.RateLimitService_ServiceDesc.ServiceName} {
		h, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", name, h.GetStatus(), err)
		}
	}
}

// TestServeNoopCommand runs "serve-noop" as a command, benches it through
// the command line, then stops it as a signal would.
func TestServeNoopCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, []string{"serve-noop", "-addr", "127.0.0.1:0"}, io.Discard, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("serve-noop printed nothing: %v", <-served)
	}
	_, addr, ok := strings.Cut(lines.Text(), "listening on ")
	if !ok {
		t.Fatalf("unexpected first line %q", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	rep := benchJSON(t, "-addr", addr, "-n", "500", "-c", "8", "-descriptor", "generic_key=llm,api_key={k};user={k}")
	if rep.OK != 500 || rep.Malformed != 0 || rep.Errors != 0 {
		t.Errorf("ok %d malformed %d errors %d, want 500/0/0", rep.OK, rep.Malformed, rep.Errors)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("serve-noop returned %v after cancel, want nil", err)
	}
}
