package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// decideFunc is the answer of a test RLS to one request.
type decideFunc func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error)

// testRLS is an in-process RLS with scripted answers. It records how many
// requests it saw per key (the request's descriptors rendered as text).
type testRLS struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	decide decideFunc

	mu     sync.Mutex
	perKey map[string]int
	hits   map[uint32]int
	calls  int
}

func (s *testRLS) ShouldRateLimit(_ context.Context, req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	s.mu.Lock()
	s.calls++
	s.perKey[descKey(req)]++
	s.hits[req.GetHitsAddend()]++
	s.mu.Unlock()
	return s.decide(req)
}

func (s *testRLS) snapshot() (calls int, perKey map[string]int, hits map[uint32]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	perKey = make(map[string]int, len(s.perKey))
	for k, v := range s.perKey {
		perKey[k] = v
	}
	hits = make(map[uint32]int, len(s.hits))
	for k, v := range s.hits {
		hits[k] = v
	}
	return s.calls, perKey, hits
}

// startRLS serves decide on a loopback port for the duration of the test.
func startRLS(t *testing.T, decide decideFunc) (string, *testRLS) {
	t.Helper()
	srv := &testRLS{decide: decide, perKey: map[string]int{}, hits: map[uint32]int{}}
	gs := grpc.NewServer()
	ratelimitv3.RegisterRateLimitServiceServer(gs, srv)
	return serveLoopback(t, gs), srv
}

func serveLoopback(t *testing.T, gs *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

// descKey renders a request's descriptors like requestTemplate.keyName.
func descKey(req *ratelimitv3.RateLimitRequest) string {
	var parts []string
	for _, d := range req.GetDescriptors() {
		var pairs []string
		for _, e := range d.GetEntries() {
			pairs = append(pairs, e.GetKey()+"="+e.GetValue())
		}
		parts = append(parts, strings.Join(pairs, ","))
	}
	return strings.Join(parts, ";")
}

// answer returns a response with code for the overall result and for
// each descriptor of req.
func answer(req *ratelimitv3.RateLimitRequest, code ratelimitv3.RateLimitResponse_Code) *ratelimitv3.RateLimitResponse {
	resp := &ratelimitv3.RateLimitResponse{OverallCode: code}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &ratelimitv3.RateLimitResponse_DescriptorStatus{Code: code})
	}
	return resp
}

func allowAll(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
	return answer(req, ratelimitv3.RateLimitResponse_OK), nil
}

// admitFirstPerKey admits the first k requests of every key and refuses
// the rest, whatever the timing: a limit whose window never ends.
func admitFirstPerKey(k int) decideFunc {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		mu.Lock()
		seen[descKey(req)]++
		n := seen[descKey(req)]
		mu.Unlock()
		if n <= k {
			return answer(req, ratelimitv3.RateLimitResponse_OK), nil
		}
		return answer(req, ratelimitv3.RateLimitResponse_OVER_LIMIT), nil
	}
}

// benchJSON runs rlsbench with args plus -json and decodes the report.
func benchJSON(t *testing.T, args ...string) *report {
	t.Helper()
	out, err := bench(t, t.Context(), append(args, "-json")...)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return decodeReport(t, out)
}

func decodeReport(t *testing.T, out []byte) *report {
	t.Helper()
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("decode report: %v\n%s", err, out)
	}
	return &rep
}

// bench runs rlsbench with args and returns its stdout.
func bench(t *testing.T, ctx context.Context, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return stdout.Bytes(), err
}
