// Package e2e drives the real ratelimit-svc binary from outside, as Envoy
// and operators do: flags and environment, the gRPC port (RLS, health),
// the HTTP port, a real redis-server, and SIGTERM. It imports no package of
// the service.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/internal/testnet"
)

// binary builds ratelimit-svc once per test run.
func binary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ratelimit-svc")
	cmd := exec.Command("go", "build", "-o", out, "../cmd/ratelimit-svc")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// proc is one running replica.
type proc struct {
	cmd        *exec.Cmd
	grpc, http string
	exited     chan error
	logs       *strings.Builder
}

func startReplica(t *testing.T, bin, config, redisURL, id string) *proc {
	t.Helper()
	addrs := testnet.FreeAddrs(t, 2)
	p := &proc{grpc: addrs[0], http: addrs[1], exited: make(chan error, 1), logs: new(strings.Builder)}
	p.cmd = exec.Command(bin, "--config", config, "--grpc-addr", p.grpc, "--http-addr", p.http,
		"--log-format", "text", "--shutdown-timeout", "5s")
	p.cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL, "POD_NAME="+id)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() {
		for l := range lines {
			p.logs.WriteString(l + "\n")
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	for range 300 { // readiness: poll the health endpoint, bounded
		if resp, err := http.Get("http://" + p.http + "/healthcheck"); err == nil {
			resp.Body.Close()
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("replica %s never became ready", id)
	return nil
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestReplicasShareALimitAndStopCleanly: two real processes share one
// limit through Redis; SIGTERM turns health NOT_SERVING and exits 0.
func TestReplicasShareALimitAndStopCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rd := redistest.Start(t)
	dir := t.TempDir()
	policy := "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 20}\n"
	if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := binary(t)
	a := startReplica(t, bin, dir, "redis://"+rd.Addr, "e2e-a")
	b := startReplica(t, bin, dir, "redis://"+rd.Addr, "e2e-b")
	clients := []ratelimitv3.RateLimitServiceClient{
		ratelimitv3.NewRateLimitServiceClient(dial(t, a.grpc)),
		ratelimitv3.NewRateLimitServiceClient(dial(t, b.grpc)),
	}
	req := &ratelimitv3.RateLimitRequest{Domain: "e2e", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}},
	}}}
	admitted := 0
	for i := range 60 {
		resp, err := clients[i%2].ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == ratelimitv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("two replicas admitted %d of a shared 20/hour", admitted)
	}

	watch, err := healthpb.NewHealthClient(dial(t, a.grpc)).Watch(context.Background(),
		&healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", m, err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after SIGTERM: %v %v", m, err)
	}
	select {
	case err := <-a.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, a.logs)
		}
		a.exited <- nil // for Cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10 s of SIGTERM")
	}
	// The survivor still decides, and the shared budget is spent.
	resp, err := clients[1].ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != ratelimitv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a replica left: %v %v", resp, err)
	}
	metrics := get(t, "http://"+b.http+"/metrics")
	if !strings.Contains(metrics, `ratelimit_decisions_total{domain="e2e"`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(fmt.Errorf("reading %s: %w", url, err))
	}
	return string(b)
}
