package envoyapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// SlotAcquirer hands out concurrency slots and tells how many are
// taken; *limiter.Limiter is one.
type SlotAcquirer = routing.Slots

// Breakers admits targets and learns from their outcomes;
// *resilience.Registry is one.
type Breakers = routing.Breakers

// ExtProcDeps are the collaborators of the ext_proc server. A nil field
// turns its concern off: no rate or token limits, no concurrency caps, no
// breakers.
type ExtProcDeps struct {
	// Limits decides the targets' rate limits and charges their token
	// budgets.
	Limits Decider
	// Slots caps the targets' in-flight requests.
	Slots SlotAcquirer
	// Breakers keeps the target and provider circuit breakers. The
	// downstream role asks it, the upstream role feeds it.
	Breakers Breakers
	// Now tells the time for retry hints given as dates; nil means
	// time.Now.
	Now func() time.Time
	// StreamIdleTimeout ends a stream on which Envoy sends no message for
	// that long (DEADLINE_EXCEEDED), giving back its slot and settling
	// its token reservation; 0 waits for ever. DefaultStreamIdleTimeout
	// is the service's default.
	StreamIdleTimeout time.Duration
}

// ExtProc serves envoy.service.ext_proc.v3.ExternalProcessor in two roles,
// chosen per stream by the gRPC initial metadata x-resil-role:
// "downstream" (the default; before the router: picks the serving target
// of a fallback chain and enforces its limits) or "upstream" (in a
// cluster's upstream filter chain, once per attempt: classifies the
// response, feeds the breakers and asks Envoy to retry). It is safe for
// concurrent use; each stream's state is its own. Build it with NewExtProc.
type ExtProc struct {
	policies Policies
	route    *routing.Router
	log      *slog.Logger
	metrics  *extProcMetrics
	lost     *lostAttempts
	idle     time.Duration // StreamIdleTimeout
}

// NewExtProc builds the ext_proc server over the policies in force (their
// targets) and its collaborators.
func NewExtProc(p Policies, deps ExtProcDeps, opts ...Option) *ExtProc {
	o := newOptions(opts)
	route := routing.New(routing.Deps{Limits: deps.Limits, Slots: deps.Slots, Breakers: deps.Breakers, Now: deps.Now})
	return &ExtProc{policies: p, route: route, log: o.log, metrics: newExtProcMetrics(o.meter), lost: &lostAttempts{},
		idle: deps.StreamIdleTimeout}
}

// RegisterExtProc registers x as envoy.service.ext_proc.v3.ExternalProcessor.
func RegisterExtProc(r grpc.ServiceRegistrar, x *ExtProc) {
	extprocv3.RegisterExternalProcessorServer(r, x)
}

// SlotKey is the concurrency key of a target, as passed to
// SlotAcquirer.Acquire: operators and tests read InUse with it.
func SlotKey(target string) string { return routing.SlotKey(target) }

// The roles, as the x-resil-role metadata names them.
const (
	roleKey        = "x-resil-role"
	reselectKey    = "x-resil-reselect" // "true": Envoy re-selects each retry's cluster
	roleDownstream = "downstream"
	roleUpstream   = "upstream"
)

// phases is one stream's role: one handler per message kind Envoy sends.
// Each returns the one response Envoy expects for that message.
type phases interface {
	requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	requestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	responseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	// end runs once when the stream is over, however it ended.
	end()
}

// Process runs one stream: one HTTP request seen by one filter instance.
// Half-close (io.EOF) and cancellation are normal ends and return nil; a
// stream on which Envoy sends nothing for the idle timeout ends with
// DEADLINE_EXCEEDED.
func (x *ExtProc) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	ph := x.phasesFor(ctx)
	defer ph.end()
	in := newIdleReader(stream, x.idle)
	defer in.stop()
	var order phaseOrder
	for {
		req, err := in.recv()
		if errors.Is(err, errStreamIdle) {
			x.metrics.verdict(ctx, roleOf(ph), "stream_idle")
			x.log.LogAttrs(ctx, slog.LevelInfo, "ext_proc stream idle: ended", slog.Duration("timeout", x.idle))
			return streamIdleError(x.idle)
		}
		if err != nil {
			return streamEnd(err)
		}
		err = order.admit(req)
		var resp *extprocv3.ProcessingResponse
		if err == nil {
			resp, err = dispatch(ph, req)
		}
		if err != nil {
			x.log.LogAttrs(ctx, slog.LevelWarn, "ext_proc stream failed", slog.Any("error", err))
			return toStatus(err)
		}
		if resp == nil || req.GetObservabilityMode() {
			continue
		}
		if err := stream.Send(resp); err != nil {
			return streamEnd(err)
		}
	}
}

// phasesFor picks the stream's role from its initial metadata.
func (x *ExtProc) phasesFor(ctx context.Context) phases {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(roleKey); len(v) > 0 && v[0] == roleUpstream {
		r := md.Get(reselectKey)
		return &upstream{x: x, ctx: ctx, reselect: len(r) > 0 && r[0] == "true"}
	}
	return &downstream{x: x, ctx: ctx}
}

// roleOf names a stream's role, as the metrics label it.
func roleOf(ph phases) string {
	if _, ok := ph.(*upstream); ok {
		return roleUpstream
	}
	return roleDownstream
}

// dispatch hands a message to its phase. Trailers pass untouched.
func dispatch(ph phases, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return ph.requestHeaders(req, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return ph.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return ph.responseHeaders(req, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return ph.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}, nil
	}
	return nil, fmt.Errorf("%w: processing request of unknown kind %T", errBadRequest, req.GetRequest())
}

// streamEnd maps a Recv or Send error to Process's result: the peer's
// half-close and cancellation end the stream normally.
func streamEnd(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, context.Canceled):
		return nil
	case status.Code(err) == codes.Canceled:
		return nil
	}
	return err
}
