package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// config is every setting of the service, parsed and validated in one
// place (parseConfig). Each setting has a flag, our own environment
// variable and often envoyproxy/ratelimit's variable for the same thing;
// a flag given on the command line wins, then our variable (RLS_*), then
// theirs, then the default.
type config struct {
	ConfigPath      string
	GRPCAddr        string
	HTTPAddr        string
	DebugAddr       string
	PrometheusAddr  string // a second listener for /metrics; empty: none
	RedisURL        string
	RedisTLS        redisTLS
	Service         string
	RedisKeyPrefix  string
	ReplicaID       string
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
	ResponseHeaders string
	// HeaderNames name the draft headers (LIMIT_LIMIT_HEADER,
	// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER, on envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED); empty: x-ratelimit-*.
	HeaderNames [3]string
	GRPCTLS     grpcTLS
	// bounds are the timeouts, caps and sizes clients are held to.
	bounds

	// ShadowMode is envoyproxy/ratelimit's global shadow mode (SHADOW_MODE):
	// every decision is made and counted but the answer is OK.
	ShadowMode bool
	// StopIncrementWhenOverLimit is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:
	// under envoyproxy/ratelimit's charging semantics, whether a request
	// that goes over one descriptor's limit still charges its others.
	StopIncrementWhenOverLimit bool
	// MergeDomainConfig is MERGE_DOMAIN_CONFIG: files naming the same
	// domain merge instead of the later one being refused.
	MergeDomainConfig bool
	// UpstreamEnv is set when the service runs on envoyproxy/ratelimit's
	// environment: some of its configuration variables set and none of
	// ours (no flag, no RLS_* variable). Its charging semantics apply then.
	UpstreamEnv bool
	// Charging is what a request charges when a descriptor is over its
	// limit: "admitted" (ours: a denied request consumes nothing) or
	// "upstream" (envoyproxy/ratelimit's, StopIncrementWhenOverLimit
	// choosing between its two modes). Default: upstream on UpstreamEnv.
	Charging string
	// DynamicMetadata is RESPONSE_DYNAMIC_METADATA: the RLS answers with
	// envoyproxy/ratelimit's dynamic metadata.
	DynamicMetadata bool
	// UseStatsd and LocalCacheSize are accepted for compatibility and only
	// logged: statsd is not supported, and the credit engine is the cache.
	UseStatsd      bool
	LocalCacheSize int
	// Xds is envoyproxy/ratelimit's xDS configuration source.
	Xds xdsConfig
	// Notes are said once at start: settings accepted but not acted on.
	Notes []string

	// from names where each setting came from (flag name → "--flag",
	// a variable's name, or "default"), for messages.
	from map[string]string
}

// parseConfig reads args (without the program name) and the environment.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{from: map[string]string{}}
	ev, envErr := readEnv(getenv)
	fs := flag.NewFlagSet("ratelimit-svc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, usage string) {
		s := ev.settings[name]
		c.from[name] = s.from
		env := strings.Join(s.vars, ", ")
		fs.StringVar(p, name, s.value, fmt.Sprintf("%s (env %s)", usage, env))
	}
	str(&c.ConfigPath, "config", "policy directory (all *.yaml/*.yml below it) or one file")
	str(&c.GRPCAddr, "grpc-addr", "gRPC address: RLS, ext_proc, health, reflection")
	str(&c.HTTPAddr, "http-addr", "HTTP address: /healthcheck, /metrics, /json")
	str(&c.DebugAddr, "debug-addr", "debug address: pprof, /debug/config, /debug/keys, /rlconfig; empty: off")
	str(&c.PrometheusAddr, "prometheus-addr", "a second address serving /metrics; empty: none")
	str(&c.RedisURL, "redis-url", "Redis URL; empty runs local-only")
	str(&c.RedisTLS.Cert, "redis-tls-cert", "client certificate (PEM) for Redis over TLS")
	str(&c.RedisTLS.Key, "redis-tls-key", "client private key (PEM) for Redis over TLS")
	str(&c.RedisTLS.CA, "redis-tls-ca", "CA bundle (PEM) that Redis's certificate must chain to (default: system roots)")
	str(&c.Service, "service", "replica set name: namespaces Redis keys and metric labels")
	str(&c.RedisKeyPrefix, "redis-key-prefix", "put before every Redis key, for ACL key patterns on a shared Redis (no '{' or '}')")
	str(&c.ReplicaID, "replica-id", "this replica's id (default: host name + random suffix)")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "json or text")
	str(&c.Charging, "charging", "what a request charges when a descriptor is over its limit: admitted (nothing) or upstream (as envoyproxy/ratelimit)")
	str(&c.ResponseHeaders, "response-headers", "rate-limit headers the RLS adds: off, draft (X-RateLimit-*) or ietf (RateLimit)")
	str(&c.GRPCTLS.Cert, "grpc-tls-cert", "gRPC server certificate chain (PEM); with --grpc-tls-key turns TLS on")
	str(&c.GRPCTLS.Key, "grpc-tls-key", "gRPC server private key (PEM)")
	str(&c.GRPCTLS.ClientCA, "grpc-tls-client-ca", "CA bundle (PEM) that client certificates must chain to; set: mTLS required")
	str(&c.GRPCTLS.ClientSAN, "grpc-tls-client-san", "a SAN every client certificate must carry")
	var shutdown string
	str(&shutdown, "shutdown-timeout", "bound on draining at SIGTERM")
	rawBounds := make([]string, len(boundFlags))
	for i, f := range boundFlags {
		str(&rawBounds[i], f.name, f.usage)
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { c.from[f.Name] = "--" + f.Name })
	ev.apply(&c)
	if c.from["replica-id"] != "--replica-id" {
		c.ReplicaID = replicaID(c.ReplicaID)
	}
	c.UpstreamEnv = ev.upstream && !ev.ours && fs.NFlag() == 0
	if c.from["charging"] == "default" && c.UpstreamEnv {
		c.Charging = "upstream"
	}
	var errs []error
	if envErr != nil {
		errs = append(errs, envErr)
	}
	if d, err := time.ParseDuration(shutdown); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", c.src("shutdown-timeout"), shutdown))
	} else {
		c.ShutdownTimeout = d
	}
	errs = append(errs, c.parseBounds(rawBounds)...)
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// loadOptions are the options every policy set is loaded with, from files
// or from xDS, and that validate checks with.
func (c config) loadOptions() policy.LoadOptions {
	return policy.LoadOptions{MergeDomains: c.MergeDomainConfig, ShadowMode: c.ShadowMode}
}

// src names where setting name came from.
func (c config) src(name string) string {
	if s := c.from[name]; s != "" && s != "default" {
		return s
	}
	return "--" + name
}

func (c config) validate() error {
	var errs []error
	add := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{c.src(name)}, args...)...))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		add("log-level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		add("log-format", "%q: want json or text", c.LogFormat)
	}
	if c.Service == "" {
		add("service", "must not be empty")
	}
	if strings.ContainsAny(c.RedisKeyPrefix, "{}") {
		add("redis-key-prefix", "%q: must not contain '{' or '}', which would change the keys' hash tag", c.RedisKeyPrefix)
	}
	if c.Charging != "admitted" && c.Charging != "upstream" {
		add("charging", "%q: want admitted or upstream", c.Charging)
	}
	for _, name := range []string{"grpc-addr", "http-addr", "debug-addr", "prometheus-addr"} {
		if err := checkAddr(c.addr(name), name == "grpc-addr" || name == "http-addr"); err != nil {
			add(name, "%v", err)
		}
	}
	if err := c.GRPCTLS.check(c.src); err != nil {
		errs = append(errs, err)
	}
	if err := c.RedisTLS.check(c.src); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c config) addr(name string) string {
	switch name {
	case "grpc-addr":
		return c.GRPCAddr
	case "http-addr":
		return c.HTTPAddr
	case "debug-addr":
		return c.DebugAddr
	}
	return c.PrometheusAddr
}

// checkAddr checks a listen address, host:port; empty is allowed when
// the listener is optional.
func checkAddr(addr string, required bool) error {
	if addr == "" {
		if required {
			return errors.New("empty address")
		}
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(c config, w io.Writer) *slog.Logger {
	lvl, _ := parseLevel(c.LogLevel)
	o := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, o))
	}
	return slog.New(slog.NewJSONHandler(w, o))
}

// replicaID is base (POD_NAME, HOSTNAME or the host name) plus a random
// suffix, so a restarted pod never takes over its predecessor's leases.
func replicaID(base string) string {
	if base == "" {
		base, _ = os.Hostname()
	}
	if base == "" {
		base = "replica"
	}
	var b [4]byte
	rand.Read(b[:])
	return base + "-" + hex.EncodeToString(b[:])
}
