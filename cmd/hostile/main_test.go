package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// stubRLS answers InvalidArgument to a value over maxValue bytes or a
// limit override, OVER_LIMIT to a value "over", OK otherwise; it records
// every value it saw.
type stubRLS struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	maxValue int
	mu       sync.Mutex
	values   map[string]int
}

func (s *stubRLS) ShouldRateLimit(_ context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	code := ratelimitv3.RateLimitResponse_OK
	for _, d := range req.GetDescriptors() {
		if d.GetLimit() != nil {
			return nil, status.Error(codes.InvalidArgument, "limit override")
		}
		for _, e := range d.GetEntries() {
			if len(e.GetValue()) > s.maxValue {
				return nil, status.Error(codes.InvalidArgument, "value too long")
			}
			s.values[e.GetValue()]++
			if e.GetValue() == "over" {
				code = ratelimitv3.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	return &ratelimitv3.RateLimitResponse{OverallCode: code}, nil
}

// stubExtProc lets every request through, and refuses a request for
// target "full" with 429.
type stubExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (stubExtProc) Process(s grpc.BidiStreamingServer[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{}}
		if h := req.GetRequestHeaders(); h != nil {
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{}}
			for _, hv := range h.GetHeaders().GetHeaders() {
				if hv.GetKey() == "x-resil-target" && string(hv.GetRawValue()) == "full" {
					resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
						ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}}}}
				}
			}
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

// serve runs the stubs on a loopback port with gRPC's default 4 MiB
// receive limit, stopped when the test ends.
func serve(t *testing.T) (string, *stubRLS) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rls := &stubRLS{maxValue: 4096, values: map[string]int{}}
	srv := grpc.NewServer()
	ratelimitv3.RegisterRateLimitServiceServer(srv, rls)
	extprocv3.RegisterExternalProcessorServer(srv, stubExtProc{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String(), rls
}

// runJSON runs one command line and decodes its output into out.
func runJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("%v: output %q: %v", args, stdout.String(), err)
	}
}

func TestCodesNamesEachAnswer(t *testing.T) {
	addr, _ := serve(t)
	var res codesResult
	runJSON(t, &res, "codes", "-addr", addr)
	// The server's proto decoding refuses the value that is not UTF-8:
	// gRPC answers Internal, so the bytes reached the wire as sent.
	want := codesResult{Override: "InvalidArgument", Value: "InvalidArgument", UTF8: "Internal", Bytes: 4<<20 - 64<<10}
	if res != want {
		t.Errorf("codes = %+v, want %+v", res, want)
	}
}

func TestInvalidUTF8RequestKeepsItsFraming(t *testing.T) {
	raw, err := invalidUTF8Request("d")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw.b, []byte("\xff\xfe")) {
		t.Fatalf("request %q lacks the invalid bytes", raw.b)
	}
	var req ratelimitv3.RateLimitRequest
	err = proto.Unmarshal(raw.b, &req)
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("unmarshal = %v, want an invalid UTF-8 error", err)
	}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(bytes.ReplaceAll(raw.b, []byte("\xff\xfe"), []byte("ok")), &req); err != nil {
		t.Fatalf("with the bytes made valid: %v", err)
	}
	if got := req.GetDescriptors()[0].GetEntries()[0].GetValue(); got != "hostile-utf8-ok" {
		t.Errorf("value = %q, want hostile-utf8-ok", got)
	}
}

func TestFloodSendsUniqueKeys(t *testing.T) {
	addr, rls := serve(t)
	var res floodResult
	runJSON(t, &res, "flood", "-addr", addr, "-big", "3", "-big-bytes", "5000", "-keys", "1000", "-per-request", "10", "-c", "4", "-d", "30s")
	if res.Big["InvalidArgument"] != 3 {
		t.Errorf("big answers = %v, want InvalidArgument 3", res.Big)
	}
	if res.KeysSent != 1000 || res.Requests != 100 || res.Answers["OK/OK"] != 100 {
		t.Errorf("sent %d keys in %d requests, answers %v; want 1000 in 100, all OK/OK", res.KeysSent, res.Requests, res.Answers)
	}
	rls.mu.Lock()
	defer rls.mu.Unlock()
	if len(rls.values) != 1000 {
		t.Errorf("server saw %d distinct values, want 1000", len(rls.values))
	}
	for v, n := range rls.values {
		if n != 1 || len(v) != 32 {
			t.Fatalf("value %q seen %d times with %d bytes, want once with 32", v, n, len(v))
		}
	}
}

func TestBodyOverTheServersLimitIsRefused(t *testing.T) {
	addr, _ := serve(t)
	var small, large bodyResult
	runJSON(t, &small, "body", "-addr", addr, "-bytes", "100000")
	runJSON(t, &large, "body", "-addr", addr, "-bytes", "6291456")
	if small.Headers != "continue" || small.Body != "continue" {
		t.Errorf("100 kB body: %+v, want continue", small)
	}
	if large.Body != "ResourceExhausted" {
		t.Errorf("6 MiB body over a 4 MiB server: %+v, want ResourceExhausted", large)
	}
}

func TestStuckReportsNotFreed(t *testing.T) {
	addr, _ := serve(t)
	var free, full stuckResult
	runJSON(t, &free, "stuck", "-addr", addr, "-target", "any", "-wait", "5s", "-every", "50ms")
	runJSON(t, &full, "stuck", "-addr", addr, "-target", "full", "-wait", "300ms", "-every", "50ms")
	if free.FreedSecs == nil || free.Probes != 1 {
		t.Errorf("a target with room: %+v, want freed at the first probe", free)
	}
	if full.FreedSecs != nil || full.Last != "reply 429" || full.Probes < 2 {
		t.Errorf("a full target: %+v, want not freed, probes answered reply 429", full)
	}
}

func TestRateTalliesBySecond(t *testing.T) {
	addr, _ := serve(t)
	var over rateResult
	runJSON(t, &over, "rate", "-addr", addr, "-value", "over", "-rate", "100", "-d", "1500ms")
	sent := 0
	for _, s := range over.Seconds {
		if s.OK != 0 || s.Errors != 0 {
			t.Errorf("second %+v: want OVER_LIMIT only", s)
		}
		sent += s.Over
	}
	// 150 ticks at most; a busy machine drops ticks, never adds them.
	if sent < 50 || sent > 150 {
		t.Errorf("%d answers in 1.5 s at 100/s, want 50–150", sent)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(d, 50); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := percentile(d, 99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of none = %v, want 0", p)
	}
}

func TestBadFlagsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"flood", "-c", "0"},
		{"flood", "-keys", "-1"},
		{"rate", "-rate", "0"},
		{"body", "-bytes", "10"},
		{"nope"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestConnsHoldsAndProbes(t *testing.T) {
	addr, _ := serve(t)
	var mu sync.Mutex
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthcheck" {
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	var res connsResult
	runJSON(t, &res, "conns", "-http", host, "-grpc", addr, "-idle", "5", "-slow", "2", "-probes", "8", "-warm", "1500ms")
	if res.Held != 7 || res.Reopened != 0 {
		t.Errorf("held %d, reopened %d; want 7 held, none reopened", res.Held, res.Reopened)
	}
	if res.GRPC["OK"] != 8 || res.Health["200"] != 8 {
		t.Errorf("probes: gRPC %v, health %v; want 8 OK each", res.GRPC, res.Health)
	}
	if res.P50ms <= 0 || res.P99ms < res.P50ms || res.P99ms >= 2000 {
		t.Errorf("p50 %v ms, p99 %v ms: want 0 < p50 ≤ p99 < the deadline", res.P50ms, res.P99ms)
	}
	mu.Lock()
	defer mu.Unlock()
	if conns < 7+8 {
		t.Errorf("server saw %d connections, want the 7 held and 8 probes at least", conns)
	}
}
