package envoyapi_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

func TestExtProcCancelReleasesSlot(t *testing.T) {
	r := newExtRig(t)
	in := chatRequest(`{"model":"narrow"}`)
	s, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SendRequest(in); err != nil {
		t.Fatal(err)
	}
	if n := r.lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
		t.Fatalf("slots in use %d, want 1", n)
	}
	r.drainEnded()
	s.Cancel()
	r.waitEnded(1)
	if n := r.lim.InUse(envoyapi.SlotKey("narrow")); n != 0 {
		t.Fatalf("slots in use %d after cancel, want 0", n)
	}
	x := r.roundTrip(r.downstream(), in, reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "narrow")
}

// TestExtProcErrorReleasesSlot ends a stream with a protocol error (a
// message of no known kind) after the slot was taken.
func TestExtProcErrorReleasesSlot(t *testing.T) {
	r := newExtRig(t)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-resil-role", "downstream")
	g, err := r.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &extprocv3.HttpHeaders{Headers: envoytest.H("x-resil-target", "narrow").Proto(), EndOfStream: true}
	if err := g.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := r.lim.InUse(envoyapi.SlotKey("narrow")); n != 1 {
		t.Fatalf("slots in use %d, want 1", n)
	}
	r.drainEnded()
	if err := g.Send(&extprocv3.ProcessingRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv: %v, want InvalidArgument", err)
	}
	r.waitEnded(1)
	if n := r.lim.InUse(envoyapi.SlotKey("narrow")); n != 0 {
		t.Fatalf("slots in use %d after the error, want 0", n)
	}
}

// TestExtProcTrailersAndRole answers trailers and picks the default role
// without metadata.
func TestExtProcTrailersAndRole(t *testing.T) {
	r := newExtRig(t)
	g, err := r.client.Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &extprocv3.HttpHeaders{Headers: envoytest.H("x-resil-target", "lone").Proto(), EndOfStream: true}
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs}},
		{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
	}
	for _, m := range msgs {
		if err := g.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	first, err := g.Recv()
	if err != nil || first.GetRequestHeaders() == nil {
		t.Fatalf("first response %v, %v", first, err)
	}
	if v := first.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders(); len(v) == 0 {
		t.Errorf("default role did not route: %v", first)
	}
	if m, err := g.Recv(); err != nil || m.GetRequestTrailers() == nil {
		t.Fatalf("request trailers answer %v, %v", m, err)
	}
	if m, err := g.Recv(); err != nil || m.GetResponseTrailers() == nil {
		t.Fatalf("response trailers answer %v, %v", m, err)
	}
	if err := g.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if m, err := g.Recv(); err == nil {
		t.Fatalf("extra message %v", m)
	}
}

// TestExtProcManyStreams runs 1 000 concurrent requests: all complete,
// and every slot is back once the server streams have ended.
func TestExtProcManyStreams(t *testing.T) {
	r := newExtRig(t)
	const n = 1000
	f := r.downstream()
	f.MessageTimeout = 30 * time.Second
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			model := "wide"
			if i%10 == 0 {
				model = "nobody"
			}
			x, err := f.RoundTrip(context.Background(), chatRequest(`{"model":"`+model+`"}`), reply(200))
			if err == nil && model == "wide" && x.Forwarded.Headers.Value("x-resil-target") != "wide" {
				err = fmt.Errorf("request %d routed to %q", i, x.Forwarded.Headers.Value("x-resil-target"))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r.waitEnded(n)
	if got := r.lim.InUse(envoyapi.SlotKey("wide")); got != 0 {
		t.Fatalf("slots in use %d after %d streams, want 0", got, n)
	}
}

// openStreamed starts a streamed response for a request to target narrow
// (max_concurrent 1): the request is routed, the response headers sent.
func (r *extRig) openStreamed(t *testing.T) *envoytest.Stream {
	t.Helper()
	s, err := r.downstream().Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Cancel)
	fwd, _, err := s.SendRequest(chatRequest(`{"model":"narrow","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	wantHeader(t, fwd.Headers, "x-resil-target", "narrow")
	if _, _, err := s.SendResponseHeaders(envoytest.H(":status", "200", "content-type", "text/event-stream"), true); err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *extRig) wantInUse(t *testing.T, target string, want uint64, when string) {
	t.Helper()
	if n := r.lim.InUse(envoyapi.SlotKey(target)); n != want {
		t.Fatalf("%s: %s slots in use %d, want %d", when, target, n, want)
	}
}

// TestExtProcStreamedGenerationHoldsSlot: a long streamed generation
// holds its slot, and keeps others out of the cap, until its last chunk;
// every chunk passes unchanged. The slot follows the stream's messages,
// not a clock: the chunks stand for minutes of generation.
func TestExtProcStreamedGenerationHoldsSlot(t *testing.T) {
	r := newExtRig(t)
	s := r.openStreamed(t)
	for i := range 200 {
		chunk := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"token " + strconv.Itoa(i) + "\"}}]}\n\n")
		out, local, err := s.SendResponseChunk(chunk, false)
		if err != nil || local != nil || string(out) != string(chunk) {
			t.Fatalf("chunk %d: %q %v %v, want it unchanged", i, out, local, err)
		}
		if i%50 == 0 {
			r.wantInUse(t, "narrow", 1, "mid-stream")
			x := r.roundTrip(r.downstream(), chatRequest(`{"model":"narrow"}`), r.noUpstream)
			wantLocal(t, x, 429, "concurrency_limit_exceeded")
		}
	}
	if _, _, err := s.SendResponseChunk([]byte("data: [DONE]\n\n"), true); err != nil {
		t.Fatal(err)
	}
	r.wantInUse(t, "narrow", 0, "after the last chunk")
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	x := r.roundTrip(r.downstream(), chatRequest(`{"model":"narrow"}`), reply(200))
	wantHeader(t, x.Forwarded.Headers, "x-resil-target", "narrow")
}

// TestExtProcStreamedClientDisconnect: a client that goes away mid-stream
// (Envoy resets the ext_proc stream) frees the slot.
func TestExtProcStreamedClientDisconnect(t *testing.T) {
	r := newExtRig(t)
	s := r.openStreamed(t)
	for range 3 {
		if _, _, err := s.SendResponseChunk([]byte("data: {}\n\n"), false); err != nil {
			t.Fatal(err)
		}
	}
	r.wantInUse(t, "narrow", 1, "mid-stream")
	r.drainEnded()
	s.Cancel()
	r.waitEnded(1)
	r.wantInUse(t, "narrow", 0, "after the client went away")
}
