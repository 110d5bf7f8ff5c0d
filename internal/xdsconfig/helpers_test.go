package xdsconfig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
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
	"google.golang.org/protobuf/types/known/structpb"
)

// serverName is the DNS name in the test server's certificate.
const serverName = "xds.test"

// pki is a throwaway CA with a server and a client certificate, and a
// second CA that signed neither, all as PEM files.
type pki struct {
	caFile, otherCAFile   string
	serverCert, serverKey string
	clientCert, clientKey string
	caPool                *x509.CertPool
	serverPair            tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{}
	ca, caKey := newCA(t, "test CA")
	other, _ := newCA(t, "other CA")
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	p.otherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	p.serverCert, p.serverKey = issue(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth, serverName)
	p.clientCert, p.clientKey = issue(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth, "")
	pair, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	p.serverPair = pair
	return p
}

var serial atomic.Int64

func template(cn string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func newCA(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := template(cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue signs a leaf certificate and writes it and its key; dnsName, when
// set, is its only SAN.
func issue(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey,
	usage x509.ExtKeyUsage, dnsName string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := template(name)
	tpl.KeyUsage = x509.KeyUsageDigitalSignature
	tpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if dnsName != "" {
		tpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// xdsServer is go-control-plane's ADS server over mTLS on a loopback
// port, with a snapshot cache, recording what the client sends.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	grpc  *grpc.Server
	done  chan struct{}

	opened atomic.Int32 // streams that reached the ADS handler
	mu     sync.Mutex
	md     metadata.MD // of the last stream opened
	reqs   []*discovery.DiscoveryRequest
	nonces map[string]string // version_info → nonce of the last response with it
}

// startServer serves on addr ("127.0.0.1:0" for a fresh port) until the
// test ends or stop is called.
func startServer(t *testing.T, p *pki, addr string) *xdsServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &xdsServer{addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		done: make(chan struct{}), nonces: map[string]string{}}
	cb := serverv3.CallbackFuncs{
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
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.serverPair},
		ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert})
	s.grpc = grpc.NewServer(grpc.Creds(creds))
	ctx, cancel := context.WithCancel(context.Background())
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(ctx, s.cache, cb))
	go func() {
		defer close(s.done)
		s.grpc.Serve(lis)
	}()
	t.Cleanup(func() { cancel(); s.stop() })
	return s
}

// stop closes the listener and every stream at once.
func (s *xdsServer) stop() {
	s.grpc.Stop()
	<-s.done
}

// set publishes a snapshot of resources for node.
func (s *xdsServer) set(t *testing.T, node, version string, res ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]cachetypes.Resource, len(res))
	for i, r := range res {
		rs[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]cachetypes.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// requests returns what the client sent so far.
func (s *xdsServer) requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.reqs...)
}

// nonce is the nonce of the last response carrying version.
func (s *xdsServer) nonce(version string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nonces[version]
}

// find returns the first request matching ok, waiting up to 5 s.
func (s *xdsServer) find(t *testing.T, what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	var found *discovery.DiscoveryRequest
	eventually(t, 5*time.Second, what, func() bool {
		for _, r := range s.requests() {
			if ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testNode is the node id every test client uses.
const testNode = "node-1"

// clientOptions connects over mTLS to s with fast backoff.
func clientOptions(t *testing.T, p *pki, s *xdsServer) Options {
	return Options{
		ServerURL: s.addr, NodeID: testNode, NodeMetadata: map[string]string{"cluster": "edge", "zone": "a"},
		Headers: map[string]string{"x-tenant": "t1"},
		UseTLS:  true, ClientCert: p.clientCert, ClientKey: p.clientKey, CACert: p.caFile, ServerSAN: serverName,
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
