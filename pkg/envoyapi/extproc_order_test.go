package envoyapi_test

import (
	"context"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// TestExtProcRequestHeadersTwice: a second request_headers on one stream
// (which Envoy never sends; the fuzzer found it routed again and leaked
// the first slot) ends the stream with INVALID_ARGUMENT, and the slot
// the first took comes back.
func TestExtProcRequestHeadersTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x, lim := idleServer(t, 0)
		s := envoytest.NewMemStream(context.Background(), 4, "x-resil-role", "downstream")
		done := make(chan error, 1)
		go func() { done <- x.Process(s) }()
		exchangeMem(t, s, headersMsg(true, "x-resil-target", "wide"))
		if n := lim.InUse(envoyapi.SlotKey("wide")); n != 1 {
			t.Fatalf("slots in use %d, want 1", n)
		}
		if err := s.SendRequest(headersMsg(true, "x-resil-target", "wide")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Process: %v, want InvalidArgument", err)
		}
		s.Cancel()
		if n := lim.InUse(envoyapi.SlotKey("wide")); n != 0 {
			t.Fatalf("slots in use %d after the stream ended, want 0", n)
		}
	})
}
