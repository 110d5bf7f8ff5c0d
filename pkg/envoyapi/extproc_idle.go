package envoyapi

import (
	"errors"
	"fmt"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultStreamIdleTimeout is the stream idle timeout the service's flag
// defaults to: far above the gap between two chunks of a slow generation
// and above the time a reasoning model takes to its first byte, during
// which Envoy has nothing to send either.
const DefaultStreamIdleTimeout = 5 * time.Minute

// errStreamIdle: Envoy sent nothing for the idle timeout.
var errStreamIdle = errors.New("stream idle")

// received is one Recv's result, handed from the reading goroutine.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// idleReader reads a stream's messages and ends the wait for one after
// the idle timeout. A goroutine blocked in Recv cannot be woken, so with
// a timeout the reads run in a goroutine of their own that hands each
// message over; it stops at the first Recv error, which gRPC gives it at
// the latest when Process returns and the stream's context is cancelled.
// It reads at most one message ahead. Without a timeout Recv is called
// directly. An idleReader is used by Process's goroutine only.
type idleReader struct {
	stream extprocv3.ExternalProcessor_ProcessServer
	idle   time.Duration
	msgs   chan received
	done   chan struct{}
	timer  *time.Timer
}

func newIdleReader(stream extprocv3.ExternalProcessor_ProcessServer, idle time.Duration) *idleReader {
	r := &idleReader{stream: stream, idle: idle}
	if idle <= 0 {
		return r
	}
	r.msgs, r.done = make(chan received), make(chan struct{})
	r.timer = time.NewTimer(idle)
	go r.pump()
	return r
}

func (r *idleReader) pump() {
	for {
		req, err := r.stream.Recv()
		select {
		case r.msgs <- received{req, err}:
		case <-r.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// recv waits for the next message. The wait starts afresh at every call:
// the time the server takes to answer does not count against Envoy. A
// wait longer than the idle timeout fails with errStreamIdle.
func (r *idleReader) recv() (*extprocv3.ProcessingRequest, error) {
	if r.msgs == nil {
		return r.stream.Recv()
	}
	r.timer.Reset(r.idle)
	select {
	case m := <-r.msgs:
		return m.req, m.err
	case <-r.timer.C:
		return nil, errStreamIdle
	}
}

// stop releases the reading goroutine from its hand-over and the timer.
func (r *idleReader) stop() {
	if r.done != nil {
		close(r.done)
		r.timer.Stop()
	}
}

// streamIdleError is the status a silent stream ends with.
// DEADLINE_EXCEEDED: Envoy handles every non-OK status alike (a local
// reply with status_on_error, or going on unprocessed with
// failure_mode_allow), and shows the code in the response's details as
// ext_proc_error_gRPC_error_4, which reads as a timeout, where CANCELLED
// would look like a stream the peer itself gave up. An OK end would let
// the request go on with its response unprocessed (internal headers
// left in, no token settlement).
func streamIdleError(idle time.Duration) error {
	return status.Error(codes.DeadlineExceeded, fmt.Sprintf("ext_proc stream: no message for %v (stream idle timeout)", idle))
}
