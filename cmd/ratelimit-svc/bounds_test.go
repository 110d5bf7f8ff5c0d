package main

import (
	"io"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
)

func TestBoundsDefaults(t *testing.T) {
	c, err := parseConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "read", c.HTTPReadTimeout, 30*time.Second)
	equal(t, "read header", c.HTTPReadHeaderTimeout, 10*time.Second)
	equal(t, "write", c.HTTPWriteTimeout, 30*time.Second)
	equal(t, "idle", c.HTTPIdleTimeout, 120*time.Second)
	equal(t, "http conns", c.HTTPMaxConns, 1024)
	equal(t, "debug write", c.DebugWriteTimeout, 30*time.Second)
	equal(t, "debug profile", c.DebugProfileMax, time.Minute)
	equal(t, "debug conns", c.DebugMaxConns, 16)
	equal(t, "debug keys", c.DebugKeysMax, 10000)
	equal(t, "keepalive min", c.GRPCKeepaliveMinTime, 10*time.Second)
	equal(t, "keepalive without stream", c.GRPCKeepaliveWithoutStream, true)
	equal(t, "conn idle", c.GRPCMaxConnIdle, 15*time.Minute)
	equal(t, "conn age", c.GRPCMaxConnAge, time.Duration(0))
	equal(t, "conn age grace", c.GRPCMaxConnAgeGrace, time.Duration(0))
	equal(t, "streams", c.GRPCMaxStreams, 1024)
	equal(t, "recv bytes", c.GRPCMaxRecvBytes, 10<<20)
	equal(t, "memory", c.MemoryLimit, memoryLimit{})
	equal(t, "max keys", c.MaxKeys, 1_000_000)
	equal(t, "extproc stream idle", c.ExtProcStreamIdle, 5*time.Minute)
	equal(t, "gc heap floor", c.GCHeapFloor, uint64(64<<20))
	equal(t, "rls bounds", c.RLS, envoyapi.RequestBounds{MaxDescriptors: 64, MaxEntries: 512, MaxValueBytes: 4096,
		MaxOverridePeriod: 366 * 24 * time.Hour})
	equal(t, "upstream env", c.UpstreamEnv, false)
}

// TestBoundsPrecedence: a flag wins over our variable, which wins over
// envoyproxy/ratelimit's; our bound variables count as our environment.
func TestBoundsPrecedence(t *testing.T) {
	testConfigs(t, []configCase{
		{"env", map[string]string{"RLS_GRPC_MAX_RECV_BYTES": "2048", "RLS_HTTP_IDLE_TIMEOUT": "5s", "RLS_MEMORY_LIMIT": "off"}, nil,
			func(t *testing.T, c config) {
				equal(t, "recv bytes", c.GRPCMaxRecvBytes, 2048)
				equal(t, "idle", c.HTTPIdleTimeout, 5*time.Second)
				equal(t, "memory", c.MemoryLimit, memoryLimit{Off: true})
				equal(t, "from", c.src("grpc-max-recv-bytes"), "RLS_GRPC_MAX_RECV_BYTES")
			}},
		{"flag over env", map[string]string{"RLS_GRPC_MAX_RECV_BYTES": "2048", "RLS_DEBUG_KEYS_MAX": "7"},
			[]string{"--grpc-max-recv-bytes", "4096", "--memory-limit", "512MiB", "--grpc-keepalive-permit-without-stream=false"},
			func(t *testing.T, c config) {
				equal(t, "recv bytes", c.GRPCMaxRecvBytes, 4096)
				equal(t, "debug keys", c.DebugKeysMax, 7)
				equal(t, "memory", c.MemoryLimit, memoryLimit{Bytes: 512 << 20})
				equal(t, "keepalive without stream", c.GRPCKeepaliveWithoutStream, false)
				equal(t, "from", c.src("grpc-max-recv-bytes"), "--grpc-max-recv-bytes")
			}},
		{"ours over upstream", map[string]string{"GRPC_MAX_CONNECTION_AGE": "24h", "RLS_GRPC_MAX_CONNECTION_AGE": "1h"}, nil,
			func(t *testing.T, c config) {
				equal(t, "age", c.GRPCMaxConnAge, time.Hour)
				equal(t, "upstream env", c.UpstreamEnv, false)
			}},
		{"zero means none", nil, []string{"--grpc-max-connection-idle", "0", "--grpc-max-concurrent-streams", "0",
			"--http-write-timeout", "0s", "--http-max-conns", "0"},
			func(t *testing.T, c config) {
				equal(t, "conn idle", c.GRPCMaxConnIdle, time.Duration(0))
				equal(t, "streams", c.GRPCMaxStreams, 0)
				equal(t, "write", c.HTTPWriteTimeout, time.Duration(0))
				equal(t, "http conns", c.HTTPMaxConns, 0)
			}},
		{"extproc stream idle", map[string]string{"RLS_EXTPROC_STREAM_IDLE_TIMEOUT": "0"}, nil,
			func(t *testing.T, c config) {
				equal(t, "extproc stream idle", c.ExtProcStreamIdle, time.Duration(0))
			}},
		{"extproc stream idle flag", map[string]string{"RLS_EXTPROC_STREAM_IDLE_TIMEOUT": "0"}, []string{"--extproc-stream-idle-timeout", "90s"},
			func(t *testing.T, c config) {
				equal(t, "extproc stream idle", c.ExtProcStreamIdle, 90*time.Second)
			}},
	})
}

func TestBoundsErrorsNameTheFlag(t *testing.T) {
	testConfigErrors(t, []configError{
		{nil, []string{"--http-read-timeout", "-1s"}, `--http-read-timeout: "-1s": want a duration of 0 or more`},
		{nil, []string{"--http-idle-timeout", "soon"}, `--http-idle-timeout: "soon" is not a duration`},
		{map[string]string{"RLS_HTTP_WRITE_TIMEOUT": "10"}, nil, `RLS_HTTP_WRITE_TIMEOUT: "10" is not a duration`},
		{nil, []string{"--http-max-conns", "-5"}, `--http-max-conns: "-5": want a whole number of 0 or more`},
		{nil, []string{"--debug-max-conns", "0"}, `--debug-max-conns: "0": want a positive whole number`},
		{nil, []string{"--debug-keys-max", "0"}, `--debug-keys-max: "0": want a positive whole number`},
		{map[string]string{"RLS_MAX_KEYS": "0"}, nil, `RLS_MAX_KEYS: "0": want a positive whole number`},
		{nil, []string{"--rls-max-override-period", "0s"}, `--rls-max-override-period: "0s": want a positive duration`},
		{map[string]string{"CACHE_KEY_PREFIX": "a{b}"}, nil, `CACHE_KEY_PREFIX: "a{b}": must not contain '{' or '}'`},
		{nil, []string{"--gc-heap-floor", "lots"}, `--gc-heap-floor: "lots": want off or a positive size such as 64MiB`},
		{nil, []string{"--debug-write-timeout", "0"}, `--debug-write-timeout: "0": want a positive duration`},
		{nil, []string{"--debug-profile-max", "-1s"}, `--debug-profile-max: "-1s": want a positive duration`},
		{nil, []string{"--grpc-keepalive-min-time", "0s"}, `--grpc-keepalive-min-time: "0s": want a positive duration`},
		{map[string]string{"RLS_GRPC_KEEPALIVE_PERMIT_WITHOUT_STREAM": "yes"}, nil, `RLS_GRPC_KEEPALIVE_PERMIT_WITHOUT_STREAM: "yes" is not a boolean`},
		{nil, []string{"--grpc-max-connection-idle", "-1m"}, `--grpc-max-connection-idle: "-1m"`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE_GRACE": "-1s"}, nil, `GRPC_MAX_CONNECTION_AGE_GRACE: "-1s"`},
		{nil, []string{"--grpc-max-concurrent-streams", "-1"}, `--grpc-max-concurrent-streams: "-1"`},
		{nil, []string{"--grpc-max-recv-bytes", "0"}, `--grpc-max-recv-bytes: "0": want a positive whole number`},
		{nil, []string{"--grpc-max-recv-bytes", "10MiB"}, `--grpc-max-recv-bytes: "10MiB"`},
		{nil, []string{"--grpc-max-recv-bytes", "4294967296"}, `--grpc-max-recv-bytes: "4294967296"`},
		{map[string]string{"RLS_MEMORY_LIMIT": "1GB"}, nil, `RLS_MEMORY_LIMIT: "1GB": want auto, off, or a positive size`},
		{nil, []string{"--memory-limit", "-1"}, `--memory-limit: "-1"`},
		{nil, []string{"--memory-limit", "0"}, `--memory-limit: "0"`},
		{nil, []string{"--extproc-stream-idle-timeout", "-1s"}, `--extproc-stream-idle-timeout: "-1s": want a duration of 0 or more`},
		{map[string]string{"RLS_EXTPROC_STREAM_IDLE_TIMEOUT": "5"}, nil, `RLS_EXTPROC_STREAM_IDLE_TIMEOUT: "5" is not a duration`},
	})
}

func TestHTTPConnCap(t *testing.T) {
	tests := []struct {
		max    int
		nofile uint64
		want   int
	}{
		{1024, 1 << 20, 1024},
		{1024, 1024, 256}, // a quarter of the descriptors at most
		{0, 20000, 5000},  // 0: that quarter
		{10, 20000, 10},
		{5, 2, 1}, // never 0
		{0, 0, 1024},
		{50, 0, 50},
	}
	for _, tt := range tests {
		if got := httpConnCap(tt.max, tt.nofile); got != tt.want {
			t.Errorf("httpConnCap(%d, %d) = %d, want %d", tt.max, tt.nofile, got, tt.want)
		}
	}
}
