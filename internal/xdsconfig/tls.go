package xdsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportCredentials reads the TLS files anew, so that a reconnection
// picks up rotated certificates.
func transportCredentials(o Options) (credentials.TransportCredentials, error) {
	if !o.UseTLS {
		return insecure.NewCredentials(), nil
	}
	cfg, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// tlsConfig builds the client's TLS configuration: the client key pair
// if given, the CA pool (system roots when CACert is empty) and the name
// the server's certificate must carry.
func tlsConfig(o Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerSAN}
	if o.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s, key %s: %w", o.ClientCert, o.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server CA %s: %w", o.CACert, errNoCertificate)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

var errNoCertificate = errors.New("no PEM certificate found")
