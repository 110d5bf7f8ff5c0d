package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/internal/testpki"
)

// testCA is a throwaway certificate authority for a test.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, name string) *testCA { return &testCA{testpki.NewCA(t, name)} }

// issue signs a leaf named cn (a DNS SAN too): a server also for
// localhost and 127.0.0.1, or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	if server {
		return ca.Issue(t, cn, x509.ExtKeyUsageServerAuth, cn, "localhost", "127.0.0.1")
	}
	return ca.Issue(t, cn, x509.ExtKeyUsageClientAuth, cn)
}

// clientConfig is a client's tls.Config trusting ca, presenting a
// certificate of issuer when issuer is not nil.
func (ca *testCA) clientConfig(t *testing.T, issuer *testCA, cn string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if issuer != nil {
		certPEM, keyPEM := issuer.issue(t, cn, false)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// secretDir lays files out as Kubernetes mounts a Secret: each name a
// symlink into ..data, itself a symlink to a versioned directory; a new
// version swaps ..data atomically.
type secretDir struct {
	dir     string
	version int
}

func (s *secretDir) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	s.version++
	vdir := filepath.Join(s.dir, "..v"+string(rune('0'+s.version)))
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(vdir), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(s.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (s *secretDir) path(name string) string { return filepath.Join(s.dir, name) }
