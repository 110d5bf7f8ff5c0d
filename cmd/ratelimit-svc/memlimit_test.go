package main

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	tests := []struct {
		give string
		want memoryLimit
	}{
		{"auto", memoryLimit{}},
		{"off", memoryLimit{Off: true}},
		{"1048576", memoryLimit{Bytes: 1 << 20}},
		{"300B", memoryLimit{Bytes: 300}},
		{"64KiB", memoryLimit{Bytes: 64 << 10}},
		{"512MiB", memoryLimit{Bytes: 512 << 20}},
		{"3GiB", memoryLimit{Bytes: 3 << 30}},
		{"2TiB", memoryLimit{Bytes: 2 << 40}},
	}
	for _, tt := range tests {
		got, err := parseMemoryLimit(tt.give)
		if err != nil || got != tt.want {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0", "-1MiB", "1GB", "1.5GiB", "MiB", "9999999TiB", "Auto"} {
		if _, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("parseMemoryLimit(%q): no error", bad)
		}
	}
}

// fakeRoot lays out files below a temporary root as /proc and /sys would.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		want      int64
		wantFile  string
		wantError string
	}{
		{"v2 container namespace", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, 512 << 20, "/sys/fs/cgroup/memory.max", ""},
		{"v2 unlimited", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
		}, 0, "", ""},
		{"v2 nested: the smallest up the tree", map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":     "1073741824\n",
			"sys/fs/cgroup/kubepods/memory.max":          "8589934592\n",
		}, 1 << 30, "/sys/fs/cgroup/kubepods/pod1/memory.max", ""},
		{"v2 host path not mounted: the mount's own", map[string]string{
			"proc/self/cgroup":         "0::/system.slice/docker-abc.scope\n",
			"sys/fs/cgroup/memory.max": "268435456\n",
		}, 256 << 20, "/sys/fs/cgroup/memory.max", ""},
		{"v1", map[string]string{
			"proc/self/cgroup": "12:pids:/\n4:memory:/docker/abc\n0::/\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "209715200\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":            "9223372036854771712\n",
		}, 200 << 20, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", ""},
		{"v1 combined controllers, unlimited", map[string]string{
			"proc/self/cgroup":                           "3:cpu,memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, "", ""},
		{"no cgroup files", map[string]string{}, 0, "", ""},
		{"garbage", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "lots\n",
		}, 0, "", `"lots" is not a number of bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, file, err := cgroupMemoryLimit(fakeRoot(t, tt.files))
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("error %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil || got != tt.want || file != tt.wantFile {
				t.Fatalf("= %d, %q, %v; want %d, %q", got, file, err, tt.want, tt.wantFile)
			}
		})
	}
}

// TestApplyMemoryLimit: auto takes 90% of the container's limit unless
// GOMEMLIMIT is set; an explicit size or off wins; each choice is logged
// and the previous limit comes back after.
func TestApplyMemoryLimit(t *testing.T) {
	root := fakeRoot(t, map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1000000000\n"})
	before := debug.SetMemoryLimit(-1)
	tests := []struct {
		name    string
		m       memoryLimit
		env     map[string]string
		want    int64
		wantLog string
	}{
		{"auto from cgroup", memoryLimit{}, nil, 900000000, `"from":"/sys/fs/cgroup/memory.max"`},
		{"auto with GOMEMLIMIT", memoryLimit{}, map[string]string{"GOMEMLIMIT": "123MiB"}, before, `"from":"GOMEMLIMIT"`},
		{"explicit", memoryLimit{Bytes: 777 << 20}, map[string]string{"GOMEMLIMIT": "123MiB"}, 777 << 20, `"from":"--memory-limit"`},
		{"off", memoryLimit{Off: true}, nil, math.MaxInt64, `"msg":"memory limit: none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			restore := applyMemoryLimit(tt.m, "--memory-limit", envOf(tt.env), root, slog.New(slog.NewJSONHandler(&logs, nil)))
			got := debug.SetMemoryLimit(-1)
			restore()
			if got != tt.want {
				t.Errorf("limit %d, want %d", got, tt.want)
			}
			if after := debug.SetMemoryLimit(-1); after != before {
				t.Errorf("after restore %d, want %d", after, before)
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log lacks %s:\n%s", tt.wantLog, logs.String())
			}
		})
	}
}

// TestRunSetsTheMemoryLimit: the service sets --memory-limit while it
// runs, says so at start, and puts the previous limit back when it stops.
func TestRunSetsTheMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	s := start(t, "../../config", "--memory-limit", "300MiB")
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("limit while running %d, want %d", got, 300<<20)
	}
	if want := `"msg":"memory limit","bytes":314572800,"from":"--memory-limit"`; !strings.Contains(s.logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, grepLines(s.logs.String(), "memory"))
	}
	s.cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
	s.done <- nil // for Cleanup
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit after run %d, want %d", got, before)
	}
}
