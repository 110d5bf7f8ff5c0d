// Package xdstest serves RateLimitConfig resources over ADS for tests:
// go-control-plane's snapshot cache and server, over mTLS on a loopback
// port, with a throwaway PKI written to the test's temporary directory.
//
// A Server records the requests it received and the nonce of each
// version it sent; its methods are safe for concurrent use. It stops
// when the test ends, or earlier with Stop. The zero values of PKI and
// Server are not usable: build them with NewPKI and Start.
package xdstest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/internal/testpki"
)

// ServerName is the DNS name in the server's certificate: the SAN a
// client must ask for.
const ServerName = "xds.test"

// PKI is a throwaway CA with a server and a client certificate, and a
// second CA that signed neither, all as PEM files.
type PKI struct {
	CAFile, OtherCAFile   string
	ServerCert, ServerKey string
	ClientCert, ClientKey string

	caPool     *x509.CertPool
	serverPair tls.Certificate
}

// NewPKI writes a fresh PKI into a temporary directory of tb.
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	dir := tb.TempDir()
	p := &PKI{}
	ca, other := testpki.NewCA(tb, "test CA"), testpki.NewCA(tb, "other CA")
	p.CAFile = testpki.WriteFile(tb, dir, "ca.pem", ca.PEM)
	p.OtherCAFile = testpki.WriteFile(tb, dir, "other-ca.pem", other.PEM)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca.Cert)
	p.ServerCert, p.ServerKey = issue(tb, dir, "server", ca, x509.ExtKeyUsageServerAuth, ServerName)
	p.ClientCert, p.ClientKey = issue(tb, dir, "client", ca, x509.ExtKeyUsageClientAuth)
	pair, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		tb.Fatal(err)
	}
	p.serverPair = pair
	return p
}

// serverTLS requires a client certificate signed by the CA.
func (p *PKI) serverTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.serverPair},
		ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert}
}

// issue signs a leaf certificate for names and writes it and its key.
func issue(tb testing.TB, dir, name string, ca *testpki.CA, usage x509.ExtKeyUsage, names ...string) (certFile, keyFile string) {
	tb.Helper()
	cert, key := ca.Issue(tb, name, usage, names...)
	return testpki.WriteFile(tb, dir, name+".pem", cert), testpki.WriteFile(tb, dir, name+"-key.pem", key)
}
