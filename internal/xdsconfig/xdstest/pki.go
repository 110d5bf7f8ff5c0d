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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
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
	ca, caKey := newCA(tb, "test CA")
	other, _ := newCA(tb, "other CA")
	p.CAFile = writePEM(tb, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	p.OtherCAFile = writePEM(tb, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	p.ServerCert, p.ServerKey = issue(tb, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth, ServerName)
	p.ClientCert, p.ClientKey = issue(tb, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth, "")
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

var serial atomic.Int64

func template(cn string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func newCA(tb testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tpl := template(cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert, key
}

// issue signs a leaf certificate and writes it and its key; dnsName, when
// set, is its only SAN.
func issue(tb testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey,
	usage x509.ExtKeyUsage, dnsName string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tpl := template(name)
	tpl.KeyUsage = x509.KeyUsageDigitalSignature
	tpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if dnsName != "" {
		tpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return writePEM(tb, dir, name+".pem", "CERTIFICATE", der), writePEM(tb, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func writePEM(tb testing.TB, dir, name, typ string, der []byte) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
