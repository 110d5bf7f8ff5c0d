package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// With -callgrind, BenchmarkScriptCost runs its own
// redis-server under valgrind's callgrind and counts the instructions
// Redis executes for each run of calls: a count that, unlike time, does
// not move with what else the machine runs. It needs valgrind and
// callgrind_control on PATH.

// callgrindCalls bounds the calls of a case counted under callgrind,
// which runs Redis some 50× slower.
const callgrindCalls = 200

// callgrind is a redis-server running under callgrind.
type callgrind struct {
	pid  string
	dir  string // where callgrind dumps
	next int    // the next dump's number
}

// startCallgrind starts redis-server under callgrind for the test and
// returns it and a client of it. The server stops when the test ends.
func startCallgrind(tb testing.TB) (*callgrind, *redis.Client) {
	tb.Helper()
	for _, bin := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("-callgrind: %s not on PATH", bin)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := tb.TempDir()
	// hz 1: the server's cron, counted with the calls, runs once a second.
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--hz", "1")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting callgrind: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Until it listens, dial: a client would log each refused dial.
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			tb.Fatal("redis-server under callgrind exited")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server under callgrind: not listening in 60s: %v", err)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	tb.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis-server under callgrind: %v", err)
	}
	return &callgrind{pid: strconv.Itoa(cmd.Process.Pid), dir: dir, next: 1}, c
}

// count returns the instructions Redis executed while run ran.
func (cg *callgrind) count(tb testing.TB, run func()) float64 {
	tb.Helper()
	if out, err := exec.Command("callgrind_control", "-z", cg.pid).CombinedOutput(); err != nil {
		tb.Fatalf("callgrind_control -z: %v: %s", err, out)
	}
	run()
	if out, err := exec.Command("callgrind_control", "-d", cg.pid).CombinedOutput(); err != nil {
		tb.Fatalf("callgrind_control -d: %v: %s", err, out)
	}
	file := filepath.Join(cg.dir, fmt.Sprintf("cg.out.%d", cg.next))
	cg.next++
	n, err := callgrindTotal(file)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// callgrindTotal reads the instruction total of a callgrind dump.
func callgrindTotal(file string) (float64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("callgrind dump: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		for _, prefix := range []string{"totals: ", "summary: "} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return strconv.ParseFloat(strings.Fields(v)[0], 64)
			}
		}
	}
	return 0, errors.New("callgrind dump " + file + ": no totals")
}

// costCount counts the instructions of one run of v on calls (on a
// fresh Lua state, after a run that warms it), in thousands per call.
func costCount(tb testing.TB, cg *callgrind, c *redis.Client, v costVariant, calls []call) float64 {
	tb.Helper()
	ctx := context.Background()
	sha := loadFresh(tb, c, v)
	run := func() {
		pipe := c.Pipeline()
		for _, cl := range calls {
			if v.function != "" {
				pipe.FCall(ctx, v.function, cl.keys, cl.args...)
			} else {
				pipe.EvalSha(ctx, sha, cl.keys, cl.args...)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatalf("%s: %v", v.name, err)
		}
	}
	run()
	return cg.count(tb, run) / 1000 / float64(len(calls))
}

// costBaseline is, with dir a folder holding another revision's lib.lua,
// record.lua (if it has one) and rate.lua, that rate script, measured
// beside this one; none when dir is empty.
func costBaseline(tb testing.TB, dir string) (costVariant, bool) {
	if dir == "" {
		return costVariant{}, false
	}
	lib, err1 := os.ReadFile(filepath.Join(dir, "lib.lua"))
	rate, err2 := os.ReadFile(filepath.Join(dir, "rate.lua"))
	record, err3 := os.ReadFile(filepath.Join(dir, "record.lua"))
	if errors.Is(err3, os.ErrNotExist) {
		err3 = nil
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		tb.Fatalf("-baseline: %v", err)
	}
	return costVariant{name: "baseline rate.lua", src: string(lib) + string(record) + string(rate)}, true
}
