package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig/xdstest"
)

// xdsNode is the node id the service names itself with, as Envoy
// Gateway's Deployment sets it.
const xdsNode = "envoy-ratelimit"

// xdsProcess is the built binary running on envoyproxy/ratelimit's
// environment with CONFIG_TYPE=GRPC_XDS_SOTW against an in-test ADS
// server over mTLS.
type xdsProcess struct {
	xds         *xdstest.Server
	http, debug string // base URLs
	rls         ratelimitv3.RateLimitServiceClient
	health      healthpb.HealthClient
	exited      chan error
	logs        *syncWriter
	signal      func(syscall.Signal)
}

// startXDSProcess starts the ADS server (with no config yet) and the
// binary, and waits until its HTTP port answers.
func startXDSProcess(t *testing.T, extra ...string) *xdsProcess {
	t.Helper()
	p := xdstest.NewPKI(t)
	s := xdstest.Start(t, p, "127.0.0.1:0")
	rd := redistest.Start(t)
	ports := freePorts(t, 3)
	port, grpcPort, debugPort := ports[0], ports[1], ports[2]
	env := append([]string{
		"HOST=127.0.0.1", "PORT=" + port, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort, "DEBUG_PORT=" + debugPort,
		"LOG_LEVEL=debug", "LOG_FORMAT=json", "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rd.Addr,
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + s.Addr, "CONFIG_GRPC_XDS_NODE_ID=" + xdsNode,
		"CONFIG_GRPC_XDS_NODE_METADATA=cluster=ratelimit", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + p.ClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + p.ClientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + p.CAFile, "CONFIG_GRPC_XDS_SERVER_TLS_SAN=" + xdstest.ServerName,
	}, extra...)
	cmd, exited, logs := startProcess(t, buildAs(t, "ratelimit"), env)
	x := &xdsProcess{xds: s, http: "http://127.0.0.1:" + port, debug: "http://127.0.0.1:" + debugPort,
		exited: exited, logs: logs, signal: func(sig syscall.Signal) { cmd.Process.Signal(sig) }}
	waitReady(t, x.http+"/healthcheck", exited, logs)
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	x.rls, x.health = ratelimitv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	return x
}

// healthIs reports whether gRPC health answers want overall and for
// every service name.
func (x *xdsProcess) healthIs(t *testing.T, want healthpb.HealthCheckResponse_ServingStatus) bool {
	t.Helper()
	for _, name := range append([]string{""}, healthNames...) {
		r, err := x.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatalf("health %q: %v", name, err)
		}
		if r.Status != want {
			return false
		}
	}
	return true
}

// poll checks cond every 20 ms until it holds, failing after 20 s (the
// process runs on a busy machine) with the process's logs.
func (x *xdsProcess) poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, x.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getWithCode(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rlConfig is the domain "rl" as Envoy Gateway would send it: small at
// 3/hour, big at bigLimit/hour.
func rlConfig(bigLimit uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "rl-config", Domain: "rl", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "generic_key", Value: "small", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3}},
		{Key: "generic_key", Value: "big", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: bigLimit}},
	}}
}

// decide sends one request for generic_key=value in domain rl.
func (x *xdsProcess) decide(t *testing.T, value string) ratelimitv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := x.rls.ShouldRateLimit(context.Background(), &ratelimitv3.RateLimitRequest{Domain: "rl",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

// TestServesConfigFromXDS starts the built binary as Envoy Gateway does,
// with CONFIG_TYPE=GRPC_XDS_SOTW against an ADS server over mTLS: it is
// not ready until the first config arrives, then enforces it, follows an
// update, keeps the last good set on a bad one (counted), says where its
// config came from, and drains on SIGTERM.
func TestServesConfigFromXDS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	x := startXDSProcess(t)
	x.poll(t, "the xDS stream to open", func() bool { return x.xds.Opened() > 0 })
	if code, body := getWithCode(t, x.http+"/healthcheck"); code != http.StatusInternalServerError || !strings.Contains(body, "no config yet") {
		t.Fatalf("/healthcheck before the first config: %d %q", code, body)
	}
	if !x.healthIs(t, healthpb.HealthCheckResponse_NOT_SERVING) {
		t.Fatal("gRPC health is not NOT_SERVING before the first config")
	}

	x.xds.Set(t, xdsNode, "v1", rlConfig(100))
	x.poll(t, "health SERVING", func() bool { return x.healthIs(t, healthpb.HealthCheckResponse_SERVING) })
	if code, _ := getWithCode(t, x.http+"/healthcheck"); code != http.StatusOK {
		t.Fatalf("/healthcheck after the first config: %d", code)
	}
	admitted, over, late := driveSmallLimit(t, x.rls)
	if admitted+min(late, 1) != 3 || admitted < 2 || over == 0 {
		t.Fatalf("3/hour over xDS: %d admitted (%d denied late first), %d over limit\n%s", admitted, late, over, x.logs.String())
	}
	for i := range 5 {
		if code := x.decide(t, "big"); code != ratelimitv3.RateLimitResponse_OK {
			t.Fatalf("big, request %d under 100/hour: %v", i+1, code)
		}
	}
	x.checkDebugConfig(t, "v1")

	x.xds.Set(t, xdsNode, "v2", rlConfig(2))
	x.poll(t, "v2 in /rlconfig", func() bool {
		return strings.Contains(get(t, x.debug+"/rlconfig"), "rl.generic_key_big: unit=HOUR requests_per_unit=2,")
	})
	admitted = 0
	for i := range 10 {
		if x.decide(t, "big") == ratelimitv3.RateLimitResponse_OK {
			if i >= 2 {
				t.Fatalf("big, request %d after the update to 2/hour was admitted", i+1)
			}
			admitted++
		}
	}
	t.Logf("after the update: %d of 10 admitted", admitted)

	bad := rlConfig(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	x.xds.Set(t, xdsNode, "v3", bad)
	x.poll(t, "the rejection counted", func() bool {
		return strings.Contains(get(t, x.http+"/metrics"), `ratelimit_config_reloads_total{result="error"} 1`)
	})
	if got := get(t, x.debug+"/rlconfig"); !strings.Contains(got, "requests_per_unit=2,") {
		t.Fatalf("the last good set was dropped:\n%s", got)
	}
	if m := get(t, x.http+"/metrics"); !strings.Contains(m, `ratelimit_config_reloads_total{result="ok"} 2`) {
		t.Errorf("applied sets not counted:\n%s", grepLines(m, "config_reloads"))
	}

	x.signal(syscall.SIGTERM)
	select {
	case err := <-x.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, x.logs.String())
		}
		x.exited <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// checkDebugConfig: /debug/config names the xDS source and its version
// and shows the snapshot.
func (x *xdsProcess) checkDebugConfig(t *testing.T, version string) {
	t.Helper()
	var dc struct {
		Source struct {
			Type        string   `json:"type"`
			ServerURL   string   `json:"server_url"`
			NodeID      string   `json:"node_id"`
			TLS         bool     `json:"tls"`
			Connected   bool     `json:"connected"`
			VersionInfo string   `json:"version_info"`
			Resources   []string `json:"resources"`
		} `json:"source"`
		Config struct {
			Domains map[string]json.RawMessage `json:"domains"`
		} `json:"config"`
	}
	body := get(t, x.debug+"/debug/config")
	if err := json.Unmarshal([]byte(body), &dc); err != nil {
		t.Fatalf("/debug/config: %v\n%s", err, body)
	}
	src := dc.Source
	if src.Type != "GRPC_XDS_SOTW" || src.ServerURL != x.xds.Addr || src.NodeID != xdsNode || !src.TLS ||
		!src.Connected || src.VersionInfo != version || len(src.Resources) != 1 || src.Resources[0] != "rl-config" {
		t.Errorf("/debug/config source: %+v", src)
	}
	if _, ok := dc.Config.Domains["rl"]; !ok {
		t.Errorf("/debug/config lacks domain rl:\n%s", body)
	}
}

// TestXDSForceStartServesAtOnce: with FORCE_START_WITHOUT_INITIAL_CONFIG
// the service is SERVING before any config, answers OK for a domain it
// does not know yet, and enforces the config once it arrives.
func TestXDSForceStartServesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	x := startXDSProcess(t, "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
	if code, body := getWithCode(t, x.http+"/healthcheck"); code != http.StatusOK {
		t.Fatalf("/healthcheck without a config, forced: %d %q", code, body)
	}
	if !x.healthIs(t, healthpb.HealthCheckResponse_SERVING) {
		t.Fatal("gRPC health is not SERVING without a config, forced")
	}
	if code := x.decide(t, "small"); code != ratelimitv3.RateLimitResponse_OK {
		t.Fatalf("a domain not configured yet: %v", code)
	}
	x.xds.Set(t, xdsNode, "v1", rlConfig(100))
	x.poll(t, "v1 in /rlconfig", func() bool {
		return strings.Contains(get(t, x.debug+"/rlconfig"), "rl.generic_key_small: unit=HOUR requests_per_unit=3,")
	})
	over := 0
	for range 6 {
		if x.decide(t, "small") == ratelimitv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over == 0 {
		t.Fatalf("3/hour over xDS never refused in 6 requests\n%s", x.logs.String())
	}
}

// TestXDSBadTLSFilesFailAtStart: a client certificate that cannot be read
// stops the start with the file named, before any port is bound.
func TestXDSBadTLSFilesFailAtStart(t *testing.T) {
	missing := t.TempDir() + "/missing.pem"
	ports := freePorts(t, 2)
	err := run(t.Context(), nil, envOf(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": missing,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": missing, "PORT": ports[0], "GRPC_PORT": ports[1]}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "CONFIG_TYPE=GRPC_XDS_SOTW") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("run: %v", err)
	}
}
