package xdsconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// TypeURL is the resource type the client subscribes to:
// "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig".
var TypeURL = "type.googleapis.com/" + string((&rlsconf.RateLimitConfig{}).ProtoReflect().Descriptor().FullName())

// SourceType names this source in Status, as envoyproxy/ratelimit's
// CONFIG_TYPE does.
const SourceType = "GRPC_XDS_SOTW"

// Client keeps a policy snapshot current from an xDS server. Create it
// with New and run it with Run; Current, Ready, HasConfig and Status are
// safe for concurrent use at any time.
type Client struct {
	opts  Options
	log   *slog.Logger
	back  backoff
	cur   atomic.Pointer[policy.Snapshot]
	ready chan struct{}
	once  sync.Once
	run   atomic.Bool

	// Run's goroutine only:
	applied  string         // version_info of the current set
	rejected *lastRejection // the response rejected last on this stream

	mu     sync.Mutex
	status Status
}

// New checks opts and returns a client holding an empty snapshot. With
// UseTLS it reads the TLS files once, so that a bad path fails here; they
// are read again on every connection, which picks up rotated files.
func New(opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("xdsconfig: %w", err)
	}
	o := opts.withDefaults()
	if o.UseTLS {
		if _, err := tlsConfig(o); err != nil {
			return nil, fmt.Errorf("xdsconfig: %w", err)
		}
	}
	b := backoff{initial: o.InitialInterval, max: o.MaxInterval, rand: o.Rand}
	if !o.NoJitter {
		b.factor = o.RandomFactor
	}
	if b.rand == nil {
		b.rand = rand.Float64
	}
	c := &Client{opts: o, log: o.Logger.With("server", o.ServerURL), back: b, ready: make(chan struct{})}
	c.cur.Store(policy.CompileWith(o.Load))
	c.status = Status{Type: SourceType, ServerURL: o.ServerURL, NodeID: o.NodeID, TLS: o.UseTLS}
	return c, nil
}

// Current returns the snapshot of the last applied set: an empty one
// until the first. It never returns nil and never blocks.
func (c *Client) Current() *policy.Snapshot { return c.cur.Load() }

// Ready returns a channel closed once a first set was applied.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// HasConfig reports whether a first set was applied.
func (c *Client) HasConfig() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// Status describes the source for operators (/debug/config).
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Resources = append([]string(nil), s.Resources...)
	if s.Rejected != nil {
		r := *s.Rejected
		s.Rejected = &r
	}
	return s
}

// Run holds a stream to the server, reconnecting with backoff, until ctx
// ends; then it returns nil. It must not be called twice at once.
func (c *Client) Run(ctx context.Context) error {
	if !c.run.CompareAndSwap(false, true) {
		return errors.New("xdsconfig: Run is already running")
	}
	defer c.run.Store(false)
	c.log.Info("xDS config client starting", "node", c.opts.NodeID, "tls", c.opts.UseTLS)
	attempt := 0
	for {
		answered, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if answered {
			attempt = 0
		}
		d := c.back.delay(attempt)
		attempt++
		c.streamEnded(err)
		c.log.Warn("xDS stream ended; reconnecting", "error", err, "retry_in", d)
		if sleep(ctx, d) != nil {
			return nil
		}
	}
}

// session runs one connection and stream until it fails; answered is set
// when a response arrived on it.
func (c *Client) session(ctx context.Context) (answered bool, err error) {
	creds, err := transportCredentials(c.opts)
	if err != nil {
		return false, err
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.opts.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.opts.ServerURL, dial...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.opts.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(c.opts.Headers))
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	defer c.setConnected(false)
	c.rejected = nil
	if err := send(stream, c.firstRequest()); err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return answered, err
		}
		if !answered {
			answered = true
			c.setConnected(true)
			c.log.Info("xDS stream established", "node", c.opts.NodeID)
		}
		req, u, ok, repeats := c.handle(resp)
		if repeats > 0 {
			if err := sleep(sctx, nackPace(repeats)); err != nil {
				return answered, err
			}
		}
		err = send(stream, req)
		if ok && c.opts.OnUpdate != nil {
			c.opts.OnUpdate(u)
		}
		if err != nil {
			return answered, err
		}
	}
}

// sleep waits for d or until ctx ends, and then returns its error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// send sends req; when the stream is already broken it returns the
// stream's status rather than io.EOF.
func send(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, req *discovery.DiscoveryRequest) error {
	err := stream.Send(req)
	if errors.Is(err, io.EOF) {
		_, err = stream.Recv()
	}
	return err
}

// firstRequest opens the subscription: the node, the wildcard
// subscription and the version held, if any.
func (c *Client) firstRequest() *discovery.DiscoveryRequest {
	node := &core.Node{Id: c.opts.NodeID, UserAgentName: "ratelimit-svc"}
	if len(c.opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(c.opts.NodeMetadata))
		for k, v := range c.opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	return &discovery.DiscoveryRequest{Node: node, TypeUrl: TypeURL, VersionInfo: c.applied}
}

func (c *Client) setConnected(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status.Connected = up
}

func (c *Client) streamEnded(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status.Reconnects++
	if err != nil {
		c.status.LastError = err.Error()
	}
}
