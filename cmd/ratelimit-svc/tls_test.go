package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthOver calls gRPC health over creds and returns the call's error.
func healthOver(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err == nil && r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v", r.Status)
	}
	return err
}

// startTLS runs the service with gRPC mTLS from a Secret-like directory
// holding tls.crt, tls.key and ca.crt issued by ca.
func startTLS(t *testing.T, ca *testCA, env map[string]string) (*service, *secretDir) {
	t.Helper()
	sec := &secretDir{dir: t.TempDir()}
	certPEM, keyPEM := ca.issue(t, "ratelimit", true)
	sec.write(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": ca.PEM})
	if env == nil {
		return start(t, "../../config", "--grpc-tls-cert", sec.path("tls.crt"), "--grpc-tls-key", sec.path("tls.key"),
			"--grpc-tls-client-ca", sec.path("ca.crt")), sec
	}
	for k, v := range env {
		env[k] = strings.ReplaceAll(v, "$DIR", sec.dir)
	}
	return startEnv(t, "../../config", env), sec
}

func TestGRPCMutualTLS(t *testing.T) {
	ca, other := newTestCA(t, "ca"), newTestCA(t, "other")
	s, _ := startTLS(t, ca, nil)
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca.clientConfig(t, ca, "envoy"))); err != nil {
		t.Fatalf("a client with a valid certificate: %v", err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"no certificate":            credentials.NewTLS(ca.clientConfig(t, nil, "")),
		"a certificate of other CA": credentials.NewTLS(ca.clientConfig(t, other, "envoy")),
		"plaintext":                 insecure.NewCredentials(),
	} {
		if err := healthOver(t, s.grpcAddr, creds); err == nil {
			t.Errorf("a client with %s was served", name)
		}
	}
}

// TestGRPCTLSFromUpstreamEnvironment: envoyproxy/ratelimit's variables, as
// Envoy Gateway sets them, turn mTLS on; the client SAN is enforced.
func TestGRPCTLSFromUpstreamEnvironment(t *testing.T) {
	ca := newTestCA(t, "ca")
	s, _ := startTLS(t, ca, map[string]string{"GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": "$DIR/tls.crt", "GRPC_SERVER_TLS_KEY": "$DIR/tls.key",
		"GRPC_SERVER_TLS_CA_CERT": "$DIR/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy"})
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca.clientConfig(t, ca, "envoy"))); err != nil {
		t.Fatalf("client named envoy: %v", err)
	}
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca.clientConfig(t, ca, "intruder"))); err == nil {
		t.Fatal("a client not named envoy was served")
	}
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca.clientConfig(t, nil, ""))); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// TestGRPCCertificateRotation: a Secret swapped to a new certificate and
// a new client CA is served without a restart.
func TestGRPCCertificateRotation(t *testing.T) {
	ca1, ca2 := newTestCA(t, "ca1"), newTestCA(t, "ca2")
	s, sec := startTLS(t, ca1, nil)
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca1.clientConfig(t, ca1, "envoy"))); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := ca2.issue(t, "ratelimit-2", true)
	sec.write(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": ca2.PEM})
	deadline := time.Now().Add(15 * time.Second) // checked at most once a second
	for {
		leaf := serverLeaf(t, s.grpcAddr, ca2.clientConfig(t, ca2, "envoy"))
		if leaf != nil && leaf.Subject.CommonName == "ratelimit-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving %v after the swap", leaf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca2.clientConfig(t, ca2, "envoy"))); err != nil {
		t.Fatalf("after rotation, a client of the new CA: %v", err)
	}
	if err := healthOver(t, s.grpcAddr, credentials.NewTLS(ca1.clientConfig(t, ca1, "envoy"))); err == nil {
		t.Fatal("after rotation, a client of the old CA was served")
	}
}

// serverLeaf dials with c (chain checked against c's roots) and returns
// the server's certificate, or nil when the handshake fails.
func serverLeaf(t *testing.T, addr string, c *tls.Config) *x509.Certificate {
	t.Helper()
	c.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestCertReloaderKeepsLastGood: files that stop loading keep the last
// certificate.
func TestCertReloaderKeepsLastGood(t *testing.T) {
	ca := newTestCA(t, "ca")
	sec := &secretDir{dir: t.TempDir()}
	certPEM, keyPEM := ca.issue(t, "one", true)
	sec.write(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM})
	now := time.Unix(1000, 0)
	r, err := newCertReloader(grpcTLS{Cert: sec.path("tls.crt"), Key: sec.path("tls.key")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.now, r.checked = func() time.Time { return now }, now
	sec.write(t, map[string][]byte{"tls.crt": []byte("not PEM"), "tls.key": keyPEM})
	now = now.Add(2 * time.Second)
	c, _ := r.configForClient(nil)
	if cn := leafCN(t, c); cn != "one" {
		t.Fatalf("after a bad swap: serving %q", cn)
	}
	certPEM, keyPEM = ca.issue(t, "two", true)
	sec.write(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM})
	now = now.Add(500 * time.Millisecond) // within a second of the last look
	if c, _ := r.configForClient(nil); leafCN(t, c) != "one" {
		t.Fatal("the files were looked at again within a second")
	}
	now = now.Add(time.Second)
	if c, _ := r.configForClient(nil); leafCN(t, c) != "two" {
		t.Fatal("the good swap was not picked up")
	}
}

func leafCN(t *testing.T, c *tls.Config) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

func TestGRPCTLSBadFilesFailAtStart(t *testing.T) {
	err := run(t.Context(), []string{"--config", "../../config", "--grpc-tls-cert", "/nonexistent/tls.crt", "--grpc-tls-key", "/nonexistent/tls.key",
		"--grpc-addr", freeAddr(t), "--http-addr", freeAddr(t)}, envOf(nil), new(syncWriterNop), new(syncWriterNop))
	if err == nil || !strings.Contains(err.Error(), "--grpc-tls-cert: ") {
		t.Fatalf("run: %v", err)
	}
}

type syncWriterNop struct{}

func (syncWriterNop) Write(p []byte) (int, error) { return len(p), nil }
