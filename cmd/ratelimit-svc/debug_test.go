package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebugPathsOnlyOnTheDebugListener: the exposed HTTP port answers 404
// for every debug path; the debug listener serves them.
func TestDebugPathsOnlyOnTheDebugListener(t *testing.T) {
	s := start(t, "../../config")
	paths := []string{"/debug/config", "/debug/keys", "/debug/pprof/", "/debug/pprof/profile?seconds=1", "/rlconfig"}
	for _, p := range paths {
		if code := status(t, "http://"+s.httpAddr+p); code != http.StatusNotFound {
			t.Errorf("HTTP port %s: %d, want 404", p, code)
		}
	}
	for _, p := range paths {
		if code := status(t, "http://"+s.debugAddr+p); code != http.StatusOK {
			t.Errorf("debug port %s: %d, want 200", p, code)
		}
	}
	for _, p := range []string{"/healthcheck", "/metrics"} {
		if code := status(t, "http://"+s.httpAddr+p); code != http.StatusOK {
			t.Errorf("HTTP port %s: %d, want 200", p, code)
		}
		if code := status(t, "http://"+s.debugAddr+p); code != http.StatusNotFound {
			t.Errorf("debug port %s: %d, want 404", p, code)
		}
	}
	if idx := get(t, "http://"+s.debugAddr+"/"); !strings.Contains(idx, "/rlconfig: ") {
		t.Errorf("debug index:\n%s", idx)
	}
}

// TestRLConfigDump: /rlconfig prints envoyproxy/ratelimit's dump lines.
func TestRLConfigDump(t *testing.T) {
	dir := t.TempDir()
	policy := `domain: rl
descriptors:
  - key: generic_key
    value: api
    rate_limit: {unit: minute, requests_per_unit: 60}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
        shadow_mode: true
  - key: free
    rate_limit: {unlimited: true}
  - key: nolimit
`
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir)
	want := "rl.generic_key_api: unit=MINUTE requests_per_unit=60, shadow_mode: false\n" +
		"rl.generic_key_api.user: unit=SECOND requests_per_unit=5, shadow_mode: true\n" +
		"rl.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false\n"
	if got := get(t, "http://"+s.debugAddr+"/rlconfig"); got != want {
		t.Errorf("/rlconfig:\n%s\nwant:\n%s", got, want)
	}
}

// TestDebugAddressTakenIsAWarning: the service starts without its debug
// listener when the address is taken, and says so.
func TestDebugAddressTakenIsAWarning(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s := start(t, "../../config", "--debug-addr", taken.Addr().String())
	if code := status(t, "http://"+s.httpAddr+"/healthcheck"); code != http.StatusOK {
		t.Fatalf("healthcheck: %d", code)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "debug listener not started") {
		t.Fatalf("no warning in the logs:\n%s", logs)
	}
}

// TestPrometheusAddrServesMetrics: with USE_PROMETHEUS, /metrics is on
// PROMETHEUS_ADDR as well as on the HTTP port, and nothing else is there;
// USE_STATSD=true is said once and the service goes on.
func TestPrometheusAddrServesMetrics(t *testing.T) {
	prom := freeAddr(t)
	s := startEnv(t, "../../config", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": prom, "USE_STATSD": "true"})
	if n := strings.Count(s.logs.String(), "statsd is not supported"); n != 1 {
		t.Errorf("the statsd note was logged %d times:\n%s", n, s.logs)
	}
	if m := get(t, "http://"+prom+"/metrics"); !strings.Contains(m, "go_goroutines") {
		t.Fatalf("/metrics on PROMETHEUS_ADDR:\n%.300s", m)
	}
	for _, p := range []string{"/json", "/debug/config", "/rlconfig"} {
		if code := status(t, "http://"+prom+p); code != http.StatusNotFound {
			t.Errorf("PROMETHEUS_ADDR %s: %d, want 404", p, code)
		}
	}
	if code := status(t, "http://"+s.httpAddr+"/metrics"); code != http.StatusOK {
		t.Errorf("HTTP port /metrics: %d", code)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDebugConfigNamesItsSource: for files, /debug/config is the
// snapshot with "source" naming the type and the path.
func TestDebugConfigNamesItsSource(t *testing.T) {
	s := start(t, "../../config")
	var dc struct {
		Source struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"source"`
		Version string                     `json:"version"`
		Domains map[string]json.RawMessage `json:"domains"`
	}
	body := get(t, "http://"+s.debugAddr+"/debug/config")
	if err := json.Unmarshal([]byte(body), &dc); err != nil {
		t.Fatalf("/debug/config: %v\n%s", err, body)
	}
	if dc.Source.Type != "FILE" || dc.Source.Path != "../../config" || dc.Version == "" || dc.Domains["api"] == nil {
		t.Errorf("/debug/config: source %+v, version %q, %d domains", dc.Source, dc.Version, len(dc.Domains))
	}
}
