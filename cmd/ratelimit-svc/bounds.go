package main

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
)

// bounds are what the service allows a client before it times out, sheds
// or refuses it: HTTP timeouts and connection caps, gRPC keepalive, stream
// and message bounds, the debug key listing's size and the soft memory
// limit. Each is a flag with an RLS_* variable and a default (boundFlags);
// the zero value is no bound at all, so config always fills it from them.
type bounds struct {
	// HTTPReadTimeout, HTTPReadHeaderTimeout, HTTPWriteTimeout and
	// HTTPIdleTimeout are net/http's, on the HTTP, Prometheus and debug
	// ports; the debug port writes within DebugWriteTimeout instead.
	HTTPReadTimeout, HTTPReadHeaderTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	// HTTPMaxConns caps the connections the HTTP and Prometheus ports hold
	// together; the cap in force is also at most a quarter of the file
	// descriptor limit (httpConnCap). 0: that quarter.
	HTTPMaxConns int
	// DebugWriteTimeout bounds writing a debug page; pprof adds its
	// ?seconds= to it.
	DebugWriteTimeout time.Duration
	// DebugProfileMax is the longest pprof ?seconds= accepted.
	DebugProfileMax time.Duration
	// DebugMaxConns caps the debug port's connections.
	DebugMaxConns int
	// DebugKeysMax is the largest ?limit= /debug/keys accepts.
	DebugKeysMax int
	// GRPCKeepaliveMinTime and GRPCKeepaliveWithoutStream are the
	// keepalive enforcement policy: a client that pings more often, or
	// with no call open when that is not permitted, is sent GOAWAY.
	GRPCKeepaliveMinTime       time.Duration
	GRPCKeepaliveWithoutStream bool
	// GRPCMaxConnIdle closes a connection with no call for that long
	// (GOAWAY); 0: never.
	GRPCMaxConnIdle time.Duration
	// GRPCMaxConnAge (GRPC_MAX_CONNECTION_AGE), when set, closes gRPC
	// connections after that long (GOAWAY, then GRPCMaxConnAgeGrace for
	// calls in flight, 0: no bound), so that clients spread over new
	// replicas.
	GRPCMaxConnAge, GRPCMaxConnAgeGrace time.Duration
	// GRPCMaxStreams caps the calls open at once on one connection;
	// 0: gRPC's, no cap.
	GRPCMaxStreams int
	// GRPCMaxRecvBytes is the largest message the gRPC server reads.
	GRPCMaxRecvBytes int
	// MemoryLimit is --memory-limit: the runtime's soft memory limit.
	MemoryLimit memoryLimit
	// GCHeapFloor is the heap the garbage collector lets grow before it
	// collects (gcTuner); 0: Go's default.
	GCHeapFloor uint64
	// RLS is what one ShouldRateLimit request may ask: descriptors,
	// entries, the size of a key or value, the longest override window.
	RLS envoyapi.RequestBounds
	// MaxKeys is the most rate limit keys a replica holds; at the bound a
	// request for a key not held is denied (limiter.WithMaxKeys).
	MaxKeys int
	// ExtProcStreamIdle ends an ext_proc stream on which Envoy sends
	// nothing for that long, freeing its slot; 0: never.
	ExtProcStreamIdle time.Duration
}

// boundFlag is one bound's flag: its variable, default, help and parser.
type boundFlag struct {
	name, env, def, usage string
	upstream              []string // envoyproxy/ratelimit's variables, after ours
	parse                 func(b *bounds, s string) error
}

// boundFlags are the bounds' flags, in -help order.
var boundFlags = []boundFlag{
	{name: "http-read-timeout", env: "RLS_HTTP_READ_TIMEOUT", def: "30s",
		usage: "bound on reading a whole request on the HTTP, Prometheus and debug ports; 0: none", parse: durationOf(fHTTPRead, 0)},
	{name: "http-read-header-timeout", env: "RLS_HTTP_READ_HEADER_TIMEOUT", def: "10s",
		usage: "bound on reading a request's headers; 0: --http-read-timeout", parse: durationOf(fHTTPHeader, 0)},
	{name: "http-write-timeout", env: "RLS_HTTP_WRITE_TIMEOUT", def: "30s",
		usage: "bound on writing a response on the HTTP and Prometheus ports; 0: none", parse: durationOf(fHTTPWrite, 0)},
	{name: "http-idle-timeout", env: "RLS_HTTP_IDLE_TIMEOUT", def: "120s",
		usage: "an idle keep-alive HTTP connection is closed after this; 0: --http-read-timeout", parse: durationOf(fHTTPIdle, 0)},
	{name: "http-max-conns", env: "RLS_HTTP_MAX_CONNS", def: "1024",
		usage: "connections the HTTP and Prometheus ports hold together, at most a quarter of RLIMIT_NOFILE; more are closed at once; 0: that quarter", parse: intOf(fHTTPConns, 0)},
	{name: "debug-write-timeout", env: "RLS_DEBUG_WRITE_TIMEOUT", def: "30s",
		usage: "bound on writing a debug page (pprof adds its ?seconds=)", parse: durationOf(fDebugWrite, 1)},
	{name: "debug-profile-max", env: "RLS_DEBUG_PROFILE_MAX", def: "60s",
		usage: "the longest pprof profile or trace (?seconds=) the debug port takes", parse: durationOf(fProfileMax, 1)},
	{name: "debug-max-conns", env: "RLS_DEBUG_MAX_CONNS", def: "16",
		usage: "connections the debug port holds; more are closed at once", parse: intOf(fDebugConns, 1)},
	{name: "debug-keys-max", env: "RLS_DEBUG_KEYS_MAX", def: "10000",
		usage: "the largest ?limit= of /debug/keys", parse: intOf(fDebugKeys, 1)},
	{name: "grpc-keepalive-min-time", env: "RLS_GRPC_KEEPALIVE_MIN_TIME", def: "10s",
		usage: "a gRPC client pinging more often than this is sent GOAWAY", parse: durationOf(fKeepaliveMin, 1)},
	{name: "grpc-keepalive-permit-without-stream", env: "RLS_GRPC_KEEPALIVE_PERMIT_WITHOUT_STREAM", def: "true",
		usage: "gRPC clients may ping with no call open", parse: parseKeepaliveWithoutStream},
	{name: "grpc-max-connection-idle", env: "RLS_GRPC_MAX_CONNECTION_IDLE", def: "15m",
		usage: "a gRPC connection with no call for this long is closed (GOAWAY); 0: never", parse: durationOf(fConnIdle, 0)},
	{name: "grpc-max-connection-age", env: "RLS_GRPC_MAX_CONNECTION_AGE", def: "0", upstream: []string{"GRPC_MAX_CONNECTION_AGE"},
		usage: "a gRPC connection is closed (GOAWAY) after this long; 0: never", parse: durationOf(fConnAge, 0)},
	{name: "grpc-max-connection-age-grace", env: "RLS_GRPC_MAX_CONNECTION_AGE_GRACE", def: "0", upstream: []string{"GRPC_MAX_CONNECTION_AGE_GRACE"},
		usage: "after --grpc-max-connection-age, calls in flight get this long; 0: no bound", parse: durationOf(fConnAgeGrace, 0)},
	{name: "grpc-max-concurrent-streams", env: "RLS_GRPC_MAX_CONCURRENT_STREAMS", def: "1024",
		usage: "gRPC calls open at once on one connection; 0: no cap", parse: intOf(fStreams, 0)},
	{name: "grpc-max-recv-bytes", env: "RLS_GRPC_MAX_RECV_BYTES", def: strconv.Itoa(10 << 20),
		usage: "the largest gRPC message read (a buffered ext_proc body and its framing); larger ones fail RESOURCE_EXHAUSTED", parse: intOf(fRecvBytes, 1)},
	{name: "gc-heap-floor", env: "RLS_GC_HEAP_FLOOR", def: "64MiB",
		usage: "heap the garbage collector lets grow before it collects, for a small live heap (GOGC set in the environment wins); off: Go's default", parse: parseHeapFloorFlag},
	{name: "rls-max-descriptors", env: "RLS_RLS_MAX_DESCRIPTORS", def: strconv.Itoa(envoyapi.DefaultMaxDescriptors),
		usage: "descriptors one ShouldRateLimit request may carry; more: INVALID_ARGUMENT", parse: intOf(fRLSDescriptors, 1)},
	{name: "rls-max-entries", env: "RLS_RLS_MAX_ENTRIES", def: strconv.Itoa(envoyapi.DefaultMaxEntries),
		usage: "descriptor entries one ShouldRateLimit request may carry in all; more: INVALID_ARGUMENT", parse: intOf(fRLSEntries, 1)},
	{name: "rls-max-value-bytes", env: "RLS_RLS_MAX_VALUE_BYTES", def: strconv.Itoa(envoyapi.DefaultMaxValueBytes),
		usage: "bytes of a descriptor entry's key or value (each distinct value is a key held); more: INVALID_ARGUMENT", parse: intOf(fRLSValueBytes, 1)},
	{name: "rls-max-override-period", env: "RLS_RLS_MAX_OVERRIDE_PERIOD", def: envoyapi.DefaultMaxOverridePeriod.String(),
		usage: "longest window a descriptor's limit override may ask for (a key and its Redis record live as long as it); longer: INVALID_ARGUMENT", parse: rlsOverridePeriod},
	{name: "extproc-stream-idle-timeout", env: "RLS_EXTPROC_STREAM_IDLE_TIMEOUT", def: envoyapi.DefaultStreamIdleTimeout.String(),
		usage: "an ext_proc stream on which Envoy sends nothing for this long is ended (DEADLINE_EXCEEDED) and its concurrency slot freed; well above a generation's longest pause; 0: never", parse: durationOf(fStreamIdle, 0)},
	{name: "max-keys", env: "RLS_MAX_KEYS", def: "1000000",
		usage: "rate limit keys a replica holds (about 500 bytes each); at the bound a request that would charge a key not held is denied and counted (mode \"full\")", parse: intOf(fMaxKeys, 1)},
	{name: "memory-limit", env: "RLS_MEMORY_LIMIT", def: "auto",
		usage: "soft memory limit: auto (GOMEMLIMIT, else 90% of the container's cgroup limit), off, or a size such as 512MiB", parse: parseMemoryFlag},
}

// The fields boundFlags set.
func fHTTPRead(b *bounds) *time.Duration     { return &b.HTTPReadTimeout }
func fHTTPHeader(b *bounds) *time.Duration   { return &b.HTTPReadHeaderTimeout }
func fHTTPWrite(b *bounds) *time.Duration    { return &b.HTTPWriteTimeout }
func fHTTPIdle(b *bounds) *time.Duration     { return &b.HTTPIdleTimeout }
func fDebugWrite(b *bounds) *time.Duration   { return &b.DebugWriteTimeout }
func fProfileMax(b *bounds) *time.Duration   { return &b.DebugProfileMax }
func fKeepaliveMin(b *bounds) *time.Duration { return &b.GRPCKeepaliveMinTime }
func fConnIdle(b *bounds) *time.Duration     { return &b.GRPCMaxConnIdle }
func fConnAge(b *bounds) *time.Duration      { return &b.GRPCMaxConnAge }
func fConnAgeGrace(b *bounds) *time.Duration { return &b.GRPCMaxConnAgeGrace }
func fHTTPConns(b *bounds) *int              { return &b.HTTPMaxConns }
func fDebugConns(b *bounds) *int             { return &b.DebugMaxConns }
func fDebugKeys(b *bounds) *int              { return &b.DebugKeysMax }
func fStreams(b *bounds) *int                { return &b.GRPCMaxStreams }
func fRecvBytes(b *bounds) *int              { return &b.GRPCMaxRecvBytes }
func fMaxKeys(b *bounds) *int                { return &b.MaxKeys }
func fStreamIdle(b *bounds) *time.Duration   { return &b.ExtProcStreamIdle }
func fRLSDescriptors(b *bounds) *int         { return &b.RLS.MaxDescriptors }
func fRLSEntries(b *bounds) *int             { return &b.RLS.MaxEntries }
func fRLSValueBytes(b *bounds) *int          { return &b.RLS.MaxValueBytes }
func rlsOverridePeriod(b *bounds, s string) error {
	return durationOf(func(b *bounds) *time.Duration { return &b.RLS.MaxOverridePeriod }, 1)(b, s)
}
func parseHeapFloorFlag(b *bounds, s string) (err error) {
	b.GCHeapFloor, err = parseHeapFloor(s)
	return err
}
func parseMemoryFlag(b *bounds, s string) (err error) {
	b.MemoryLimit, err = parseMemoryLimit(s)
	return err
}

// durationOf parses a duration of at least min (0 or 1ns) into field.
func durationOf(field func(*bounds) *time.Duration, min time.Duration) func(*bounds, string) error {
	return func(b *bounds, s string) error {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return fmt.Errorf("%q is not a duration", s)
		case d < min && min > 0:
			return fmt.Errorf("%q: want a positive duration", s)
		case d < 0:
			return fmt.Errorf("%q: want a duration of 0 or more", s)
		}
		*field(b) = d
		return nil
	}
}

// intOf parses an integer of at least min (0 or 1) into field.
func intOf(field func(*bounds) *int, min int) func(*bounds, string) error {
	return func(b *bounds, s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < int64(min) {
			what := "a whole number of 0 or more"
			if min > 0 {
				what = "a positive whole number"
			}
			return fmt.Errorf("%q: want %s (at most %d)", s, what, math.MaxInt32)
		}
		*field(b) = int(n)
		return nil
	}
}

func parseKeepaliveWithoutStream(b *bounds, s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean (want true or false)", s)
	}
	b.GRPCKeepaliveWithoutStream = v
	return nil
}

// bounds reads the bounds' variables into their flags' defaults.
func (r *envReader) bounds() {
	for _, f := range boundFlags {
		r.plain(f.name, f.def, append([]string{f.env}, f.upstream...)...)
	}
}

// parseBounds parses the bounds' flag values raw (in boundFlags order)
// into c; each problem names the flag or variable that set it.
func (c *config) parseBounds(raw []string) []error {
	var errs []error
	for i, f := range boundFlags {
		if err := f.parse(&c.bounds, raw[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.src(f.name), err))
		}
	}
	return errs
}

// httpServer serves h within the HTTP timeouts, writing within write.
func (b bounds) httpServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadTimeout: b.HTTPReadTimeout, ReadHeaderTimeout: b.HTTPReadHeaderTimeout,
		WriteTimeout: write, IdleTimeout: b.HTTPIdleTimeout}
}

// grpcOptions are the gRPC server's bounds: keepalive enforcement and
// parameters, concurrent streams and the largest message read.
func (b bounds) grpcOptions() []grpc.ServerOption {
	params := keepalive.ServerParameters{MaxConnectionIdle: b.GRPCMaxConnIdle,
		MaxConnectionAge: b.GRPCMaxConnAge, MaxConnectionAgeGrace: b.GRPCMaxConnAgeGrace}
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: b.GRPCKeepaliveMinTime, PermitWithoutStream: b.GRPCKeepaliveWithoutStream}),
		grpc.KeepaliveParams(params),
		grpc.MaxRecvMsgSize(b.GRPCMaxRecvBytes),
		envoyapi.ServerCodec(),
	}
	if b.GRPCMaxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(b.GRPCMaxStreams)))
	}
	return opts
}

// httpConnCap is the cap on the HTTP ports' connections: max, but at most
// a quarter of the file descriptor limit nofile, so that the HTTP ports
// never take the descriptors the gRPC port and Redis need; max 0 means
// that quarter. nofile 0 (unknown) leaves max, or 1024 for 0.
func httpConnCap(max int, nofile uint64) int {
	if nofile == 0 {
		if max == 0 {
			return 1024
		}
		return max
	}
	quarter := int(min(nofile/4, math.MaxInt32))
	if quarter < 1 {
		quarter = 1
	}
	if max == 0 || max > quarter {
		return quarter
	}
	return max
}
