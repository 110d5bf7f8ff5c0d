package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// setting is one flag's value before the command line is read: from our
// variable, envoyproxy/ratelimit's, or the default.
type setting struct {
	value string
	from  string   // the variable that set it, or "default"
	vars  []string // every variable that can set it, for -help
}

// envValues is what the environment says, before flags.
type envValues struct {
	settings map[string]setting
	upstream bool // some envoyproxy/ratelimit-only variable is set
	ours     bool // some RLS_* variable is set

	redisTLS                redisTLS
	shadow, stopIncr, merge bool
	useStatsd               bool
	localCache              int
	xds                     xdsConfig
	notes                   []string // said once at start
	metadata                bool
	headerNames             [3]string // LIMIT_*_HEADER, with LIMIT_RESPONSE_HEADERS_ENABLED
}

// envReader reads variables and collects every problem, each naming its
// variable.
type envReader struct {
	getenv func(string) string
	errs   []error
	ev     *envValues
}

// upstreamOnly are envoyproxy/ratelimit's variables that we do not share:
// any of them set means the service runs on its environment.
var upstreamOnly = []string{
	"HOST", "PORT", "GRPC_HOST", "GRPC_PORT", "DEBUG_HOST", "DEBUG_PORT",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT",
	"RUNTIME_IGNOREDOTFILES", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_TLS",
	"USE_PROMETHEUS", "USE_STATSD", "SHADOW_MODE", "LOCAL_CACHE_SIZE_IN_BYTES",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"MERGE_DOMAIN_CONFIG", "CONFIG_TYPE", "GRPC_SERVER_USE_TLS", "BACKEND_TYPE", "RESPONSE_DYNAMIC_METADATA",
	"CACHE_KEY_PREFIX",
}

// ourVars are our own variables; any of them set means the operator
// configured this service, not envoyproxy/ratelimit.
var ourVars = []string{
	"RLS_CONFIG", "RLS_GRPC_ADDR", "RLS_HTTP_ADDR", "RLS_DEBUG_ADDR", "RLS_PROMETHEUS_ADDR",
	"RLS_SERVICE", "RLS_SHUTDOWN_TIMEOUT", "RLS_RESPONSE_HEADERS", "RLS_GRPC_TLS_CERT",
	"RLS_GRPC_TLS_KEY", "RLS_GRPC_TLS_CLIENT_CA", "RLS_GRPC_TLS_CLIENT_SAN", "RLS_CHARGING",
	"RLS_REDIS_KEY_PREFIX",
}

// readEnv reads our variables and envoyproxy/ratelimit's into flag
// defaults and the settings that have no flag.
func readEnv(getenv func(string) string) (*envValues, error) {
	ev := &envValues{settings: map[string]setting{}}
	r := &envReader{getenv: getenv, ev: ev}
	for _, v := range upstreamOnly {
		ev.upstream = ev.upstream || getenv(v) != ""
	}
	for _, v := range ourVars {
		ev.ours = ev.ours || getenv(v) != ""
	}
	for _, f := range boundFlags {
		ev.ours = ev.ours || getenv(f.env) != ""
	}
	r.listeners()
	r.config()
	r.redis()
	r.logging()
	r.grpcTLS()
	r.plain("service", "ratelimit", "RLS_SERVICE")
	r.plain("redis-key-prefix", "", "RLS_REDIS_KEY_PREFIX", "CACHE_KEY_PREFIX")
	r.plain("replica-id", "", "POD_NAME", "HOSTNAME")
	r.plain("shutdown-timeout", "15s", "RLS_SHUTDOWN_TIMEOUT")
	r.plain("charging", "admitted", "RLS_CHARGING")
	r.behaviour()
	r.bounds()
	r.xds()
	r.unsupported()
	return ev, errors.Join(r.errs...)
}

func (r *envReader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
}

// plain sets a flag's default from the first of vars that is set.
func (r *envReader) plain(flagName, def string, vars ...string) {
	for _, v := range vars {
		if s := r.getenv(v); s != "" {
			r.ev.settings[flagName] = setting{value: s, from: v, vars: vars}
			return
		}
	}
	r.ev.settings[flagName] = setting{value: def, from: "default", vars: vars}
}

// set records a flag's default computed from upstream variables, unless
// our variable ours is set (ours wins).
func (r *envReader) set(flagName, ours, value, from string, vars ...string) {
	all := append([]string{ours}, vars...)
	if s := r.getenv(ours); s != "" {
		r.ev.settings[flagName] = setting{value: s, from: ours, vars: all}
		return
	}
	r.ev.settings[flagName] = setting{value: value, from: from, vars: all}
}

// bool reads a boolean variable; def when unset.
func (r *envReader) bool(name string, def bool) bool {
	s := r.getenv(name)
	if s == "" {
		return def
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		r.fail(name, "%q is not a boolean (want true or false)", s)
		return def
	}
	return b
}

// port reads a port variable; def when unset.
func (r *envReader) port(name, def string) string {
	s := r.getenv(name)
	if s == "" {
		return def
	}
	if _, err := parsePort(s); err != nil {
		r.fail(name, "%q is not a port", s)
		return def
	}
	return s
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port", s)
	}
	return n, nil
}

// hostPort builds an address from a host and a port variable; from is the
// first of them that is set, or "default".
func (r *envReader) hostPort(hostVar, portVar, defHost, defPort string) (addr, from string) {
	host, port := r.getenv(hostVar), r.port(portVar, defPort)
	switch {
	case host != "":
		from = hostVar
	case r.getenv(portVar) != "":
		from = portVar
	default:
		return "", "default"
	}
	if host == "" {
		host = defHost
	}
	return net.JoinHostPort(host, port), from
}

// listeners: HOST/PORT, GRPC_HOST/GRPC_PORT, DEBUG_HOST/DEBUG_PORT and
// USE_PROMETHEUS/PROMETHEUS_ADDR.
func (r *envReader) listeners() {
	for _, l := range []struct{ flag, ours, host, port, defHost, defPort string }{
		{"http-addr", "RLS_HTTP_ADDR", "HOST", "PORT", "", "8080"},
		{"grpc-addr", "RLS_GRPC_ADDR", "GRPC_HOST", "GRPC_PORT", "", "8081"},
		{"debug-addr", "RLS_DEBUG_ADDR", "DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070"},
	} {
		addr, from := r.hostPort(l.host, l.port, l.defHost, l.defPort)
		if from == "default" {
			addr = net.JoinHostPort(l.defHost, l.defPort)
		}
		r.set(l.flag, l.ours, addr, from, l.host, l.port)
	}
	prom, from := "", "default"
	if r.bool("USE_PROMETHEUS", false) {
		prom, from = ":9090", "USE_PROMETHEUS"
		if s := r.getenv("PROMETHEUS_ADDR"); s != "" {
			prom, from = s, "PROMETHEUS_ADDR"
		}
	}
	if p := r.getenv("PROMETHEUS_PATH"); p != "" && p != "/metrics" {
		r.fail("PROMETHEUS_PATH", "%q: metrics are served on /metrics only", p)
	}
	r.set("prometheus-addr", "RLS_PROMETHEUS_ADDR", prom, from, "USE_PROMETHEUS", "PROMETHEUS_ADDR")
}

// config: RLS_CONFIG, else envoyproxy/ratelimit's runtime directory
// <RUNTIME_ROOT>/<RUNTIME_SUBDIRECTORY>/<RUNTIME_APPDIRECTORY>, which is
// where its loader finds its files whether or not it watches the root.
func (r *envReader) config() {
	root, sub, app := r.getenv("RUNTIME_ROOT"), r.getenv("RUNTIME_SUBDIRECTORY"), r.getenv("RUNTIME_APPDIRECTORY")
	r.bool("RUNTIME_WATCH_ROOT", true)      // we watch contents either way
	r.bool("RUNTIME_IGNOREDOTFILES", false) // dot names are always skipped
	vars := []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}
	if root == "" && sub == "" && app == "" {
		r.set("config", "RLS_CONFIG", "config", "default", vars...)
		return
	}
	from := "RUNTIME_ROOT"
	if root == "" {
		root, from = "/srv/runtime_data/current", "RUNTIME_SUBDIRECTORY"
	}
	if app == "" {
		app = "config"
	}
	for _, v := range []string{sub, app} {
		if filepath.IsAbs(v) || strings.Contains(v, "..") {
			r.fail(from, "%q: the runtime subdirectories must be relative names", v)
		}
	}
	r.set("config", "RLS_CONFIG", filepath.Join(root, sub, app), from, vars...)
}

// logging: LOG_LEVEL takes envoyproxy/ratelimit's level names too (trace,
// warning, fatal, panic: logrus's), in any case.
func (r *envReader) logging() {
	r.plain("log-level", "info", "LOG_LEVEL")
	if s := r.ev.settings["log-level"]; s.from == "LOG_LEVEL" {
		l := strings.ToLower(s.value)
		switch l {
		case "trace":
			l = "debug"
		case "warning":
			l = "warn"
		case "fatal", "panic":
			l = "error"
		}
		s.value = l
		r.ev.settings["log-level"] = s
	}
	r.plain("log-format", "json", "LOG_FORMAT")
	if s := r.ev.settings["log-format"]; s.from == "LOG_FORMAT" {
		s.value = strings.ToLower(s.value)
		r.ev.settings["log-format"] = s
	}
}

// behaviour: the switches of envoyproxy/ratelimit that map onto ours or
// are accepted with a note.
func (r *envReader) behaviour() {
	ev := r.ev
	load := r.loadOptions()
	ev.shadow, ev.merge = load.ShadowMode, load.MergeDomains
	ev.stopIncr = r.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	ev.metadata = r.bool("RESPONSE_DYNAMIC_METADATA", false)
	ev.useStatsd = r.bool("USE_STATSD", false)
	if ev.useStatsd {
		ev.notes = append(ev.notes, "USE_STATSD: statsd is not supported; metrics are served in Prometheus format on /metrics")
	}
	if s := r.getenv("LOCAL_CACHE_SIZE_IN_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			r.fail("LOCAL_CACHE_SIZE_IN_BYTES", "%q is not a size in bytes", s)
		} else if ev.localCache = n; n > 0 {
			ev.notes = append(ev.notes, "LOCAL_CACHE_SIZE_IN_BYTES: ignored; the credit engine keeps over-limit keys local already")
		}
	}
	headers := "off"
	if r.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		headers = "draft"
		// envoyproxy/ratelimit's names and defaults.
		for i, v := range []struct{ name, def string }{
			{"LIMIT_LIMIT_HEADER", "RateLimit-Limit"},
			{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining"},
			{"LIMIT_RESET_HEADER", "RateLimit-Reset"},
		} {
			ev.headerNames[i] = r.str(v.name, v.def)
			if !isHeaderName(ev.headerNames[i]) {
				r.fail(v.name, "%q is not a header name", ev.headerNames[i])
			}
		}
	}
	from := "default"
	if headers != "off" {
		from = "LIMIT_RESPONSE_HEADERS_ENABLED"
	}
	r.set("response-headers", "RLS_RESPONSE_HEADERS", headers, from, "LIMIT_RESPONSE_HEADERS_ENABLED")
}

// loadOptions: SHADOW_MODE and MERGE_DOMAIN_CONFIG, the options policies
// are loaded with (by the service and by validate).
func (r *envReader) loadOptions() policy.LoadOptions {
	return policy.LoadOptions{ShadowMode: r.bool("SHADOW_MODE", false), MergeDomains: r.bool("MERGE_DOMAIN_CONFIG", false)}
}

// unsupported fails on envoyproxy/ratelimit settings whose values this
// service cannot honour, rather than run differently from what was asked.
func (r *envReader) unsupported() {
	if s := r.getenv("GRPC_UDS"); s != "" {
		r.fail("GRPC_UDS", "%q: a Unix socket for gRPC is not supported; use GRPC_HOST and GRPC_PORT", s)
	}
	if s := r.getenv("BACKEND_TYPE"); s != "" && !strings.EqualFold(s, "redis") {
		r.fail("BACKEND_TYPE", "%q is not supported: the backend is Redis (or none)", s)
	}
	if r.bool("REDIS_PERSECOND", false) {
		r.ev.notes = append(r.ev.notes, "REDIS_PERSECOND: ignored; per-second limits use the one Redis")
	}
	// Switches with nothing to switch here: checked, so that a typo still
	// fails as it would there.
	for _, v := range []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "TRACING_ENABLED", "DISABLE_STATS",
		"USE_DOG_STATSD", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_USE_EXPLICIT_PIPELINE"} {
		r.bool(v, false)
	}
	r.duration("REDIS_TIMEOUT", 0)
}

// apply copies what has no flag into c.
func (ev *envValues) apply(c *config) {
	c.RedisTLS.Enabled = ev.redisTLS.Enabled
	c.RedisTLS.SkipHostnameVerification = ev.redisTLS.SkipHostnameVerification
	c.ShadowMode, c.StopIncrementWhenOverLimit, c.MergeDomainConfig = ev.shadow, ev.stopIncr, ev.merge
	c.UseStatsd, c.LocalCacheSize = ev.useStatsd, ev.localCache
	c.Xds = ev.xds
	c.Notes = ev.notes
	c.DynamicMetadata = ev.metadata
	c.HeaderNames = ev.headerNames
}

// isHeaderName reports an HTTP field name: one or more token characters
// (RFC 9110).
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
