package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// config is the service's command line, each flag with an environment
// variable; a flag given on the command line wins.
type config struct {
	ConfigPath      string
	GRPCAddr        string
	HTTPAddr        string
	RedisURL        string
	Service         string
	ReplicaID       string
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
	ResponseHeaders string
}

// parseConfig reads args (without the program name) and the environment.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("ratelimit-svc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	str := func(p *string, name, def, usage string, envs ...string) {
		v := env(envs...)
		if v == "" {
			v = def
		}
		fs.StringVar(p, name, v, fmt.Sprintf("%s (env %s)", usage, strings.Join(envs, ", ")))
	}
	str(&c.ConfigPath, "config", "config", "policy directory (all *.yaml/*.yml below it) or one file", "RLS_CONFIG")
	str(&c.GRPCAddr, "grpc-addr", ":8081", "gRPC address: RLS, health, reflection (h2c)", "RLS_GRPC_ADDR")
	str(&c.HTTPAddr, "http-addr", ":8080", "HTTP address: /healthcheck, /metrics, /json, /debug/", "RLS_HTTP_ADDR")
	str(&c.RedisURL, "redis-url", "", "Redis URL; empty runs local-only", "REDIS_URL")
	str(&c.Service, "service", "ratelimit", "replica set name: namespaces Redis keys and metric labels", "RLS_SERVICE")
	str(&c.ReplicaID, "replica-id", "", "this replica's id (default: env or host name + random suffix)", "POD_NAME", "HOSTNAME")
	str(&c.LogLevel, "log-level", "info", "debug, info, warn or error", "LOG_LEVEL")
	str(&c.LogFormat, "log-format", "json", "json or text", "LOG_FORMAT")
	str(&c.ResponseHeaders, "response-headers", "off", "rate-limit headers the RLS adds: off, draft (X-RateLimit-*) or ietf (RateLimit)", "RLS_RESPONSE_HEADERS")
	shutdown := env("RLS_SHUTDOWN_TIMEOUT")
	if shutdown == "" {
		shutdown = "15s"
	}
	d, err := time.ParseDuration(shutdown)
	if err != nil {
		return c, fmt.Errorf("RLS_SHUTDOWN_TIMEOUT: %w", err)
	}
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", d, "bound on draining at SIGTERM (env RLS_SHUTDOWN_TIMEOUT)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "replica-id" })
	if !explicit {
		c.ReplicaID = replicaID(c.ReplicaID)
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("--log-format %q: want json or text", c.LogFormat))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("--shutdown-timeout must be positive"))
	}
	if c.Service == "" {
		errs = append(errs, errors.New("--service must not be empty"))
	}
	return errors.Join(errs...)
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
