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

// startUpstream runs the service in-process with no flags, on
// envoyproxy/ratelimit's environment: env plus listeners on free loopback
// ports and files from a runtime directory holding files.
func startUpstream(t *testing.T, env map[string]string, files map[string]string) *service {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return launch(t, func(s *service) ([]string, map[string]string) {
		all := map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl"}
		for name, addr := range map[string]string{"": s.httpAddr, "GRPC_": s.grpcAddr, "DEBUG_": s.debugAddr} {
			host, port, _ := net.SplitHostPort(addr)
			all[name+"HOST"], all[name+"PORT"] = host, port
		}
		for k, v := range env {
			all[k] = v
		}
		return nil, all
	})
}

// ask posts a RateLimitRequest to /json and returns the HTTP status and
// the statuses' limitRemaining.
func ask(t *testing.T, s *service, body string) (int, []int) {
	t.Helper()
	resp, err := http.Post("http://"+s.httpAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Statuses []struct {
			LimitRemaining int `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	var rem []int
	for _, st := range out.Statuses {
		rem = append(rem, st.LimitRemaining)
	}
	return resp.StatusCode, rem
}

const twoLimits = `domain: d
descriptors:
  - {key: a, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: hour, requests_per_unit: 100}}
`

const (
	bothAB = `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"x"}]},{"entries":[{"key":"b","value":"x"}]}]}`
	onlyB  = `{"domain":"d","descriptors":[{"entries":[{"key":"b","value":"x"}]}]}`
)

// TestChargingFollowsTheEnvironment: on envoyproxy/ratelimit's environment
// a request denied by descriptor a still charges descriptor b, unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; on ours, it charges nothing,
// unless --charging upstream.
func TestChargingFollowsTheEnvironment(t *testing.T) {
	files := map[string]string{"d.yaml": twoLimits}
	tests := []struct {
		name string
		s    func(t *testing.T) *service
		want int // b's remaining after [a,b] admitted, [a,b] denied, [b]
	}{
		{"theirs", func(t *testing.T) *service { return startUpstream(t, map[string]string{"USE_STATSD": "false"}, files) }, 97},
		{"theirs, stop when over", func(t *testing.T) *service {
			return startUpstream(t, map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, files)
		}, 98},
		{"ours", func(t *testing.T) *service { return start(t, writeDir(t, files)) }, 98},
		{"ours, switched", func(t *testing.T) *service { return start(t, writeDir(t, files), "--charging", "upstream") }, 97},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s(t)
			if code, _ := ask(t, s, bothAB); code != http.StatusOK {
				t.Fatalf("first request: %d", code)
			}
			if code, _ := ask(t, s, bothAB); code != http.StatusTooManyRequests {
				t.Fatalf("second request: %d", code)
			}
			if _, rem := ask(t, s, onlyB); len(rem) != 1 || rem[0] != tt.want {
				t.Fatalf("b's remaining %v, want %d", rem, tt.want)
			}
		})
	}
}

// TestShadowModeAndMergeFromTheEnvironment: SHADOW_MODE answers OK over
// the limit; MERGE_DOMAIN_CONFIG joins two files of one domain.
func TestShadowModeAndMergeFromTheEnvironment(t *testing.T) {
	files := map[string]string{
		"1.yaml": "domain: d\ndescriptors: [{key: a, rate_limit: {unit: hour, requests_per_unit: 1}}]\n",
		"2.yaml": "domain: d\ndescriptors: [{key: b, rate_limit: {unit: hour, requests_per_unit: 1}}]\n",
	}
	over := `{"domain":"d","descriptors":[{"entries":[{"key":"b","value":"x"}],"hits_addend":"5"}]}`
	s := startUpstream(t, map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, files)
	if code, _ := ask(t, s, over); code != http.StatusTooManyRequests {
		t.Fatalf("merged: b's limit not in force: %d", code)
	}
	s = startUpstream(t, map[string]string{"MERGE_DOMAIN_CONFIG": "true", "SHADOW_MODE": "true"}, files)
	if code, _ := ask(t, s, over); code != http.StatusOK {
		t.Fatalf("shadow mode: %d", code)
	}
}

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
