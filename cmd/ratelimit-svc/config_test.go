package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// configCase is a configuration parsed from env and args, and what it must
// hold.
type configCase struct {
	name  string
	env   map[string]string
	args  []string
	check func(*testing.T, config)
}

func testConfigs(t *testing.T, tests []configCase) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// configError is a bad configuration and what its error must say.
type configError struct {
	env  map[string]string
	args []string
	want string
}

func testConfigErrors(t *testing.T, tests []configError) {
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := parseConfig(tt.args, envOf(tt.env), io.Discard)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestConfigFromUpstreamEnvironment(t *testing.T) {
	tests := []configCase{
		{"defaults", nil, nil, func(t *testing.T, c config) {
			equal(t, "config", c.ConfigPath, "config")
			equal(t, "grpc", c.GRPCAddr, ":8081")
			equal(t, "http", c.HTTPAddr, ":8080")
			equal(t, "debug", c.DebugAddr, "127.0.0.1:6070")
			equal(t, "prometheus", c.PrometheusAddr, "")
			equal(t, "redis", c.RedisURL, "")
			equal(t, "level", c.LogLevel, "info")
			equal(t, "format", c.LogFormat, "json")
			equal(t, "shutdown", c.ShutdownTimeout, 15*time.Second)
			equal(t, "upstream env", c.UpstreamEnv, false)
			equal(t, "xds", c.Xds.Enabled, false)
			equal(t, "xds node", c.Xds.NodeID, "default")
			equal(t, "xds server", c.Xds.ServerURL, "localhost:18000")
			equal(t, "xds backoff", c.Xds.MaxInterval, time.Minute)
			equal(t, "xds jitter", c.Xds.NoJitter, false)
		}},
		{"ports and hosts", map[string]string{"PORT": "9080", "GRPC_HOST": "10.0.0.1", "GRPC_PORT": "9081", "DEBUG_PORT": "9070"}, nil,
			func(t *testing.T, c config) {
				equal(t, "http", c.HTTPAddr, ":9080")
				equal(t, "grpc", c.GRPCAddr, "10.0.0.1:9081")
				equal(t, "debug keeps loopback", c.DebugAddr, "127.0.0.1:9070")
				equal(t, "upstream env", c.UpstreamEnv, true)
			}},
		{"host alone", map[string]string{"HOST": "0.0.0.0", "DEBUG_HOST": "0.0.0.0"}, nil, func(t *testing.T, c config) {
			equal(t, "http", c.HTTPAddr, "0.0.0.0:8080")
			equal(t, "debug", c.DebugAddr, "0.0.0.0:6070")
		}},
		{"runtime directory", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
			"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"}, nil, func(t *testing.T, c config) {
			equal(t, "config", c.ConfigPath, "/data/ratelimit/config")
		}},
		{"runtime app directory", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "limits"}, nil,
			func(t *testing.T, c config) { equal(t, "config", c.ConfigPath, "/data/limits") }},
		{"runtime subdirectory alone", map[string]string{"RUNTIME_SUBDIRECTORY": "rl"}, nil,
			func(t *testing.T, c config) { equal(t, "config", c.ConfigPath, "/srv/runtime_data/current/rl/config") }},
		{"our variable beats theirs", map[string]string{"RLS_CONFIG": "/ours", "RUNTIME_ROOT": "/theirs",
			"RLS_GRPC_ADDR": ":7000", "GRPC_PORT": "7001"}, nil, func(t *testing.T, c config) {
			equal(t, "config", c.ConfigPath, "/ours")
			equal(t, "grpc", c.GRPCAddr, ":7000")
			equal(t, "upstream env", c.UpstreamEnv, false)
		}},
		{"a flag beats both", map[string]string{"RLS_CONFIG": "/ours", "RUNTIME_ROOT": "/theirs", "PORT": "9"},
			[]string{"--config", "/flag", "--http-addr", ":10"}, func(t *testing.T, c config) {
				equal(t, "config", c.ConfigPath, "/flag")
				equal(t, "http", c.HTTPAddr, ":10")
				equal(t, "upstream env", c.UpstreamEnv, false)
			}},
		{"log names of logrus", map[string]string{"LOG_LEVEL": "WARNING", "LOG_FORMAT": "TEXT"}, nil, func(t *testing.T, c config) {
			equal(t, "level", c.LogLevel, "warn")
			equal(t, "format", c.LogFormat, "text")
		}},
		{"trace is debug", map[string]string{"LOG_LEVEL": "trace"}, nil, func(t *testing.T, c config) { equal(t, "level", c.LogLevel, "debug") }},
		{"prometheus", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"}, nil,
			func(t *testing.T, c config) { equal(t, "prometheus", c.PrometheusAddr, ":19001") }},
		{"prometheus default address", map[string]string{"USE_PROMETHEUS": "true"}, nil,
			func(t *testing.T, c config) { equal(t, "prometheus", c.PrometheusAddr, ":9090") }},
		{"prometheus address without USE_PROMETHEUS", map[string]string{"PROMETHEUS_ADDR": ":19001"}, nil,
			func(t *testing.T, c config) { equal(t, "prometheus", c.PrometheusAddr, "") }},
		{"switches", map[string]string{"SHADOW_MODE": "true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "1",
			"MERGE_DOMAIN_CONFIG": "TRUE", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "USE_STATSD": "true",
			"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, nil, func(t *testing.T, c config) {
			equal(t, "shadow", c.ShadowMode, true)
			equal(t, "stop increment", c.StopIncrementWhenOverLimit, true)
			equal(t, "merge", c.MergeDomainConfig, true)
			equal(t, "headers", c.ResponseHeaders, "draft")
			equal(t, "header names", c.HeaderNames, [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"})
			equal(t, "statsd", c.UseStatsd, true)
			equal(t, "local cache", c.LocalCacheSize, 1048576)
			equal(t, "notes", len(c.Notes), 2)
		}},
		{"header names", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit",
			"LIMIT_RESET_HEADER": "X-Reset"}, nil, func(t *testing.T, c config) {
			equal(t, "header names", c.HeaderNames, [3]string{"X-Limit", "RateLimit-Remaining", "X-Reset"})
		}},
		{"header names without the headers", map[string]string{"LIMIT_LIMIT_HEADER": "X-Limit"}, nil, func(t *testing.T, c config) {
			equal(t, "headers", c.ResponseHeaders, "off")
			equal(t, "header names", c.HeaderNames, [3]string{})
		}},
		{"connection age", map[string]string{"GRPC_MAX_CONNECTION_AGE": "24h", "GRPC_MAX_CONNECTION_AGE_GRACE": "1h"}, nil,
			func(t *testing.T, c config) {
				equal(t, "age", c.GRPCMaxConnAge, 24*time.Hour)
				equal(t, "grace", c.GRPCMaxConnAgeGrace, time.Hour)
			}},
		{"charging on their environment", map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, nil, func(t *testing.T, c config) {
			equal(t, "charging", c.Charging, "upstream")
			equal(t, "metadata", c.DynamicMetadata, true)
		}},
		{"charging on ours", map[string]string{"RESPONSE_DYNAMIC_METADATA": "true", "RLS_SERVICE": "x"}, nil,
			func(t *testing.T, c config) { equal(t, "charging", c.Charging, "admitted") }},
		{"charging chosen", map[string]string{"RLS_CHARGING": "upstream"}, nil,
			func(t *testing.T, c config) { equal(t, "charging", c.Charging, "upstream") }},
		{"xds message size", map[string]string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608"}, nil,
			func(t *testing.T, c config) { equal(t, "size", c.Xds.MaxRecvMsgSize, 8388608) }},
		{"xds factor 0 is no jitter", map[string]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0"}, nil,
			func(t *testing.T, c config) { equal(t, "no jitter", c.Xds.NoJitter, true) }},
		{"xds tls files without USE_TLS are ignored", map[string]string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c",
			"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds"}, nil, func(t *testing.T, c config) {
			equal(t, "cert", c.Xds.ClientCert, "")
			equal(t, "san", c.Xds.ServerSAN, "")
			equal(t, "notes", len(c.Notes), 2)
		}},
		{"xds server target with a scheme", map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "dns:///envoy-gateway:18001"}, nil,
			func(t *testing.T, c config) { equal(t, "server", c.Xds.ServerURL, "dns:///envoy-gateway:18001") }},
		{"statsd off says nothing", map[string]string{"USE_STATSD": "false"}, nil,
			func(t *testing.T, c config) { equal(t, "notes", len(c.Notes), 0) }},
		{"grpc tls", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/c/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/c/ca.crt"}, nil, func(t *testing.T, c config) {
			equal(t, "cert", c.GRPCTLS.Cert, "/c/tls.crt")
			equal(t, "key", c.GRPCTLS.Key, "/c/tls.key")
			equal(t, "client CA", c.GRPCTLS.ClientCA, "/c/ca.crt")
		}},
		{"grpc client CA, older name", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c",
			"GRPC_SERVER_TLS_KEY": "k", "GRPC_CLIENT_TLS_CACERT": "ca", "GRPC_CLIENT_TLS_SAN": "envoy"}, nil, func(t *testing.T, c config) {
			equal(t, "client CA", c.GRPCTLS.ClientCA, "ca")
			equal(t, "client SAN", c.GRPCTLS.ClientSAN, "envoy")
		}},
		{"grpc tls files without USE_TLS are ignored", map[string]string{"GRPC_SERVER_TLS_CERT": "c", "GRPC_SERVER_TLS_KEY": "k"}, nil,
			func(t *testing.T, c config) { equal(t, "tls", c.GRPCTLS.enabled(), false) }},
		{"xds", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
			"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "a=1,b=2",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c/tls.crt",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":  "/c/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/c/ca.crt",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "5s",
			"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.2", "XDS_CLIENT_BACKOFF_JITTER": "false",
			"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, nil, func(t *testing.T, c config) {
			x := c.Xds
			equal(t, "enabled", x.Enabled, true)
			equal(t, "server", x.ServerURL, "envoy-gateway:18001")
			equal(t, "node", x.NodeID, "envoy-ratelimit")
			equal(t, "metadata", x.NodeMetadata["b"], "2")
			equal(t, "headers", x.Headers["x-a"], "1")
			equal(t, "tls", x.UseTLS, true)
			equal(t, "cert", x.ClientCert, "/c/tls.crt")
			equal(t, "key", x.ClientKey, "/c/tls.key")
			equal(t, "ca", x.CACert, "/c/ca.crt")
			equal(t, "initial", x.InitialInterval, time.Second)
			equal(t, "max", x.MaxInterval, 5*time.Second)
			equal(t, "factor", x.RandomFactor, 0.2)
			equal(t, "no jitter", x.NoJitter, true)
			equal(t, "force", x.ForceStart, true)
		}},
	}
	testConfigs(t, tests)
}

func TestConfigRedisFromUpstreamEnvironment(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis.svc:6379"}, "redis://redis.redis.svc:6379"},
		{map[string]string{"REDIS_URL": "localhost:6379"}, "redis://localhost:6379"},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_AUTH": "p@ss", "REDIS_TLS": "true"}, "rediss://:p%40ss@h:1"},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_AUTH": "user:pw"}, "redis://user:pw@h:1"},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"}, "redis-sentinel://s1:26379,s2:26379/mymaster"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379", "REDIS_AUTH": "pw"}, "redis-sentinel://:pw@s1:26379/m"},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:6379,b:6379"}, "redis://a:6379,redis://b:6379"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379", "REDIS_SENTINEL_AUTH": "s&p"}, "redis-sentinel://s1:26379/m?sentinel_password=s%26p"},
		{map[string]string{"REDIS_URL": "a:6379,b:6379", "REDIS_TLS": "true"}, "rediss://a:6379,rediss://b:6379"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/redis.sock"}, "unix:///var/run/redis.sock"},
		{map[string]string{"REDIS_URL": "redis://h:1/2"}, "redis://h:1/2"},
		{map[string]string{"REDIS_URL": "redis://h:1", "RLS_SERVICE": "x"}, "redis://h:1"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			c, err := parseConfig(nil, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "redis URL", c.RedisURL, tt.want)
			if _, err := parseRedisURL(c.RedisURL); err != nil {
				t.Errorf("the URL does not parse: %v", err)
			}
		})
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	tests := []configError{
		{map[string]string{"GRPC_PORT": "80a"}, nil, `GRPC_PORT: "80a" is not a port`},
		{map[string]string{"PORT": "70000"}, nil, `PORT: "70000" is not a port`},
		{map[string]string{"DEBUG_PORT": "-1"}, nil, `DEBUG_PORT: "-1" is not a port`},
		{map[string]string{"RLS_GRPC_ADDR": "nocolon"}, nil, `RLS_GRPC_ADDR: "nocolon" is not host:port`},
		{nil, []string{"--http-addr", "x:y"}, `--http-addr: "x:y"`},
		{map[string]string{"LOG_LEVEL": "loud"}, nil, `LOG_LEVEL: "loud"`},
		{nil, []string{"--log-level", "loud"}, `--log-level: "loud"`},
		{map[string]string{"LOG_FORMAT": "xml"}, nil, `LOG_FORMAT: "xml"`},
		{map[string]string{"RLS_SHUTDOWN_TIMEOUT": "soon"}, nil, `RLS_SHUTDOWN_TIMEOUT: "soon" is not a positive duration`},
		{map[string]string{"SHADOW_MODE": "yes"}, nil, `SHADOW_MODE: "yes" is not a boolean`},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "Reset Time"}, nil,
			`LIMIT_RESET_HEADER: "Reset Time" is not a header name`},
		{map[string]string{"USE_PROMETHEUS": "on"}, nil, `USE_PROMETHEUS: "on" is not a boolean`},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "9090"}, nil, `PROMETHEUS_ADDR: "9090" is not host:port`},
		{map[string]string{"PROMETHEUS_PATH": "/stats"}, nil, `PROMETHEUS_PATH: "/stats"`},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1MB"}, nil, `LOCAL_CACHE_SIZE_IN_BYTES: "1MB"`},
		{map[string]string{"REDIS_TYPE": "ring"}, nil, `REDIS_TYPE: "ring"`},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, nil, `REDIS_SOCKET_TYPE: "udp"`},
		{map[string]string{"REDIS_URL": "nohostport"}, nil, `REDIS_URL: address "nohostport"`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, nil, `REDIS_URL: "s1:26379": want master,host:port`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1"}, nil, `REDIS_URL: address "s1"`},
		{map[string]string{"REDIS_TYPE": "single", "REDIS_URL": "a:1,b:2"}, nil, `REDIS_URL: "a:1,b:2": one address`},
		{map[string]string{"REDIS_URL": "redis://h:1", "REDIS_AUTH": "pw"}, nil, `REDIS_AUTH: set only with a host:port`},
		{map[string]string{"REDIS_TLS": "maybe"}, nil, `REDIS_TLS: "maybe"`},
		{map[string]string{"REDIS_TLS_CLIENT_CERT": "c"}, nil, `REDIS_TLS_CLIENT_CERT and --redis-tls-key: give both`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, nil, `GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT`},
		{map[string]string{"RLS_GRPC_TLS_CERT": "c"}, nil, `RLS_GRPC_TLS_CERT and --grpc-tls-key: give both`},
		{nil, []string{"--grpc-tls-client-ca", "ca"}, `--grpc-tls-client-ca needs --grpc-tls-cert`},
		{map[string]string{"CONFIG_TYPE": "REST"}, nil, `CONFIG_TYPE: "REST": want FILE or GRPC_XDS_SOTW`},
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "gateway"}, nil, `ServerURL (CONFIG_GRPC_XDS_SERVER_URL) "gateway"`},
		{map[string]string{"CONFIG_GRPC_XDS_NODE_METADATA": "a:1"}, nil, `CONFIG_GRPC_XDS_NODE_METADATA: entry "a:1": want key=value`},
		{map[string]string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a=1"}, nil, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: entry "x-a=1": want key:value`},
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c"}, nil, `(CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY): give both`},
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3"}, nil, `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: "3" is not a positive duration`},
		{map[string]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10"}, nil, `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: "10" is not a duration`},
		{map[string]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "-1s"}, nil, `InitialInterval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL) -1s: must not be negative`},
		{map[string]string{"XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1s"}, nil, `MaxInterval (XDS_CLIENT_BACKOFF_MAX_INTERVAL) 1s is below InitialInterval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL) 10s`},
		{map[string]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"}, nil, `RandomFactor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR) 2: want a number from 0 to 1`},
		{map[string]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "half"}, nil, `XDS_CLIENT_BACKOFF_RANDOM_FACTOR: "half" is not a number`},
		{map[string]string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "-1"}, nil, `MaxRecvMsgSize (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES) -1`},
		{map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "sure"}, nil, `FORCE_START_WITHOUT_INITIAL_CONFIG: "sure"`},
		{map[string]string{"RUNTIME_ROOT": "/d", "RUNTIME_SUBDIRECTORY": "../etc"}, nil, `RUNTIME_ROOT: "../etc"`},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, nil, `GRPC_UDS: "/tmp/rl.sock"`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "1d"}, nil, `GRPC_MAX_CONNECTION_AGE: "1d"`},
		{map[string]string{"TRACING_ENABLED": "yes"}, nil, `TRACING_ENABLED: "yes"`},
		{map[string]string{"RLS_CHARGING": "all"}, nil, `RLS_CHARGING: "all": want admitted or upstream`},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_SENTINEL_AUTH": "p"}, nil, `REDIS_SENTINEL_AUTH: set only with REDIS_TYPE sentinel`},
		{map[string]string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4MB"}, nil, `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: "4MB"`},
		{map[string]string{"REDIS_TIMEOUT": "10"}, nil, `REDIS_TIMEOUT: "10"`},
		{map[string]string{"BACKEND_TYPE": "memcache"}, nil, `BACKEND_TYPE: "memcache" is not supported`},
	}
	testConfigErrors(t, tests)
}

// TestConfigReportsEveryProblem: several bad variables are all named in
// one start-up error.
func TestConfigReportsEveryProblem(t *testing.T) {
	_, err := parseConfig(nil, envOf(map[string]string{"GRPC_PORT": "x", "SHADOW_MODE": "y", "REDIS_TYPE": "z"}), io.Discard)
	for _, v := range []string{"GRPC_PORT", "SHADOW_MODE", "REDIS_TYPE"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("error %v does not name %s", err, v)
		}
	}
}
