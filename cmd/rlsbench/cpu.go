package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ (sysconf(_SC_CLK_TCK)), which is 100
// on every Linux architecture this tool targets.
const clockTicks = 100

// cpuUsage is the CPU time one process used during a run.
type cpuUsage struct {
	PID   int    `json:"pid"`
	Label string `json:"label,omitempty"`
	// Seconds is user plus system CPU time over the run.
	Seconds float64 `json:"cpu_seconds"`
	// Per100k is Seconds scaled to 100 000 requests.
	Per100k float64 `json:"cpu_seconds_per_100k_requests"`
	Error   string  `json:"error,omitempty"`
}

// cpuMeter holds the CPU readings taken when a run starts.
type cpuMeter struct {
	pids   []int
	labels []string
	before []time.Duration
}

// startCPU reads the CPU time of every pid, and of this process. A pid
// that cannot be read fails the run before it starts; this process is
// skipped silently when its own stat file is not available.
func startCPU(pids []int) (*cpuMeter, error) {
	m := &cpuMeter{}
	if t, err := readCPU(os.Getpid()); err == nil {
		m.add(os.Getpid(), "rlsbench", t)
	}
	for _, pid := range pids {
		t, err := readCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("-pids: %w", err)
		}
		m.add(pid, "", t)
	}
	return m, nil
}

func (m *cpuMeter) add(pid int, label string, t time.Duration) {
	m.pids = append(m.pids, pid)
	m.labels = append(m.labels, label)
	m.before = append(m.before, t)
}

// finish reads every process again and returns the usage since startCPU.
func (m *cpuMeter) finish(requests uint64) []cpuUsage {
	out := make([]cpuUsage, len(m.pids))
	for i, pid := range m.pids {
		u := cpuUsage{PID: pid, Label: m.labels[i]}
		t, err := readCPU(pid)
		if err != nil {
			u.Error = err.Error()
		} else {
			u.Seconds = (t - m.before[i]).Seconds()
			if requests > 0 {
				u.Per100k = u.Seconds / float64(requests) * 100_000
			}
		}
		out[i] = u
	}
	return out
}

// readCPU returns utime+stime of a process from /proc/<pid>/stat.
func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	ticks, err := parseStatCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parseStatCPU returns utime+stime, in clock ticks, from the text of a
// /proc/<pid>/stat file. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat string) (uint64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	// After the name: field 3 (state) is index 0, so utime (field 14) is
	// index 11 and stime (field 15) index 12.
	f := strings.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return utime + stime, nil
}
