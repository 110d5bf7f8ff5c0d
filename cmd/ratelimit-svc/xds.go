package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig"
)

// xdsConfig is envoyproxy/ratelimit's configuration over xDS
// (CONFIG_TYPE=GRPC_XDS_SOTW): whether it is on, whether to serve before
// the first config, and the client's options, which are the one model of
// everything else. The variables are read and checked whether or not xDS
// is on, as envoyproxy/ratelimit reads them: the reader below parses each
// value, and xdsconfig.Options.Validate alone judges the values (ranges,
// pairs), naming each variable.
type xdsConfig struct {
	// Enabled is CONFIG_TYPE=GRPC_XDS_SOTW (the other value is FILE).
	Enabled bool
	// ForceStart is FORCE_START_WITHOUT_INITIAL_CONFIG: serve, health
	// SERVING, before the first config arrived.
	ForceStart bool
	// Options are the client's, defaults filled in; wire adds the load
	// options, the logger and the update hook.
	xdsconfig.Options
}

// xdsTLSVars are the TLS variables, used only with
// CONFIG_GRPC_XDS_SERVER_USE_TLS=true, as envoyproxy/ratelimit uses them.
var xdsTLSVars = []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}

func (r *envReader) xds() {
	x := &r.ev.xds
	switch t := r.getenv("CONFIG_TYPE"); strings.ToUpper(t) {
	case "", "FILE":
	case "GRPC_XDS_SOTW":
		x.Enabled = true
	default:
		r.fail("CONFIG_TYPE", "%q: want FILE or GRPC_XDS_SOTW", t)
	}
	x.ForceStart = r.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	x.ServerURL = r.str("CONFIG_GRPC_XDS_SERVER_URL", xdsconfig.DefaultServerURL)
	x.NodeID = r.str("CONFIG_GRPC_XDS_NODE_ID", xdsconfig.DefaultNodeID)
	x.NodeMetadata = r.pairs("CONFIG_GRPC_XDS_NODE_METADATA", xdsconfig.ParseNodeMetadata)
	x.Headers = r.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", xdsconfig.ParseHeaders)
	if r.getenv("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") != "" {
		r.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 0)
		r.ev.notes = append(r.ev.notes, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: ignored; "+
			"the xDS client reconnects after XDS_CLIENT_BACKOFF_* delays")
	}
	x.UseTLS = r.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)
	tls := make([]string, len(xdsTLSVars))
	for i, v := range xdsTLSVars {
		tls[i] = r.getenv(v)
		if tls[i] != "" && !x.UseTLS {
			r.ev.notes = append(r.ev.notes, v+": ignored without CONFIG_GRPC_XDS_SERVER_USE_TLS=true")
		}
	}
	if x.UseTLS {
		x.ClientCert, x.ClientKey, x.CACert, x.ServerSAN = tls[0], tls[1], tls[2], tls[3]
	}
	x.InitialInterval = r.anyDuration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", xdsconfig.DefaultInitialInterval)
	x.MaxInterval = r.anyDuration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", xdsconfig.DefaultMaxInterval)
	x.RandomFactor = r.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", xdsconfig.DefaultRandomFactor)
	x.NoJitter = !r.bool("XDS_CLIENT_BACKOFF_JITTER", true)
	if r.getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR") != "" && x.RandomFactor == 0 {
		x.NoJitter = true // no randomisation, as there; in Options 0 means the default
	}
	x.MaxRecvMsgSize = r.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	if err := x.Validate(); err != nil {
		r.errs = append(r.errs, err)
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

// anyDuration reads a duration of any sign, for a value someone else
// judges; def when unset.
func (r *envReader) anyDuration(name string, def time.Duration) time.Duration {
	s := r.getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.fail(name, "%q is not a duration (want 10s, 1m30s...)", s)
		return def
	}
	return d
}

// float reads a number; def when unset.
func (r *envReader) float(name string, def float64) float64 {
	s := r.getenv(name)
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		r.fail(name, "%q is not a number", s)
		return def
	}
	return f
}

// int reads a whole number; 0 when unset.
func (r *envReader) int(name string) int {
	s := r.getenv(name)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		r.fail(name, "%q is not a whole number", s)
	}
	return n
}

// pairs reads a map with parse; nil when unset.
func (r *envReader) pairs(name string, parse func(string) (map[string]string, error)) map[string]string {
	m, err := parse(r.getenv(name))
	if err != nil {
		r.fail(name, "%v", err)
	}
	return m
}
