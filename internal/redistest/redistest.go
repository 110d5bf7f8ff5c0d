// Package redistest starts real Redis servers for tests: one node, or a
// Redis Cluster of three masters, each a redis-server process on a free
// loopback port with no persistence, stopped when the test ends.
//
// When redis-server is not installed the test is skipped, unless the
// environment variable CI is "true": there a missing Redis fails the test,
// so a CI image without Redis cannot pass silently.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server or a cluster may take to come up.
const startTimeout = 15 * time.Second

// Server is a running redis-server.
type Server struct {
	// Addr is host:port on the loopback interface.
	Addr string

	proc   *os.Process
	exited chan struct{} // closed once the process has been waited for
	log    *bytes.Buffer // its output; read only after exited
	once   sync.Once
}

// Start runs a redis-server for the test and waits until it answers PING.
// args are extra server options ("--maxmemory", "1mb", ...).
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return startNode(tb, lookPath(tb, "redis-server"), false, args)
}

func startNode(tb testing.TB, bin string, cluster bool, args []string) *Server {
	tb.Helper()
	var last error
	for range 5 { // a free port may be taken before the server binds it
		s, err := start(bin, tb.TempDir(), cluster, args)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		last = err
	}
	tb.Fatalf("redistest: %v", last)
	return nil
}

// Client returns a client of s that does not retry, closed when the test
// ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Stop stops the server; later calls do nothing. Tests of an unreachable
// Redis call it; the test's cleanup calls it anyway.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.proc.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.proc.Kill()
			<-s.exited
		}
	})
}

func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: %s not found on PATH (required in CI)", name)
	}
	tb.Skipf("redistest: %s not found on PATH", name)
	return ""
}

// start runs one server. A first argument ending in ".conf" is a
// configuration file, which redis-server wants before any option.
func start(bin, dir string, cluster bool, args []string) (*Server, error) {
	port, err := freePort(cluster)
	if err != nil {
		return nil, err
	}
	return startOn(bin, dir, port, args)
}

// startOn runs a server on port and waits until it answers PING.
func startOn(bin, dir string, port int, args []string) (*Server, error) {
	var argv []string
	if len(args) > 0 && strings.HasSuffix(args[0], ".conf") {
		argv, args = append(argv, args[0]), args[1:]
	}
	argv = append(argv, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	argv = append(argv, args...)
	s := &Server{
		Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited: make(chan struct{}),
		log:    new(bytes.Buffer),
	}
	cmd := exec.Command(bin, argv...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	s.proc = cmd.Process
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitPing(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("redis-server on %s: %w\n%s", s.Addr, err, tail(s.log.String()))
	}
	return s, nil
}

// freePort finds a free loopback port; for a cluster node, its bus port
// (port + 10000) must be free too.
func freePort(cluster bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

// waitPing waits until the server answers PING or exits. The answer must
// come from this server's own process: another test's server that took
// the port first answers too, while this one fails to bind it and exits;
// the test would then use the other's server, gone when that test ends.
func (s *Server) waitPing() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		var info string
		if err == nil {
			info, err = c.Info(ctx, "server").Result()
		}
		cancel()
		if err == nil {
			if pid := infoField(info, "process_id"); pid != strconv.Itoa(s.proc.Pid) {
				return fmt.Errorf("the port answers for process %s, not this server's %d", pid, s.proc.Pid)
			}
			return nil
		}
		select {
		case <-s.exited:
			return errors.New("exited before answering PING")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer in %v: %w", startTimeout, err)
		}
	}
}

func splitAddr(addr string) (host, port string, err error) { return net.SplitHostPort(addr) }

// infoField is the value of field in an INFO reply, "" if absent.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}
