package xdsconfig

import (
	"context"
	"log/slog"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig/xdstest"
)

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	xdstest.Eventually(t, timeout, what, cond)
}

// find returns the first request s received matching ok, waiting up to 5 s.
func find(t *testing.T, s *xdstest.Server, what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	return s.Find(t, 5*time.Second, what, ok)
}

// testNode is the node id every test client uses.
const testNode = "node-1"

// clientOptions connects over mTLS to s with fast backoff.
func clientOptions(t *testing.T, p *xdstest.PKI, s *xdstest.Server) Options {
	return Options{
		ServerURL: s.Addr, NodeID: testNode, NodeMetadata: map[string]string{"cluster": "edge", "zone": "a"},
		Headers: map[string]string{"x-tenant": "t1"},
		UseTLS:  true, ClientCert: p.ClientCert, ClientKey: p.ClientKey, CACert: p.CAFile, ServerSAN: xdstest.ServerName,
		InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// running is a client whose Run goroutine the test owns.
type running struct {
	*Client
	updates chan Update
}

// startClient runs a client until the test ends; every Update lands on
// updates.
func startClient(t *testing.T, o Options) *running {
	t.Helper()
	r := &running{updates: make(chan Update, 64)}
	o.OnUpdate = func(u Update) { r.updates <- u }
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.Client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after its context ended")
		}
	})
	return r
}

// next waits for the update of version, skipping others.
func (r *running) next(t *testing.T, version string) Update {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case u := <-r.updates:
			if u.VersionInfo == version {
				return u
			}
		case <-timeout:
			t.Fatalf("no update for version %q", version)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// Resource builders.

func config(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

func desc(key, value string, limit *rlsconf.RateLimitPolicy, kids ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, Value: value, RateLimit: limit, Descriptors: kids}
}

func limit(rpu uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{RequestsPerUnit: rpu, Unit: unit}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
