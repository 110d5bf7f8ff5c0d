package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/internal/testnet"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return testnet.FreeAddrs(t, 1)[0]
}

type service struct {
	grpcAddr, httpAddr, debugAddr string
	done                          chan error
	cancel                        context.CancelFunc
	logs                          *syncWriter
}

// start runs the service in-process, as main does, on free loopback ports.
func start(t *testing.T, configPath string, extra ...string) *service {
	t.Helper()
	return startEnv(t, configPath, nil, extra...)
}

// startEnv is start with environment variables.
func startEnv(t *testing.T, configPath string, env map[string]string, extra ...string) *service {
	t.Helper()
	return launch(t, func(s *service) ([]string, map[string]string) {
		args := append([]string{"--config", configPath, "--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr,
			"--debug-addr", s.debugAddr}, extra...)
		return args, env
	})
}

// launch runs the service in-process with the arguments and environment
// argv gives for three free loopback addresses, and waits until it serves.
// A port picked free can be taken by another process before the service
// binds it: a start that fails with an address in use is tried again on
// new ports, twice at most.
func launch(t *testing.T, argv func(s *service) ([]string, map[string]string)) *service {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addrs := testnet.FreeAddrs(t, 3)
		s := &service{grpcAddr: addrs[0], httpAddr: addrs[1], debugAddr: addrs[2],
			done: make(chan error, 1), logs: &syncWriter{b: new(bytes.Buffer)}}
		args, env := argv(s)
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		go func() { s.done <- run(ctx, args, envOf(env), s.logs, io.Discard) }()
		err := waitServing(s)
		if err == nil {
			t.Cleanup(func() { cancel(); <-s.done })
			return s
		}
		cancel()
		if errors.Is(err, errNeverAnswered) {
			<-s.done
		}
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 3 {
			t.Logf("start %d: %v; trying new ports", attempt, err)
			continue
		}
		t.Fatalf("the service did not start: %v\n%s", err, s.logs.String())
	}
}

var errNeverAnswered = errors.New("never answered")

// waitServing polls the service's health check until it answers 200 and
// returns nil, or returns why the service exited first. A slow start on a
// busy machine is waited for, up to 30 s.
func waitServing(s *service) error {
	url := "http://" + s.httpAddr + "/healthcheck"
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.done:
			if err == nil {
				err = errors.New("run returned nil")
			}
			return fmt.Errorf("exited before serving: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: %w", url, errNeverAnswered)
}

// dial connects a gRPC client to the service's gRPC port, closed when
// the test ends.
func (s *service) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServesExampleConfig(t *testing.T) {
	s := start(t, "../../config")
	conn := s.dial(t)
	hc := healthpb.NewHealthClient(conn)
	for _, name := range append([]string{""}, healthNames...) {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", name, r, err)
		}
	}
	rls := ratelimitv3.NewRateLimitServiceClient(conn)
	req := &ratelimitv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.1"}},
	}}}
	resp, err := rls.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != ratelimitv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"198.51.100.2"}],"hits_addend":"1000"}]}`
	if code := post(t, "http://"+s.httpAddr+"/json", body); code != http.StatusTooManyRequests {
		t.Fatalf("/json over limit: %d", code)
	}
	if code := post(t, "http://"+s.httpAddr+"/json", `{"domain":`); code != http.StatusBadRequest {
		t.Fatalf("/json malformed: %d", code)
	}
	metrics := get(t, "http://"+s.httpAddr+"/metrics")
	if !strings.Contains(metrics, `ratelimit_decisions_total{domain="api",mode="local",outcome="over_limit"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
	if cfg := get(t, "http://"+s.debugAddr+"/debug/config"); !strings.Contains(cfg, `"api"`) {
		t.Fatalf("/debug/config:\n%s", cfg)
	}
	if keys := get(t, "http://"+s.debugAddr+"/debug/keys?prefix=api|remote_address=198.51.100.1"); !strings.Contains(keys, "198.51.100.1") {
		t.Fatalf("/debug/keys:\n%s", keys)
	}
}

func TestShutdownTurnsHealthOffAndReturnsNil(t *testing.T) {
	s := start(t, "../../config")
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
		s.done <- nil // for Cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if !strings.Contains(s.logs.String(), "shutting down") {
		t.Fatalf("logs:\n%s", s.logs)
	}
}

func TestReloadPicksUpConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	writeConfigMap(t, dir, "v1", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	s := start(t, dir)
	if code := post(t, "http://"+s.httpAddr+"/json", `{"domain":"d2","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":"5"}]}`); code != http.StatusOK {
		t.Fatalf("before the swap d2 is unknown: %d", code)
	}
	writeConfigMap(t, dir, "v2", "domain: d2\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for range 400 { // the watcher polls every second; wait up to 4 s
		if post(t, "http://"+s.httpAddr+"/json", `{"domain":"d2","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":"5"}]}`) == http.StatusTooManyRequests {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the swapped ConfigMap was not picked up")
}

// writeConfigMap lays out dir as Kubernetes mounts a ConfigMap: the file is
// a symlink into ..data, itself a symlink to a versioned directory.
func writeConfigMap(t *testing.T, dir, version, content string) {
	t.Helper()
	vdir := filepath.Join(dir, ".."+version)
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, "limits.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(vdir), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "limits.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink("..data/limits.yaml", link); err != nil {
			t.Fatal(err)
		}
	}
}

// syncWriter lets the test read logs the service writes concurrently.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func post(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestServesExtProcOnTheSamePort(t *testing.T) {
	s := start(t, "../../config")
	conn := s.dial(t)
	f := &envoytest.Filter{Client: extprocv3.NewExternalProcessorClient(conn), Role: "downstream",
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	req := envoytest.Request{Body: []byte(body), Headers: envoytest.H(":method", "POST", ":path", "/v1/chat/completions",
		":authority", "gw", ":scheme", "http", "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}
	x, err := f.RoundTrip(context.Background(), req, func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"), Body: []byte(`{}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Forwarded.Headers.Value("x-resil-target"); got != "gpt-4o" {
		t.Fatalf("x-resil-target = %q; forwarded %v", got, x.Forwarded.Headers)
	}
	if got := x.Response.Headers.Value("x-ratelimit-limit"); got != "600" {
		t.Fatalf("x-ratelimit-limit = %q; response %v", got, x.Response.Headers)
	}
}

// TestReplicasShareOneLimitThroughRedis runs two replicas against one real
// redis-server: together they admit no more than the limit.
func TestReplicasShareOneLimitThroughRedis(t *testing.T) {
	rd := redistest.Start(t)
	dir := t.TempDir()
	policy := "domain: shared\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 30}}]\n"
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	var clients []ratelimitv3.RateLimitServiceClient
	var first *service
	for i := range 2 {
		s := start(t, dir, "--redis-url", "redis://"+rd.Addr, "--replica-id", strconv.Itoa(i))
		if first == nil {
			first = s
		}
		conn := s.dial(t)
		clients = append(clients, ratelimitv3.NewRateLimitServiceClient(conn))
	}
	req := &ratelimitv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
	}}}
	admitted := 0
	for i := range 100 {
		resp, err := clients[i%2].ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == ratelimitv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted > 30 || admitted < 27 {
		t.Fatalf("two replicas admitted %d of a shared 30/hour", admitted)
	}
	t.Logf("admitted %d of 30 across two replicas", admitted)
	metrics := get(t, "http://"+first.httpAddr+"/metrics")
	for _, want := range []string{`ratelimit_sync_duration_seconds_bucket{call="sync",result="ok"`, `ratelimit_replicas `} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "ratelimit_"))
		}
	}
}

// TestStartsWithoutRedis: a replica started while Redis is unreachable
// has never heard of another one. Past CacheTTL (1 s) from its start it
// enforces each limit alone (fail-static with N = 1) instead of denying
// every request until Redis answers.
func TestStartsWithoutRedis(t *testing.T) {
	dir := t.TempDir()
	policy := "domain: shared\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 5}}]\n"
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir, "--redis-url", "redis://"+freeAddr(t), "--replica-id", "alone", "--log-level", "debug")
	rls := ratelimitv3.NewRateLimitServiceClient(s.dial(t))
	ask := func(v string) bool {
		t.Helper()
		req := &ratelimitv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}},
		}}}
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode == ratelimitv3.RateLimitResponse_OK
	}
	deadline := time.Now().Add(15 * time.Second)
	for try := 0; !ask("first-" + strconv.Itoa(try)); try++ {
		if time.Now().After(deadline) {
			t.Fatalf("every request denied for 15 s with Redis unreachable since the start:\n%s",
				grepLines(get(t, "http://"+s.httpAddr+"/metrics"), "ratelimit_decisions_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 10 {
		if v := "fresh-" + strconv.Itoa(i); !ask(v) {
			t.Errorf("key %s denied at its first request", v)
		}
	}
	admitted := 0
	for range 8 {
		if ask("hot") {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("a key asked 8 times admitted %d, want its limit 5 (one replica, fail-static)", admitted)
	}
	// The Redis client's own messages go to the service's log.
	if logs := s.logs.String(); !strings.Contains(logs, `"component":"redis"`) || !strings.Contains(logs, "dial") {
		t.Errorf("no failed dial of the Redis client in the service's log:\n%s", logs)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTracingRecordsRPCSpans: with tracing on, each gRPC call is a span.
func TestTracingRecordsRPCSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := newTracingWith(exp, "ratelimit", "r0")
	srv := grpc.NewServer(tr.serverOptions()...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.GracefulStop() // the server span ends once the call is over
	tr.provider.ForceFlush(context.Background())
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "grpc.health.v1.Health/Check" {
		t.Fatalf("spans: %v", spans.Snapshots())
	}
}

// TestShutdownDrainsInFlightStreams: on shutdown, gRPC health turns
// NOT_SERVING first, an ext_proc stream already open completes its
// exchange, and only then does run return nil.
func TestShutdownDrainsInFlightStreams(t *testing.T) {
	s := start(t, "../../config", "--shutdown-timeout", "5s")
	conn := s.dial(t)
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watch, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first health: %v %v", m, err)
	}
	f := &envoytest.Filter{Client: extprocv3.NewExternalProcessorClient(conn), Role: "downstream",
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
	stream, err := f.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-4o"}`
	if _, _, err := stream.SendRequest(envoytest.Request{Body: []byte(body), Headers: envoytest.H(":method", "POST",
		":path", "/v1/chat/completions", ":authority", "gw", ":scheme", "http", "content-length", strconv.Itoa(len(body)))}); err != nil {
		t.Fatal(err)
	}
	s.cancel() // SIGTERM
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after SIGTERM: %v %v", m, err)
	}
	stopWatch() // a watcher that saw NOT_SERVING goes away, as a balancer does
	select {
	case err := <-s.done:
		t.Fatalf("run returned %v with a stream in flight", err)
	default:
	}
	resp, _, err := stream.SendResponse(envoytest.Response{Headers: envoytest.H(":status", "200")})
	if err != nil || resp.Headers.Value("x-ratelimit-limit") != "600" {
		t.Fatalf("the in-flight stream did not complete: %v %v", resp.Headers, err)
	}
	if err := stream.Finish(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
		s.done <- nil
	case <-time.After(3 * time.Second): // well under the 5 s shutdown timeout
		t.Fatal("run did not return after the last stream ended")
	}
}

// TestBadFileKeepsLastGoodAndIsCounted: a policy file that stops parsing
// keeps its last good version and counts as a failed reload.
func TestBadFileKeepsLastGoodAndIsCounted(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(file, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir)
	req := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":"2"}]}`
	if code := post(t, "http://"+s.httpAddr+"/json", req); code != http.StatusTooManyRequests {
		t.Fatalf("before: %d", code)
	}
	if err := os.WriteFile(file, []byte("domain: d\ndescriptors: [ {key: k,"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 400 { // the watcher polls every second
		if strings.Contains(get(t, "http://"+s.httpAddr+"/metrics"), `ratelimit_config_reloads_total{result="error"} 1`) {
			if code := post(t, "http://"+s.httpAddr+"/json", req); code != http.StatusTooManyRequests {
				t.Fatalf("the last good policy was dropped: %d", code)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the failed reload was not counted")
}
