package envoyapi_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// idleServer is an ext_proc server over targetsPolicy with real slots
// and the given stream idle timeout.
func idleServer(t testing.TB, idle time.Duration) (*envoyapi.ExtProc, *limiter.Limiter) {
	t.Helper()
	snap := policy.Compile(policy.File{Name: "targets.yaml", Data: []byte(targetsPolicy)})
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("test policy: %v", snap.Problems())
	}
	lim := limiter.New()
	x := envoyapi.NewExtProc(staticPolicies{snap}, envoyapi.ExtProcDeps{Limits: lim, Slots: lim, StreamIdleTimeout: idle})
	return x, lim
}

func headersMsg(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: envoytest.H(kv...).Proto(), EndOfStream: eos}}}
}

func respHeadersMsg(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: envoytest.H(kv...).Proto()}}}
}

func respChunkMsg(chunk string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: eos}}}
}

// exchangeMem sends req and reads its one response; inside a bubble.
func exchangeMem(t *testing.T, s *envoytest.MemStream, req *extprocv3.ProcessingRequest) {
	t.Helper()
	if err := s.SendRequest(req); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	select {
	case <-s.Responses():
	default:
		t.Fatalf("no response to %T", req.GetRequest())
	}
}

// TestExtProcStreamIdle: a stream whose messages keep coming (a slow
// generation, a chunk every 59 s) stays open and holds its slot however
// long it lasts; once Envoy goes silent for the idle timeout the stream
// ends with DEADLINE_EXCEEDED and the slot is back, at the timeout to
// the nanosecond. The reading goroutine ends with the stream (the
// bubble would not end otherwise).
func TestExtProcStreamIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Minute
		x, lim := idleServer(t, idle)
		s := envoytest.NewMemStream(context.Background(), 4, "x-resil-role", "downstream")
		done := make(chan error, 1)
		go func() { done <- x.Process(s) }()
		exchangeMem(t, s, headersMsg(true, "x-resil-target", "narrow"))
		exchangeMem(t, s, respHeadersMsg(":status", "200", "content-type", "text/event-stream"))
		for range 10 {
			time.Sleep(idle - time.Second)
			exchangeMem(t, s, respChunkMsg("data: {}\n\n", false))
		}
		if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
			t.Fatalf("slots in use %d after 10 minutes of chunks, want 1", n)
		}
		start := time.Now()
		time.Sleep(idle - time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("stream ended before the idle timeout: %v", err)
		default:
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		var err error
		select {
		case err = <-done:
		default:
			t.Fatal("silent stream still open after the idle timeout")
		}
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("Process: %v, want DeadlineExceeded", err)
		}
		if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 0 {
			t.Fatalf("slots in use %d after the idle end, want 0", n)
		}
		t.Logf("time to free a stuck slot: %v (fake clock)", time.Since(start))
		s.Cancel() // gRPC cancels the stream when Process returns
	})
}

// TestExtProcStreamIdleOff: without a timeout a silent stream waits for
// ever, as before.
func TestExtProcStreamIdleOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x, lim := idleServer(t, 0)
		s := envoytest.NewMemStream(context.Background(), 4, "x-resil-role", "downstream")
		done := make(chan error, 1)
		go func() { done <- x.Process(s) }()
		exchangeMem(t, s, headersMsg(true, "x-resil-target", "narrow"))
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("stream ended without a timeout: %v", err)
		default:
		}
		if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
			t.Fatalf("slots in use %d, want 1", n)
		}
		s.CloseSend()
		if err := <-done; err != nil {
			t.Fatalf("Process after half-close: %v", err)
		}
		if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 0 {
			t.Fatalf("slots in use %d after half-close, want 0", n)
		}
	})
}

// TestExtProcStreamIdleLoopback: over a real connection, a stream that
// took narrow's only slot and went silent is ended with
// DEADLINE_EXCEEDED after the timeout; the slot comes back exactly once:
// the next request gets it, and the one after is refused for the cap.
func TestExtProcStreamIdleLoopback(t *testing.T) {
	const idle = time.Second // the second request below must finish within it
	x, lim := idleServer(t, idle)
	conn := envoytest.Loopback(t, func(s *grpc.Server) { envoyapi.RegisterExtProc(s, x) })
	client := extprocv3.NewExternalProcessorClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-resil-role", "downstream")
	g, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The server waits afresh for the next message once it has answered
	// this one, which may be before the answer reaches this side: the
	// wait is timed from before the message is sent. Timed from its
	// answer's arrival, it ended 65 µs short of the timeout on a busy
	// machine.
	start := time.Now()
	if err := g.Send(headersMsg(true, "x-resil-target", "narrow")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
		t.Fatalf("slots in use %d, want 1", n)
	}
	_, err = g.Recv()
	ended := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("silent stream: %v, want DeadlineExceeded", err)
	}
	if ended < idle {
		t.Fatalf("stream ended after %v, before the idle timeout %v", ended, idle)
	}
	deadline := time.Now().Add(10 * time.Second)
	for lim.InUse(envoyapi.SlotKey("narrow")) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("slot not given back after the idle end")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("time to free a stuck slot: %v (timeout %v; before: never)", time.Since(start), idle)
	f := &envoytest.Filter{Client: client, Role: "downstream", RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED,
		MessageTimeout: 5 * time.Second}
	held, err := f.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Cancel()
	fwd, local, err := held.SendRequest(chatRequest(`{"model":"narrow"}`))
	if err != nil || local != nil {
		t.Fatalf("request after the idle end: %v %v", local, err)
	}
	wantHeader(t, fwd.Headers, "x-resil-target", "narrow")
	if n := lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
		t.Fatalf("slots in use %d with the next request served, want 1", n)
	}
	x2, err := f.RoundTrip(t.Context(), chatRequest(`{"model":"narrow"}`), reply(200))
	if err != nil {
		t.Fatal(err)
	}
	wantLocal(t, x2, 429, "concurrency_limit_exceeded")
}
