package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// xdsConfig is envoyproxy/ratelimit's configuration over xDS
// (CONFIG_TYPE=GRPC_XDS_SOTW): where the ADS server is, how this client
// names itself, its TLS and its reconnection backoff. The variables are
// read and checked whether or not xDS is on, as envoyproxy/ratelimit does.
type xdsConfig struct {
	// Enabled is CONFIG_TYPE=GRPC_XDS_SOTW (the other value is FILE).
	Enabled bool
	// ServerURL is the ADS server's host:port.
	ServerURL string
	// NodeID and NodeMetadata name this client to the server.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are added to the stream's metadata.
	Headers map[string]string
	// RetryInterval is CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL.
	RetryInterval time.Duration
	// UseTLS dials the server over TLS; ClientCert/ClientKey present a
	// client certificate, ServerCA checks the server's (empty: system
	// roots), ServerSAN, when set, is the name the server must carry.
	UseTLS                 bool
	ClientCert, ClientKey  string
	ServerCA, ServerSAN    string
	BackoffInitial         time.Duration
	BackoffMax             time.Duration
	BackoffRandomFactor    float64
	BackoffJitter          bool
	ForceStartWithoutFirst bool
	// MaxMsgSize bounds a message from the server; 0: gRPC's default.
	MaxMsgSize int
}

func (r *envReader) xds() {
	x := &r.ev.xds
	switch t := r.getenv("CONFIG_TYPE"); strings.ToUpper(t) {
	case "", "FILE":
	case "GRPC_XDS_SOTW":
		x.Enabled = true
	default:
		r.fail("CONFIG_TYPE", "%q: want FILE or GRPC_XDS_SOTW", t)
	}
	x.ServerURL = r.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
	if _, err := hostPort(x.ServerURL); err != nil {
		r.fail("CONFIG_GRPC_XDS_SERVER_URL", "%v", err)
	}
	x.NodeID = r.str("CONFIG_GRPC_XDS_NODE_ID", "default")
	x.NodeMetadata = r.pairs("CONFIG_GRPC_XDS_NODE_METADATA")
	x.Headers = r.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	x.RetryInterval = r.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second)
	x.UseTLS = r.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)
	x.ClientCert = r.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
	x.ClientKey = r.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	x.ServerCA = r.getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
	x.ServerSAN = r.getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
	if x.UseTLS && (x.ClientCert == "") != (x.ClientKey == "") {
		r.fail("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "give it and CONFIG_GRPC_XDS_CLIENT_TLS_KEY, or neither")
	}
	x.BackoffInitial = r.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second)
	x.BackoffMax = r.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second)
	if x.BackoffMax < x.BackoffInitial {
		r.fail("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "%v is less than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (%v)", x.BackoffMax, x.BackoffInitial)
	}
	x.BackoffRandomFactor = 0.5
	if s := r.getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1 {
			r.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "%q: want a number from 0 to 1", s)
		} else {
			x.BackoffRandomFactor = f
		}
	}
	x.BackoffJitter = r.bool("XDS_CLIENT_BACKOFF_JITTER", true)
	x.ForceStartWithoutFirst = r.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	if s := r.getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			r.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "%q is not a size in bytes", s)
		}
		x.MaxMsgSize = n
	}
}

func (r *envReader) str(name, def string) string {
	if s := r.getenv(name); s != "" {
		return s
	}
	return def
}

// duration reads a positive duration ("10s", "1m30s"); def when unset.
func (r *envReader) duration(name string, def time.Duration) time.Duration {
	s := r.getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		r.fail(name, "%q is not a positive duration", s)
		return def
	}
	return d
}

// pairs reads "k1:v1,k2:v2" (envoyproxy/ratelimit's map form).
func (r *envReader) pairs(name string) map[string]string {
	s := r.getenv(name)
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for p := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(p, ":")
		if !ok || strings.TrimSpace(k) == "" {
			r.fail(name, "%q: want key:value pairs separated by commas", p)
			return nil
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m
}

// xdsStartError refuses to start on CONFIG_TYPE=GRPC_XDS_SOTW: its
// settings are read and checked, but policies come from files only.
func xdsStartError(x xdsConfig) error {
	if x.Enabled {
		return fmt.Errorf("CONFIG_TYPE: GRPC_XDS_SOTW is not supported yet; use FILE with RUNTIME_ROOT or --config")
	}
	return nil
}
