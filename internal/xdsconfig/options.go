package xdsconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// Defaults, as envoyproxy/ratelimit has them (its settings.go).
const (
	DefaultServerURL       = "localhost:18000" // CONFIG_GRPC_XDS_SERVER_URL
	DefaultNodeID          = "default"         // CONFIG_GRPC_XDS_NODE_ID
	DefaultInitialInterval = 10 * time.Second  // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
	DefaultMaxInterval     = 60 * time.Second  // XDS_CLIENT_BACKOFF_MAX_INTERVAL
	DefaultRandomFactor    = 0.5               // XDS_CLIENT_BACKOFF_RANDOM_FACTOR
)

// Options configures a Client. The zero value connects in plaintext to
// DefaultServerURL as node DefaultNodeID with envoyproxy/ratelimit's
// backoff; each field says what its zero value means. The maps are read,
// never kept or changed, by New.
type Options struct {
	// ServerURL is the xDS server as a gRPC target: "host:port", or a
	// target with a scheme ("dns:///host:port"). Empty means
	// DefaultServerURL. (CONFIG_GRPC_XDS_SERVER_URL)
	ServerURL string
	// NodeID identifies this replica to the server, which picks the
	// resources by it. Empty means DefaultNodeID. (CONFIG_GRPC_XDS_NODE_ID)
	NodeID string
	// NodeMetadata is sent, as string values, in the node of the first
	// request of every stream. Nil sends none. ParseNodeMetadata reads
	// CONFIG_GRPC_XDS_NODE_METADATA.
	NodeMetadata map[string]string
	// Headers are added to the stream as gRPC metadata; nil adds none.
	// ParseHeaders reads CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS.
	Headers map[string]string

	// UseTLS connects over TLS; false is plaintext and the TLS fields
	// below must then be empty. (CONFIG_GRPC_XDS_SERVER_USE_TLS)
	UseTLS bool
	// ClientCert and ClientKey are PEM files of a client certificate, for
	// a server that requires mTLS; both or neither. Empty sends none.
	// (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY)
	ClientCert, ClientKey string
	// CACert is a PEM file of the CAs that may sign the server's
	// certificate. Empty trusts the system roots.
	// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)
	CACert string
	// ServerSAN is the name (DNS name or IP) the server's certificate must
	// carry. Empty means the host of ServerURL.
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN)
	ServerSAN string

	// InitialInterval is the delay before the first reconnection; each
	// failed attempt doubles it up to MaxInterval. Zero means
	// DefaultInitialInterval. (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)
	InitialInterval time.Duration
	// MaxInterval caps the delay. Zero means DefaultMaxInterval, or
	// InitialInterval when that is larger. (XDS_CLIENT_BACKOFF_MAX_INTERVAL)
	MaxInterval time.Duration
	// RandomFactor spreads each delay d uniformly over
	// [d·(1−RandomFactor), d·(1+RandomFactor)], never above MaxInterval.
	// It is in [0, 1]; zero means DefaultRandomFactor (use NoJitter for
	// none). (XDS_CLIENT_BACKOFF_RANDOM_FACTOR)
	RandomFactor float64
	// NoJitter turns the randomisation off: the delays are exactly
	// InitialInterval, twice that, and so on. False (the default) jitters,
	// as XDS_CLIENT_BACKOFF_JITTER=true does.
	NoJitter bool
	// Rand returns a number in [0, 1) for the jitter; nil uses
	// math/rand/v2. Tests pass a fixed source.
	Rand func() float64

	// Load are the options every set is compiled with, as the files are
	// loaded with them (MERGE_DOMAIN_CONFIG, SHADOW_MODE); the zero value
	// is policy.Compile's.
	Load policy.LoadOptions

	// MaxRecvMsgSize bounds one response from the server, in bytes; zero
	// means gRPC's default (4 MiB). (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)
	MaxRecvMsgSize int
	// Logger receives connection events, applied and rejected versions
	// and every problem of an applied set; nil discards them.
	Logger *slog.Logger
	// OnUpdate, when set, is called after every response the client
	// processed (applied or rejected), from Run's goroutine, after the
	// ACK or NACK was sent; not for a resend, identical but for its nonce,
	// of the response rejected just before. It must not block: the next
	// response waits for it. Use it for metrics and to learn of a new
	// snapshot.
	OnUpdate func(Update)
}

// Validate reports every field that cannot be used, naming the field and
// the environment variable of envoyproxy/ratelimit that sets it.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.ServerURL != "" && !strings.Contains(o.ServerURL, "://") && !strings.HasPrefix(o.ServerURL, "unix:") {
		if _, _, err := net.SplitHostPort(o.ServerURL); err != nil {
			bad("ServerURL (CONFIG_GRPC_XDS_SERVER_URL) %q: want host:port or a gRPC target with a scheme", o.ServerURL)
		}
	}
	if (o.ClientCert == "") != (o.ClientKey == "") {
		bad("ClientCert and ClientKey (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY): give both or neither")
	}
	if !o.UseTLS && (o.ClientCert != "" || o.ClientKey != "" || o.CACert != "" || o.ServerSAN != "") {
		bad("ClientCert, ClientKey, CACert and ServerSAN (CONFIG_GRPC_XDS_CLIENT_TLS_*, CONFIG_GRPC_XDS_SERVER_TLS_*) need UseTLS (CONFIG_GRPC_XDS_SERVER_USE_TLS)")
	}
	if o.InitialInterval < 0 {
		bad("InitialInterval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL) %v: must not be negative", o.InitialInterval)
	}
	if o.MaxInterval < 0 {
		bad("MaxInterval (XDS_CLIENT_BACKOFF_MAX_INTERVAL) %v: must not be negative", o.MaxInterval)
	}
	if o.InitialInterval > 0 && o.MaxInterval > 0 && o.MaxInterval < o.InitialInterval {
		bad("MaxInterval (XDS_CLIENT_BACKOFF_MAX_INTERVAL) %v is below InitialInterval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL) %v", o.MaxInterval, o.InitialInterval)
	}
	if o.RandomFactor < 0 || o.RandomFactor > 1 || math.IsNaN(o.RandomFactor) {
		bad("RandomFactor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR) %v: want a number from 0 to 1", o.RandomFactor)
	}
	if o.MaxRecvMsgSize < 0 {
		bad("MaxRecvMsgSize (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES) %d: must not be negative", o.MaxRecvMsgSize)
	}
	return errors.Join(errs...)
}

// withDefaults returns o with every zero value replaced by its default.
func (o Options) withDefaults() Options {
	if o.ServerURL == "" {
		o.ServerURL = DefaultServerURL
	}
	if o.NodeID == "" {
		o.NodeID = DefaultNodeID
	}
	if o.InitialInterval == 0 {
		o.InitialInterval = DefaultInitialInterval
	}
	if o.MaxInterval == 0 {
		o.MaxInterval = max(DefaultMaxInterval, o.InitialInterval)
	}
	if o.RandomFactor == 0 {
		o.RandomFactor = DefaultRandomFactor
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ParseNodeMetadata reads CONFIG_GRPC_XDS_NODE_METADATA: "k1=v1,k2=v2".
// Spaces around entries are trimmed and empty entries skipped; a value
// may contain '='. An entry without '=' or with an empty key is an error
// (envoyproxy/ratelimit drops it silently). Empty s gives nil.
func ParseNodeMetadata(s string) (map[string]string, error) {
	return parsePairs(s, "=")
}

// ParseHeaders reads CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, a map in
// envconfig's form: "k1:v1,k2:v2". The rules are ParseNodeMetadata's,
// with ':' for '='.
func ParseHeaders(s string) (map[string]string, error) {
	return parsePairs(s, ":")
}

func parsePairs(s, sep string) (map[string]string, error) {
	var out map[string]string
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, v, ok := strings.Cut(entry, sep)
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("entry %q: want key%svalue", entry, sep)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}
