package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// grpcTLS is the gRPC server's TLS: off when Cert is empty.
type grpcTLS struct {
	// Cert and Key are the server's certificate chain and key (PEM files).
	Cert, Key string
	// ClientCA, when set, is a PEM bundle every client certificate must
	// chain to: a client without a valid certificate is refused.
	ClientCA string
	// ClientSAN, when set, is a name (DNS, URI, IP or e-mail SAN) every
	// client certificate must carry.
	ClientSAN string
}

func (t grpcTLS) enabled() bool { return t.Cert != "" }

func (t grpcTLS) check(src func(string) string) error {
	switch {
	case (t.Cert == "") != (t.Key == ""):
		return fmt.Errorf("%s and %s: give both or neither", src("grpc-tls-cert"), src("grpc-tls-key"))
	case t.ClientCA != "" && t.Cert == "":
		return fmt.Errorf("%s needs %s: client certificates are checked over TLS only", src("grpc-tls-client-ca"), src("grpc-tls-cert"))
	case t.ClientSAN != "" && t.ClientCA == "":
		return fmt.Errorf("%s needs %s", src("grpc-tls-client-san"), src("grpc-tls-client-ca"))
	}
	return nil
}

// grpcTLS reads envoyproxy/ratelimit's GRPC_SERVER_USE_TLS and its files;
// without GRPC_SERVER_USE_TLS=true they are ignored, as there.
func (r *envReader) grpcTLS() {
	vals := map[string]string{}
	if r.bool("GRPC_SERVER_USE_TLS", false) {
		for _, v := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_SERVER_TLS_CA_CERT",
			"GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
			vals[v] = r.getenv(v)
		}
		if vals["GRPC_SERVER_TLS_CERT"] == "" || vals["GRPC_SERVER_TLS_KEY"] == "" {
			r.fail("GRPC_SERVER_USE_TLS", "true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
	}
	one := func(flagName, ours string, vars ...string) {
		for _, v := range vars {
			if vals[v] != "" {
				r.set(flagName, ours, vals[v], v, vars...)
				return
			}
		}
		r.set(flagName, ours, "", "default", vars...)
	}
	one("grpc-tls-cert", "RLS_GRPC_TLS_CERT", "GRPC_SERVER_TLS_CERT")
	one("grpc-tls-key", "RLS_GRPC_TLS_KEY", "GRPC_SERVER_TLS_KEY")
	one("grpc-tls-client-ca", "RLS_GRPC_TLS_CLIENT_CA", "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_CACERT")
	one("grpc-tls-client-san", "RLS_GRPC_TLS_CLIENT_SAN", "GRPC_CLIENT_TLS_SAN")
}

// reloadCheckInterval bounds how often the files are looked at.
const reloadCheckInterval = time.Second

// certReloader serves a TLS server's certificate and client CA from
// files, re-reading them when their content changes (looked at, at most
// once a second, when a client connects). A Kubernetes Secret's symlink
// swap is a content change like any other. Files that no longer load keep
// the last good certificate, and the problem is logged once per content.
// It is safe for concurrent use.
type certReloader struct {
	files grpcTLS
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	checked time.Time
	sum     [sha256.Size]byte
	conf    *tls.Config
}

// newCertReloader loads the files once; an error names what is wrong.
func newCertReloader(files grpcTLS, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{files: files, log: log, now: time.Now}
	data, sum, err := r.read()
	if err != nil {
		return nil, err
	}
	if r.conf, err = r.build(data); err != nil {
		return nil, err
	}
	r.sum, r.checked = sum, r.now()
	return r, nil
}

// serverConfig is the tls.Config to give the server: every handshake gets
// the current certificate and CA.
func (r *certReloader) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.configForClient}
}

func (r *certReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= reloadCheckInterval || now.Before(r.checked) {
		r.checked = now
		r.refresh()
	}
	return r.conf, nil
}

// refresh re-reads the files and, when they changed, rebuilds the config.
func (r *certReloader) refresh() {
	data, sum, err := r.read()
	if err != nil || sum == r.sum {
		if err != nil {
			r.log.Warn("gRPC TLS files unreadable; keeping the last certificate", "err", err)
		}
		return
	}
	r.sum = sum
	conf, err := r.build(data)
	if err != nil {
		r.log.Error("gRPC TLS files changed but do not load; keeping the last certificate", "err", err)
		return
	}
	r.conf = conf
	r.log.Info("gRPC TLS certificate reloaded", "cert", r.files.Cert)
}

// read returns the files' contents (cert, key, CA) and their hash.
func (r *certReloader) read() ([3][]byte, [sha256.Size]byte, error) {
	var data [3][]byte
	h := sha256.New()
	for i, name := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return data, [sha256.Size]byte{}, err
		}
		data[i] = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return data, sum, nil
}

func (r *certReloader) build(data [3][]byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %w", r.files.Cert, r.files.Key, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}}
	if r.files.ClientCA == "" {
		return c, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[2]) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate", r.files.ClientCA)
	}
	c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if san := r.files.ClientSAN; san != "" {
		c.VerifyConnection = func(cs tls.ConnectionState) error { return checkSAN(cs, san) }
	}
	return c, nil
}

// checkSAN accepts a verified client certificate that names san.
func checkSAN(cs tls.ConnectionState, san string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	names := slices.Concat(leaf.DNSNames, leaf.EmailAddresses)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	if slices.Contains(names, san) {
		return nil
	}
	if ip := net.ParseIP(san); ip != nil && slices.ContainsFunc(leaf.IPAddresses, func(a net.IP) bool { return a.Equal(ip) }) {
		return nil
	}
	return fmt.Errorf("client certificate does not name %q", san)
}

// clientTLSConfig builds a client's tls.Config from PEM files: an
// optional client certificate, a CA (empty: system roots), and whether to
// check only the chain, not the server's name.
func clientTLSConfig(t redisTLS) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s with key %s: %w", t.Cert, t.Key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA %s: no PEM certificate", t.CA)
		}
	}
	if t.SkipHostnameVerification {
		roots := c.RootCAs
		c.InsecureSkipVerify = true // the chain is verified below, the name is not
		c.VerifyConnection = func(cs tls.ConnectionState) error { return verifyChain(cs, roots) }
	}
	return c, nil
}

// verifyChain checks the server's chain against roots (nil: system)
// without checking its name.
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no server certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}
