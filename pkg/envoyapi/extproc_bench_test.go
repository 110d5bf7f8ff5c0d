package envoyapi_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// benchTargets: one target with every concern on (a rate limit, a token
// budget, a concurrency cap, breakers), limits that admit everything.
const benchTargets = `
targets:
  bench:
    provider: acme
    cluster: acme
    rate_limits: {requests_per_second: 1000000000}
    token_limits: {tokens_per_minute: 4000000000}
    max_concurrent: 100000
`

// benchClient serves the ext_proc server over a real loopback gRPC
// connection.
func benchClient(b *testing.B) extprocv3.ExternalProcessorClient {
	b.Helper()
	snap := policy.Compile(policy.File{Name: "bench.yaml", Data: []byte(benchTargets)})
	if policy.HasErrors(snap.Problems()) {
		b.Fatalf("bench policy: %v", snap.Problems())
	}
	lim := limiter.New()
	x := envoyapi.NewExtProc(staticPolicies{snap}, envoyapi.ExtProcDeps{Limits: lim, Slots: lim, Breakers: resilience.NewRegistry()})
	conn := envoytest.Loopback(b, func(s *grpc.Server) { envoyapi.RegisterExtProc(s, x) })
	return extprocv3.NewExternalProcessorClient(conn)
}

func hdrs(kv ...string) *corev3.HeaderMap {
	return envoytest.H(kv...).Proto()
}

// exchange sends one message and reads its one answer.
func exchange(s extprocv3.ExternalProcessor_ProcessClient, req *extprocv3.ProcessingRequest) error {
	if err := s.Send(req); err != nil {
		return err
	}
	_, err := s.Recv()
	return err
}

// exchanges runs messages in order on s, stopping at the first error.
func exchanges(s extprocv3.ExternalProcessor_ProcessClient, reqs ...*extprocv3.ProcessingRequest) error {
	for _, r := range reqs {
		if err := exchange(s, r); err != nil {
			return err
		}
	}
	return nil
}

func requestHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED}}
}

func bodyMsg(response bool, b []byte, eos bool) *extprocv3.ProcessingRequest {
	hb := &extprocv3.HttpBody{Body: b, EndOfStream: eos}
	if response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}}
}

// sseChunk is one server-sent event of about size bytes: a content delta.
func sseChunk(size int) []byte {
	const head, tail = `data: {"choices":[{"delta":{"content":"`, "\"}}]}\n\n"
	return []byte(head + strings.Repeat("x", max(size-len(head)-len(tail), 1)) + tail)
}

// BenchmarkExtProcSSEChunk is the latency a streamed response chunk
// gains through the downstream role: one chunk sent, its answer read, on
// a stream routed to a target with a token budget (so the chunk is
// parsed for usage). It reports the median and the 99th percentile.
func BenchmarkExtProcSSEChunk(b *testing.B) {
	for _, size := range []int{100, 8 << 10} {
		b.Run("bytes="+strconv.Itoa(size), func(b *testing.B) {
			client := benchClient(b)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-resil-role", "downstream")
			s, err := client.Process(ctx)
			if err != nil {
				b.Fatal(err)
			}
			req := `{"model":"bench","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
			err = exchanges(s, requestHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json"),
				bodyMsg(false, []byte(req), true),
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
					ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":status", "200", "content-type", "text/event-stream")}}})
			if err != nil {
				b.Fatal(err)
			}
			chunk := sseChunk(size)
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if err := exchange(s, bodyMsg(true, chunk, false)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			if err := exchange(s, bodyMsg(true, []byte("data: [DONE]\n\n"), true)); err != nil {
				b.Fatal(err)
			}
			s.CloseSend()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkExtProcStreams is whole downstream streams, as Envoy sends
// them for a buffered 4 KiB JSON request: request headers, the body,
// response headers without a body, then the half-close. streams/s is the
// pair's (this client emulating Envoy and the server, on the same
// cores); streams/cpu-s divides by the process's CPU time (both sides),
// so the server alone does at least that many per core-second.
func BenchmarkExtProcStreams(b *testing.B) {
	client := benchClient(b)
	prompt := strings.Repeat("lorem ipsum ", 4096/12)
	req := []byte(`{"model":"bench","max_tokens":10,"messages":[{"role":"user","content":"` + prompt + `"}]}`)
	md := metadata.AppendToOutgoingContext(context.Background(), "x-resil-role", "downstream")
	cpu0 := cpuTime()
	t0 := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := client.Process(md)
			if err == nil {
				err = exchanges(s, requestHeaders(false, ":method", "POST", ":path", "/v1/chat/completions",
					"content-type", "application/json", "content-length", strconv.Itoa(len(req))),
					bodyMsg(false, req, true),
					&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
						ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":status", "200"), EndOfStream: true}}})
			}
			if err != nil {
				b.Error(err)
				return
			}
			s.CloseSend()
			if _, err := s.Recv(); err == nil {
				b.Error("a message after the last answer")
				return
			}
		}
	})
	b.StopTimer()
	wall, cpu := time.Since(t0).Seconds(), (cpuTime() - cpu0).Seconds()
	b.ReportMetric(float64(b.N)/wall, "streams/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu, "streams/cpu-s")
	}
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
