package envoytest

import (
	"context"
	"io"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MemStream is an in-memory ext_proc server stream, for driving a
// server's Process without a network: inside a testing/synctest bubble,
// where loopback connections cannot run, or under a fuzzer. It stands
// for the gRPC stream only as far as Process uses it: Context, Recv and
// Send (the other grpc.ServerStream methods are not implemented and
// panic). Send takes a message the server may read; Responses are the
// messages the server sent, in order. Recv returns io.EOF after
// CloseSend and the context's status once it is cancelled. Build it
// with NewMemStream; the client side (Send, CloseSend, Cancel,
// Responses) belongs to one goroutine, the server side to another.
type MemStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
	in     chan *extprocv3.ProcessingRequest
	out    chan *extprocv3.ProcessingResponse
	closed chan struct{}
}

// NewMemStream opens a stream with the initial metadata kv (key, value
// pairs, such as "x-resil-role", "upstream"). It holds up to buffer
// responses the client has not read; a server sending more blocks until
// it does.
func NewMemStream(ctx context.Context, buffer int, kv ...string) *MemStream {
	if len(kv) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	ctx, cancel := context.WithCancel(ctx)
	return &MemStream{ctx: ctx, cancel: cancel, in: make(chan *extprocv3.ProcessingRequest),
		out: make(chan *extprocv3.ProcessingResponse, buffer), closed: make(chan struct{})}
}

// Context is the stream's context, cancelled by Cancel.
func (m *MemStream) Context() context.Context { return m.ctx }

// Recv is the server's read: the next message Send gave, io.EOF after
// CloseSend, or the cancelled context's status.
func (m *MemStream) Recv() (*extprocv3.ProcessingRequest, error) {
	select {
	case r := <-m.in:
		return r, nil
	case <-m.closed:
		return nil, io.EOF
	case <-m.ctx.Done():
		return nil, status.FromContextError(m.ctx.Err()).Err()
	}
}

// Send is the server's write.
func (m *MemStream) Send(r *extprocv3.ProcessingResponse) error {
	select {
	case m.out <- r:
		return nil
	case <-m.ctx.Done():
		return status.FromContextError(m.ctx.Err()).Err()
	}
}

// SendRequest hands req to the server's next Recv; it fails once the
// stream is cancelled.
func (m *MemStream) SendRequest(req *extprocv3.ProcessingRequest) error {
	select {
	case m.in <- req:
		return nil
	case <-m.ctx.Done():
		return m.ctx.Err()
	}
}

// CloseSend half-closes the stream, as Envoy does after the last
// response it expects. Call it once.
func (m *MemStream) CloseSend() { close(m.closed) }

// Cancel cancels the stream, as Envoy does when the request is gone.
func (m *MemStream) Cancel() { m.cancel() }

// Responses are the messages the server sent.
func (m *MemStream) Responses() <-chan *extprocv3.ProcessingResponse { return m.out }
