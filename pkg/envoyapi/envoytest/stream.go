package envoytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultMessageTimeout is Envoy's default message_timeout.
const DefaultMessageTimeout = 200 * time.Millisecond

// Filter is the configuration of one emulated ext_proc filter instance.
type Filter struct {
	// Client reaches the processor.
	Client extprocv3.ExternalProcessorClient
	// Role is sent as the x-resil-role initial metadata (grpc_service
	// initial_metadata); empty sends none.
	Role string
	// InitialMetadata is the rest of grpc_service initial_metadata.
	InitialMetadata map[string]string
	// RequestBodyMode and ResponseBodyMode are the processing mode's body
	// modes; NONE, BUFFERED and STREAMED are emulated. Header modes are
	// SEND and trailers SKIP.
	RequestBodyMode, ResponseBodyMode extprocfilterv3.ProcessingMode_BodySendMode
	// ChunkSize splits a STREAMED body into chunks of at most this many
	// bytes, each its own message (the last with end_of_stream); zero
	// sends the body as one chunk.
	ChunkSize int
	// AllowModeOverride honours mode_override in headers responses.
	AllowModeOverride bool
	// Upstream places the filter in a cluster's upstream chain, where
	// clear_route_cache has no effect.
	Upstream bool
	// RequestAttributes and ResponseAttributes are sent once per direction,
	// on its first message, under "envoy.filters.http.ext_proc".
	RequestAttributes, ResponseAttributes map[string]string
	// MessageTimeout bounds the wait for each response; zero means
	// DefaultMessageTimeout.
	MessageTimeout time.Duration
	// Lenient only counts (as Envoy does) the mutations Envoy ignores;
	// by default they fail the exchange, since they are processor bugs.
	Lenient bool
	// ReceivingNamespaces is metadata_options.receiving_namespaces.untyped:
	// the dynamic metadata namespaces Envoy applies from responses; the
	// others are dropped (counted in Stats.DroppedMetadata).
	ReceivingNamespaces []string
}

// Request is an HTTP request as the filter sees it (pseudo-headers
// included), or as the router forwards it after processing.
type Request struct {
	Headers Headers
	Body    []byte
}

// Response is an HTTP response (":status" in Headers).
type Response struct {
	Headers Headers
	Body    []byte
}

// Stream is one ext_proc stream: one HTTP request through one filter.
type Stream struct {
	f      *Filter
	ctx    context.Context
	cancel context.CancelFunc
	grpc   extprocv3.ExternalProcessor_ProcessClient
	recv   chan received

	stats        Stats
	reqMode      extprocfilterv3.ProcessingMode_BodySendMode
	respMode     extprocfilterv3.ProcessingMode_BodySendMode
	sent         bool // the first message (protocol_config) went out
	respStarted  bool // the first response-path message went out
	closed       bool // the processor ended the stream: Envoy goes on unmodified
	routeCleared bool
	metadata     map[string]*structpb.Struct
}

type received struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

// Open starts a stream, as Envoy does at a request's first message.
func (f *Filter) Open(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	if f.Role != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-resil-role", f.Role)
	}
	for k, v := range f.InitialMetadata {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	g, err := f.Client.Process(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: open: %w", ErrRejected, err)
	}
	s := &Stream{f: f, ctx: ctx, cancel: cancel, grpc: g, recv: make(chan received, 1),
		reqMode: f.RequestBodyMode, respMode: f.ResponseBodyMode}
	go s.pump()
	return s, nil
}

// pump delivers the processor's messages until the stream ends.
func (s *Stream) pump() {
	for {
		r, err := s.grpc.Recv()
		select {
		case s.recv <- received{r, err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// DynamicMetadata is the stream's dynamic metadata by namespace: what the
// processor's responses set in the receiving namespaces, later values
// replacing earlier ones key by key.
func (s *Stream) DynamicMetadata() map[string]*structpb.Struct { return s.metadata }

// applyMetadata merges a response's dynamic metadata, as Envoy does for
// the receiving namespaces.
func (s *Stream) applyMetadata(md *structpb.Struct) {
	for ns, v := range md.GetFields() {
		if !slices.Contains(s.f.ReceivingNamespaces, ns) || v.GetStructValue() == nil {
			s.stats.DroppedMetadata++
			continue
		}
		if s.metadata == nil {
			s.metadata = map[string]*structpb.Struct{}
		}
		cur := s.metadata[ns]
		if cur == nil {
			cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			s.metadata[ns] = cur
		}
		for k, fv := range v.GetStructValue().GetFields() {
			cur.Fields[k] = fv
		}
	}
}

// Stats reports what Envoy would have counted on this stream.
func (s *Stream) Stats() Stats { return s.stats }

// RouteCleared reports whether a response cleared the route cache in a
// way Envoy honours.
func (s *Stream) RouteCleared() bool { return s.routeCleared }

// Closed reports whether the processor ended the stream early (Envoy
// then continues the request unmodified).
func (s *Stream) Closed() bool { return s.closed }

// Cancel resets the stream, as Envoy does when the downstream request is
// destroyed.
func (s *Stream) Cancel() { s.cancel() }

// Finish half-closes the stream after the last expected response and
// waits for the processor to end it. A further message is spurious.
func (s *Stream) Finish() error {
	defer s.cancel()
	if s.closed {
		return nil
	}
	if err := s.grpc.CloseSend(); err != nil {
		return fmt.Errorf("%w: close send: %w", ErrRejected, err)
	}
	select {
	case r := <-s.recv:
		switch {
		case r.err == nil:
			return fmt.Errorf("%w: spurious response after the last one: %v", ErrRejected, r.resp)
		case errors.Is(r.err, io.EOF):
			return nil
		}
		return fmt.Errorf("%w: stream ended with %w", ErrRejected, r.err)
	case <-time.After(s.timeout()):
		return fmt.Errorf("%w: processor did not end the stream after half-close", ErrTimeout)
	}
}

func (s *Stream) timeout() time.Duration {
	if s.f.MessageTimeout > 0 {
		return s.f.MessageTimeout
	}
	return DefaultMessageTimeout
}

// kind names the response a message expects.
type kind int

const (
	kindRequestHeaders kind = iota
	kindRequestBody
	kindResponseHeaders
	kindResponseBody
)

func (k kind) matches(r *extprocv3.ProcessingResponse) bool {
	switch r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		return true
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return k == kindRequestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		return k == kindRequestBody
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return k == kindResponseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		return k == kindResponseBody
	}
	return false
}

// exchange sends one message and waits for its one response. A nil
// response with a nil error means the processor closed the stream.
func (s *Stream) exchange(msg *extprocv3.ProcessingRequest, k kind) (*extprocv3.ProcessingResponse, error) {
	if s.closed {
		return nil, nil
	}
	s.decorate(msg, k)
	if err := s.grpc.Send(msg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: send: %w", ErrRejected, err)
	}
	s.stats.Messages++
	timer := time.NewTimer(s.timeout())
	defer timer.Stop()
	for {
		select {
		case r := <-s.recv:
			if errors.Is(r.err, io.EOF) {
				s.closed = true
				return nil, nil
			}
			if r.err != nil {
				return nil, fmt.Errorf("%w: gRPC error: %w", ErrRejected, r.err)
			}
			s.stats.Responses++
			if r.resp.GetOverrideMessageTimeout() != nil {
				continue // max_message_timeout is 0: ignored, the real answer follows
			}
			if !k.matches(r.resp) {
				return nil, fmt.Errorf("%w: spurious response %T to message kind %d", ErrRejected, r.resp.GetResponse(), k)
			}
			s.applyMetadata(r.resp.GetDynamicMetadata())
			return r.resp, nil
		case <-timer.C:
			return nil, ErrTimeout
		}
	}
}

// decorate adds what only some messages carry: protocol_config on the
// stream's first, attributes on each direction's first.
func (s *Stream) decorate(msg *extprocv3.ProcessingRequest, k kind) {
	if !s.sent {
		s.sent = true
		msg.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode: s.f.RequestBodyMode, ResponseBodyMode: s.f.ResponseBodyMode}
		msg.Attributes = attributes(s.f.RequestAttributes)
	}
	if k >= kindResponseHeaders && !s.respStarted {
		s.respStarted = true
		msg.Attributes = attributes(s.f.ResponseAttributes)
	}
}

func attributes(m map[string]string) map[string]*structpb.Struct {
	if len(m) == 0 {
		return nil
	}
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range m {
		st.Fields[k] = structpb.NewStringValue(v)
	}
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": st}
}
