package xdstest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is go-control-plane's ADS server over mTLS on a loopback port,
// with a snapshot cache, recording what its clients send.
type Server struct {
	// Addr is the host:port it listens on.
	Addr string

	cache  cachev3.SnapshotCache
	grpc   *grpc.Server
	done   chan struct{}
	once   sync.Once
	opened atomic.Int32 // streams that reached the ADS handler

	mu     sync.Mutex
	md     metadata.MD // of the last stream opened
	reqs   []*discovery.DiscoveryRequest
	nonces map[string]string // version_info → nonce of the last response with it
}

// Start serves on addr ("127.0.0.1:0" for a fresh port) with the
// server certificate of p, requiring a client certificate p's CA signed,
// until the test ends or Stop is called.
func Start(tb testing.TB, p *PKI, addr string) *Server {
	tb.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		done: make(chan struct{}), nonces: map[string]string{}}
	s.grpc = grpc.NewServer(grpc.Creds(credentials.NewTLS(p.serverTLS())))
	ctx, cancel := context.WithCancel(context.Background())
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(ctx, s.cache, s.callbacks()))
	go func() {
		defer close(s.done)
		s.grpc.Serve(lis)
	}()
	tb.Cleanup(func() { cancel(); s.Stop() })
	return s
}

func (s *Server) callbacks() serverv3.CallbackFuncs {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			s.opened.Add(1)
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.md = md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reqs = append(s.reqs, req)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.nonces[resp.GetVersionInfo()] = resp.GetNonce()
		},
	}
}

// Stop closes the listener and every stream at once; it may be called
// more than once.
func (s *Server) Stop() {
	s.once.Do(s.grpc.Stop)
	<-s.done
}

// Set publishes a snapshot of resources, as version, for node.
func (s *Server) Set(tb testing.TB, node, version string, res ...*rlsconf.RateLimitConfig) {
	tb.Helper()
	rs := make([]cachetypes.Resource, len(res))
	for i, r := range res {
		rs[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]cachetypes.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		tb.Fatal(err)
	}
}

// Requests returns what the clients sent so far.
func (s *Server) Requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.reqs...)
}

// Nonce is the nonce of the last response carrying version.
func (s *Server) Nonce(version string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nonces[version]
}

// Opened counts the streams that reached the ADS handler.
func (s *Server) Opened() int { return int(s.opened.Load()) }

// Metadata is the gRPC metadata of the last stream opened.
func (s *Server) Metadata() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.md.Copy()
}

// Find returns the first request matching ok, waiting up to timeout.
func (s *Server) Find(tb testing.TB, timeout time.Duration, what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	tb.Helper()
	var found *discovery.DiscoveryRequest
	Eventually(tb, timeout, what, func() bool {
		for _, r := range s.Requests() {
			if ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// Eventually polls cond every few milliseconds until it holds, and fails
// the test when timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
