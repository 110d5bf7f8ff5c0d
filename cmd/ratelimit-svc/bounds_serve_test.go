package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// patience bounds every wait on the network: generous, for a busy machine.
const patience = 15 * time.Second

// heldConn is a raw keep-alive HTTP/1.1 connection to the service.
type heldConn struct {
	net.Conn
	r *bufio.Reader
}

// exchange sends one GET and reads its answer; an error means the server
// closed the connection instead of answering.
func (c *heldConn) exchange(path string) (int, error) {
	code, _, err := c.get(path)
	return code, err
}

// get is exchange with the answer's body.
func (c *heldConn) get(path string) (int, string, error) {
	c.SetDeadline(time.Now().Add(patience))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func dialHTTP(t *testing.T, addr string) *heldConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &heldConn{Conn: c, r: bufio.NewReader(c)}
}

// holdHTTP opens a connection the service answered on, so that it holds
// one of the port's slots; a connection shed because the slot of one
// closed a moment ago is not given back yet is retried.
func holdHTTP(t *testing.T, addr string) *heldConn {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		c := dialHTTP(t, addr)
		code, err := c.exchange("/healthcheck")
		if err == nil && code == http.StatusOK {
			return c
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection was answered: %d %v", code, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closedByServer waits until the server closes c, reading nothing.
func closedByServer(c *heldConn) error {
	c.SetReadDeadline(time.Now().Add(patience))
	n, err := c.r.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("the server sent data")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("still open")
	}
	return nil // EOF or reset: closed
}

func shouldRateLimit(t *testing.T, grpcAddr string) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := ratelimitv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{
		Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.9"}}}}})
	if err != nil || resp.OverallCode != ratelimitv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}
}

// TestHTTPConnectionCapSheds: with the HTTP port's connections all held
// and answered, one more takes the place of one of them, which the server
// closes, gRPC still answers, and the shed connections are counted. The
// one that gives way is the oldest the server has marked idle after its
// answer: the first held, unless the server's goroutine had not yet got
// to it (the client reads an answer before the server marks the
// connection idle). connlimit_test.go checks the choice, and that
// connections in a handler are never shed.
func TestHTTPConnectionCapSheds(t *testing.T) {
	s := start(t, "../../config", "--http-max-conns", "3", "--http-idle-timeout", "1m", "--http-read-timeout", "1m")
	http.DefaultClient.CloseIdleConnections() // start's readiness probe held one
	held := []*heldConn{holdHTTP(t, s.httpAddr), holdHTTP(t, s.httpAddr), holdHTTP(t, s.httpAddr)}
	extra := dialHTTP(t, s.httpAddr)
	if code, err := extra.exchange("/healthcheck"); err != nil || code != http.StatusOK {
		t.Fatalf("a fourth connection with the cap of 3 held: %d %v, want answered", code, err)
	}
	// The server closed the one that gave way before it served extra.
	kept, gone := []*heldConn{extra}, []string{}
	for i, c := range held {
		if code, err := c.exchange("/healthcheck"); err == nil && code == http.StatusOK {
			kept = append(kept, c)
		} else {
			gone = append(gone, fmt.Sprintf("held connection %d: %d %v", i, code, err))
		}
	}
	// One gives way to the fourth; the probe's connection, closed by the
	// client but not yet by the server, may have held a slot when the
	// third came and the server still saw it busy: then one more did.
	if len(gone) < 1 || len(gone) > 2 {
		t.Fatalf("%d of the 3 held connections gave way to a fourth, want 1 (or 2 beside the probe's): %v", len(gone), gone)
	}
	held = kept
	shouldRateLimit(t, s.grpcAddr)
	for i, c := range held {
		if code, err := c.exchange("/healthcheck"); err != nil || code != http.StatusOK {
			t.Fatalf("held connection %d: %d %v", i, code, err)
		}
	}
	code, metrics, err := extra.get("/metrics")
	// at least the oldest connection; holdHTTP's retries may add some
	shed := regexp.MustCompile(`(?m)^ratelimit_http_connections_shed_total\{port="http"\} [1-9]`)
	if err != nil || code != http.StatusOK || !shed.MatchString(metrics) {
		t.Errorf("metrics %d %v:\n%s", code, err, grepLines(metrics, "ratelimit_http"))
	}
	if !strings.Contains(s.logs.String(), `"msg":"HTTP connections capped","max_conns":3`) {
		t.Errorf("the cap is not logged:\n%s", grepLines(s.logs.String(), "capped"))
	}
}

// TestHTTPIdleAndHeaderTimeouts: a keep-alive connection left idle is
// closed after --http-idle-timeout, one that never sends its headers after
// --http-read-header-timeout (both well under --http-read-timeout), and
// their slots serve new clients.
func TestHTTPIdleAndHeaderTimeouts(t *testing.T) {
	s := start(t, "../../config", "--http-max-conns", "2", "--http-idle-timeout", "300ms",
		"--http-read-header-timeout", "300ms", "--http-read-timeout", "1m")
	idle := holdHTTP(t, s.httpAddr)
	silent := dialHTTP(t, s.httpAddr)
	if err := closedByServer(idle); err != nil {
		t.Fatalf("idle connection: %v", err)
	}
	if err := closedByServer(silent); err != nil {
		t.Fatalf("connection without headers: %v", err)
	}
	a, b := holdHTTP(t, s.httpAddr), holdHTTP(t, s.httpAddr)
	a.Close()
	b.Close()
}

// TestDebugPortBounds: /debug/keys refuses a ?limit= above
// --debug-keys-max with 400, and pprof a profile or trace longer than
// --debug-profile-max.
func TestDebugPortBounds(t *testing.T) {
	s := start(t, "../../config", "--debug-keys-max", "5", "--debug-profile-max", "2s")
	tests := []struct {
		path string
		want int
		body string
	}{
		{"/debug/keys?limit=5", http.StatusOK, `"keys"`},
		{"/debug/keys", http.StatusOK, `"keys"`},
		{"/debug/keys?limit=6", http.StatusBadRequest, "limit 6 is above the maximum 5 (--debug-keys-max)"},
		{"/debug/keys?limit=-1", http.StatusBadRequest, "positive integer"},
		{"/debug/pprof/profile?seconds=3", http.StatusBadRequest, "seconds 3 is above the maximum 2 (--debug-profile-max)"},
		{"/debug/pprof/trace?seconds=2.5", http.StatusBadRequest, "above the maximum 2"},
		{"/debug/pprof/heap?seconds=100", http.StatusBadRequest, "above the maximum 2"},
		{"/debug/pprof/trace?seconds=0.1", http.StatusOK, ""},
	}
	for _, tt := range tests {
		resp, err := http.Get("http://" + s.debugAddr + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.body) {
			t.Errorf("%s: %d %q, want %d with %q", tt.path, resp.StatusCode, b, tt.want, tt.body)
		}
	}
}

// TestDebugKeysDefaultMaximum: the default maximum is 10 000.
func TestDebugKeysDefaultMaximum(t *testing.T) {
	s := start(t, "../../config")
	if code := status(t, "http://"+s.debugAddr+"/debug/keys?limit=10000"); code != http.StatusOK {
		t.Errorf("limit=10000: %d", code)
	}
	if code := status(t, "http://"+s.debugAddr+"/debug/keys?limit=10001"); code != http.StatusBadRequest {
		t.Errorf("limit=10001: %d", code)
	}
}

// bigPrompt is a chat request of about size bytes, for a target with no
// context_window, which such a prompt would exceed.
func bigPrompt(size int) []byte {
	return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("a", size) + `"}]}`)
}

func bigClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGRPCReadsA6MiBPromptByDefault: a buffered 6 MiB body, which
// gRPC's own 4 MiB default refuses, goes through ext_proc.
func TestGRPCReadsA6MiBPromptByDefault(t *testing.T) {
	s := start(t, "../../config")
	f := &envoytest.Filter{Client: extprocv3.NewExternalProcessorClient(bigClient(t, s.grpcAddr)), Role: "downstream",
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, MessageTimeout: patience}
	body := bigPrompt(6 << 20)
	req := envoytest.Request{Body: body, Headers: envoytest.H(":method", "POST", ":path", "/v1/chat/completions",
		":authority", "gw", ":scheme", "http", "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}
	x, err := f.RoundTrip(context.Background(), req, func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-type", "application/json"), Body: []byte(`{}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Forwarded.Headers.Value("x-resil-target"); got != "gpt-4o-mini" || len(x.Forwarded.Body) != len(body) {
		t.Fatalf("forwarded target %q, body %d bytes of %d", got, len(x.Forwarded.Body), len(body))
	}
}

// TestGRPCRefusesMessagesAboveMaxRecvBytes: with --grpc-max-recv-bytes
// set small, a larger ext_proc body or RLS request fails
// RESOURCE_EXHAUSTED, and a small call on the same server still works.
func TestGRPCRefusesMessagesAboveMaxRecvBytes(t *testing.T) {
	s := start(t, "../../config", "--grpc-max-recv-bytes", strconv.Itoa(1<<20))
	conn := bigClient(t, s.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Send may fail with io.EOF once the server ended the stream; the
	// status comes with Recv either way.
	stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: bigPrompt(6 << 20), EndOfStream: true}}})
	if _, err = stream.Recv(); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("6 MiB ext_proc body: %v, want ResourceExhausted", err)
	}
	_, err = ratelimitv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &ratelimitv3.RateLimitRequest{
		Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strings.Repeat("1", 2<<20)}}}}})
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB RLS request: %v, want ResourceExhausted", err)
	}
	shouldRateLimit(t, s.grpcAddr)
}
