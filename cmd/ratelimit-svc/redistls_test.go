package main

import (
	"context"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
)

// tlsRedis is a real redis-server with a TLS port that requires client
// certificates of ca, and the files a client needs.
type tlsRedis struct {
	addr                  string // the TLS port, 127.0.0.1:port
	clientCert, clientKey string
	ca                    string
	otherCA               string // an authority Redis's certificate does not chain to
}

// startTLSRedis starts redis-server with --tls-port (the plain port stays
// for redistest's readiness check). serverNames are the names its
// certificate carries.
func startTLSRedis(t *testing.T, serverNames ...string) *tlsRedis {
	t.Helper()
	ca, other := newTestCA(t, "redis-ca"), newTestCA(t, "other-ca")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sc, sk := ca.Issue(t, "redis", x509.ExtKeyUsageServerAuth, serverNames...)
	cc, ck := ca.issue(t, "ratelimit", false)
	r := &tlsRedis{clientCert: write("client.crt", cc), clientKey: write("client.key", ck),
		ca: write("ca.crt", ca.PEM), otherCA: write("other.crt", other.PEM)}
	port := freePort(t)
	redistest.Start(t, "--tls-port", port, "--tls-cert-file", write("redis.crt", sc), "--tls-key-file", write("redis.key", sk),
		"--tls-ca-cert-file", r.ca, "--tls-auth-clients", "yes")
	r.addr = "127.0.0.1:" + port
	return r
}

// roundTrip sets and reads back a key through a client of rawURL and t.
func roundTrip(t *testing.T, rawURL string, tl redisTLS) error {
	t.Helper()
	c, err := newRedisClient(rawURL, tl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "tls-k", "v", time.Minute).Err(); err != nil {
		return err
	}
	v, err := c.Get(ctx, "tls-k").Result()
	if err == nil && v != "v" {
		t.Fatalf("read back %q", v)
	}
	return err
}

func TestRedisTLS(t *testing.T) {
	r := startTLSRedis(t, "localhost", "127.0.0.1")
	files := redisTLS{Cert: r.clientCert, Key: r.clientKey, CA: r.ca}
	if err := roundTrip(t, "rediss://"+r.addr, files); err != nil {
		t.Fatalf("rediss:// with a client certificate: %v", err)
	}
	if err := roundTrip(t, "redis://"+r.addr, redisTLS{Enabled: true, Cert: r.clientCert, Key: r.clientKey, CA: r.ca}); err != nil {
		t.Fatalf("TLS turned on by REDIS_TLS: %v", err)
	}
	if err := roundTrip(t, "rediss://"+r.addr, redisTLS{CA: r.ca}); err == nil {
		t.Error("served without a client certificate")
	}
	if err := roundTrip(t, "rediss://"+r.addr, redisTLS{Cert: r.clientCert, Key: r.clientKey, CA: r.otherCA}); err == nil {
		t.Error("trusted a server of another authority")
	}
	if _, err := newRedisClient("redis://"+r.addr, files); err == nil {
		t.Error("client certificate given with TLS off: no error")
	}
}

// TestRedisTLSFromUpstreamEnvironment: REDIS_URL host:port with REDIS_TLS
// and its files, as Envoy Gateway sets them.
func TestRedisTLSFromUpstreamEnvironment(t *testing.T) {
	r := startTLSRedis(t, "localhost", "127.0.0.1")
	c, err := parseConfig(nil, envOf(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.addr,
		"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": r.clientCert, "REDIS_TLS_CLIENT_KEY": r.clientKey,
		"REDIS_TLS_CACERT": r.ca}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, c.RedisURL, c.RedisTLS); err != nil {
		t.Fatalf("%s: %v", c.RedisURL, err)
	}
}

// TestRedisTLSSkipHostnameVerification: a certificate that does not name
// the address is refused, unless the name check is skipped; the chain is
// still checked then.
func TestRedisTLSSkipHostnameVerification(t *testing.T) {
	r := startTLSRedis(t, "redis.internal")
	files := redisTLS{Cert: r.clientCert, Key: r.clientKey, CA: r.ca}
	if err := roundTrip(t, "rediss://"+r.addr, files); err == nil {
		t.Fatal("a certificate for redis.internal was accepted for 127.0.0.1")
	}
	files.SkipHostnameVerification = true
	if err := roundTrip(t, "rediss://"+r.addr, files); err != nil {
		t.Fatalf("skipping the name check: %v", err)
	}
	files.CA = r.otherCA
	if err := roundTrip(t, "rediss://"+r.addr, files); err == nil {
		t.Fatal("skipping the name check skipped the chain check too")
	}
}
